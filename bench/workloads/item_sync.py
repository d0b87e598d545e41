# A training loop that reads its loss back every step (issue 41's GPU check): `loss.item()`
# waits for the step's kernels, so the next step's launches wait for it, and the GPU idles while
# the CPU then launches the next step. gaptop should name the line (`train  item_sync.py:NN`,
# the `.item()`) as a sync in the loop. --fix keeps the losses on the GPU and reads them once
# at the end.
#   python3 item_sync.py [STEPS] [--fix]
import sys, time
import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 200
fix = "--fix" in sys.argv
torch.manual_seed(0)
net = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]).cuda()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")


def train(losses):
    loss = net(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if fix:
        losses.append(loss.detach())
    else:
        losses.append(loss.item())  # the sync: waits for this step's kernels


losses = []
for _ in range(10):
    train(losses)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    train(losses)
torch.cuda.synchronize()
wall = time.perf_counter() - t0
last = float(losses[-1])
print(f"WORKLOAD item_sync iters={steps} wall_s={wall:.3f} per_iter_ms={1e3 * wall / steps:.3f} "
      f"fix={'deferred' if fix else 'none'} loss={last:.6f}", flush=True)
