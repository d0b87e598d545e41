# A small training loop with NVTX ranges and a CUDA graph (docs/gpu-todo.md, "Nsight Systems on
# the H200"): each step a `train_step` range holding `forward` and `backward` push/pop ranges,
# an optimizer step, a replay of a graph of small kernels, and a `host_sync` start/end range
# around the loss read back. Captured under nsys and under gaptop, the two reports compare.
import sys, torch
from torch.cuda import nvtx
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(32, 256, device=dev)
static = torch.randn(32, 256, device=dev)
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        y = static * 2 + 1
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    y = (static * 2 + 1).relu_() * 3


def train_step():
    nvtx.range_push("forward")
    loss = model(x).square().mean()
    nvtx.range_pop()
    nvtx.range_push("backward")
    loss.backward()
    nvtx.range_pop()
    opt.step()
    opt.zero_grad()
    g.replay()
    r = nvtx.range_start("host_sync")
    v = loss.item()
    nvtx.range_end(r)
    return v


for step in range(steps):
    nvtx.range_push("train_step")
    v = train_step()
    nvtx.range_pop()
torch.cuda.synchronize()
print(f"WORKLOAD nvtx_loop steps={steps} loss={v:.6f}")
