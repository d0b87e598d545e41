# NVTX ranges as Megatron, NeMo and vLLM emit them, through torch.cuda.nvtx: a range `step N`
# around each iteration and a range `layer I` around each of its layers (a small MLP stack at
# batch 1, launch-bound), with a host sync at each step's end. gaptop should show the ranges as
# the outermost frames of each launch's stack (`step N` › `layer I` › the Python frames) and
# take the `step N` ranges as the steps (family `step #`).
import sys, time, torch
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 300
nvtx = torch.cuda.nvtx
torch.manual_seed(0)
layers = [torch.nn.Linear(256, 256, device="cuda") for _ in range(6)]
x = torch.randn(1, 256, device="cuda")

def layer(i, h):
    nvtx.range_push(f"layer {i}")
    h = torch.nn.functional.gelu(layers[i](h)) * 0.5 + h
    nvtx.range_pop()
    return h

def step(k):
    nvtx.range_push(f"step {k}")
    h = x
    for i in range(len(layers)):
        h = layer(i, h)
    h.sum().item()  # the step's result back on the host, as a decode loop's token
    nvtx.range_pop()

with torch.no_grad():
    for k in range(10):
        step(k)
    torch.cuda.synchronize(); t = time.perf_counter()
    for k in range(10, 10 + iters):
        step(k)
    torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD nvtx_steps iters={iters} wall_s={dt:.3f} per_iter_us={dt/iters*1e6:.1f}")
