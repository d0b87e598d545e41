# CUDA graph replays next to the same ops run eagerly: gaptop must attribute the replayed
# kernels to the graph launch (reason "graph"), not count the graph's inside as host idle.
import sys, time, torch
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
x = torch.randn(4096, device="cuda")

def step(x):
    for _ in range(20):
        x = x * 1.0001 + 0.0001
    return x

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        step(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = step(x)

def replay():
    g.replay()

def eager():
    return step(x)

torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(iters):
    replay()
    eager()
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD graphs iters={iters} wall_s={dt:.3f} per_iter_us={dt/iters*1e6:.1f}")
