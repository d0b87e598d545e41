# A small data-parallel training step over NCCL, run with
#   gaptop record -o ddp.rec -- python3 -m torch.distributed.run --nproc-per-node 2 ddp.py
# Rank 1 is planted late at every collective: its backward sleeps first (DDP's all-reduces wait
# for it), and its explicit all-reduces are issued from `late_allreduce` after a sleep.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): on a shared host it can take the GPUs down.
import os, time
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch, torch.distributed as dist

def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(64, 1024, device="cuda")

    def late_backward(loss):
        time.sleep(0.01)
        loss.backward()

    def late_allreduce(t):
        time.sleep(0.005)
        dist.all_reduce(t)

    t0 = time.perf_counter()
    for _ in range(20):
        opt.zero_grad()
        loss = ddp(x).square().mean()
        if rank == 1:
            late_backward(loss)
        else:
            loss.backward()
        opt.step()
    t = torch.ones(1 << 20, device="cuda")
    for _ in range(20):
        if rank == 1:
            late_allreduce(t)
        else:
            dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"WORKLOAD ddp rank={rank} wall_s={time.perf_counter() - t0:.3f} sum={t[0].item():.0f}")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
