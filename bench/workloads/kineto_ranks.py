# torch.profiler traces of the ranks of a run, for `gaptop report DIR`: a data-parallel step
# over NCCL where rank 1 is planted late (it sleeps before its backward, so DDP's all-reduces
# wait for it), then CUDA graph replays of a chain of small kernels. Each rank writes its own
# trace (with distributedInfo) into OUT_DIR:
#   python3 -m torch.distributed.run --nproc-per-node 2 kineto_ranks.py OUT_DIR
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): on a shared host it can take the GPUs down.
import os, sys, time
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch, torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

def main():
    out = sys.argv[1]
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(64, 1024, device="cuda")

    def chain(v):
        for _ in range(20):
            v = v * 1.0001 + 0.0001
        return v

    v = torch.randn(4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            chain(v)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain(v)

    def late_backward(loss):
        time.sleep(0.01)
        loss.backward()

    handler = tensorboard_trace_handler(out, worker_name=f"rank-{rank}", use_gzip=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 schedule=schedule(wait=1, warmup=2, active=5), on_trace_ready=handler) as p:
        for _ in range(8):
            opt.zero_grad()
            loss = ddp(x).square().mean()
            if rank == 1:
                late_backward(loss)
            else:
                loss.backward()
            opt.step()
            for _ in range(5):
                g.replay()
            p.step()
    torch.cuda.synchronize()
    print(f"WORKLOAD kineto_ranks rank={rank} traces in {out}")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
