# A workload with gaps planted at known functions, so a test can check that gaptop blames the
# right code: `host_stall` burns CPU before a launch (host_wait, launched from `host_stall`),
# `sync_then_launch` synchronizes before launching (reason sync), the rest is fast.
import sys, time, torch
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
x = torch.randn(1024, device="cuda")

def host_stall(x):
    t = time.perf_counter()
    while time.perf_counter() - t < 200e-6:  # 200 µs of host work
        pass
    return x * 2.0

def sync_then_launch(x):
    torch.cuda.synchronize()
    return x + 1.0

def fast(x):
    for _ in range(4):
        x = x * 0.5
    return x

for _ in range(10):
    fast(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(iters):
    y = fast(x); y = host_stall(y); y = sync_then_launch(y)
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD planted iters={iters} wall_s={dt:.3f} per_iter_us={dt/iters*1e6:.1f}")
