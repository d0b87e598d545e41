# Two processes share one GPU, each labelled by RANK: the multi-process path of `gaptop run`
# without NCCL. Each rank plants a stall in a function named after it.
import os, sys, time, torch, subprocess
if len(sys.argv) > 1 and sys.argv[1] == "worker":
    rank = int(os.environ["RANK"])
    x = torch.randn(1 << 16, device="cuda")
    def stall_rank0(x):
        time.sleep(0.002); return x * 2
    def stall_rank1(x):
        time.sleep(0.004); return x + 1
    for _ in range(50):
        x = stall_rank0(x) if rank == 0 else stall_rank1(x)
        x = x * 0.5
    torch.cuda.synchronize()
    print(f"rank {rank} done")
    sys.exit(0)
procs = [subprocess.Popen([sys.executable, __file__, "worker"], env={**os.environ, "RANK": str(r)}) for r in range(2)]
sys.exit(max(p.wait() for p in procs))
