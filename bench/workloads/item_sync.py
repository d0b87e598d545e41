# A training loop that reads its loss back every step (issue 41's GPU check). Each step first
# runs a pure-Python sampler on the host (about HOST_MS of CPU: it picks the step's slice of the
# data), then launches a GPU-heavy step (8 bf16 layers of 4096, forward, backward, SGD), then
# `loss.item()`, which waits for the step's kernels. So the next step's sampler cannot run while
# this step's GPU work does: the GPU idles through every sampler call. gaptop should name the
# `.item()` line (`train item_sync.py`) as a sync in the loop.
# --fix keeps the losses on the GPU and reads them every LOG_EVERY steps (one sync a log line,
# as training loops log): the sampler then runs while the previous step's kernels do.
#   python3 item_sync.py [STEPS] [--fix] [--host-ms MS] [--host-n N] [--log-every N]
# Steps are timed in groups of LOG_EVERY between two torch.cuda.synchronize() calls (in both
# modes), and the run ends with the usual lines
#   WORKLOAD item_sync iters=STEPS ... host_n=N sampler_ms=MS launch_ms=MS [item_ms=MS]
#     (the host's median time a step in the sampler, in the step's Python up to opt.step(), and
#     in `.item()`, which is the sync's wait)
#   STEP_MS median=MS mean=MS steps=N    (the median over groups of a group's time a step)
import argparse, random, statistics, time
import torch

ap = argparse.ArgumentParser(prog="item_sync.py")
ap.add_argument("steps", nargs="?", type=int, default=200)
ap.add_argument("--fix", action="store_true", help="defer the loss reads to one every --log-every steps")
ap.add_argument("--host-ms", type=float, default=2.0, help="the sampler's CPU a step")
ap.add_argument("--host-n", type=int, help="shuffles a sampler call (default: sized to --host-ms here; "
                "give one count to time every run with the same sampler)")
ap.add_argument("--log-every", type=int, default=20)
a = ap.parse_args()
if a.steps < a.log_every or a.log_every < 1:
    raise SystemExit(f"error: steps ({a.steps}) must be at least --log-every ({a.log_every}), which is at least 1")

torch.manual_seed(0)
WIDTH, ROWS, LAYERS, SLICES = 4096, 2048, 8, 4
net = torch.nn.Sequential(*[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU())])
net = net.cuda().to(torch.bfloat16)
opt = torch.optim.SGD(net.parameters(), lr=1e-4)
data = torch.randn(ROWS * SLICES, WIDTH, device="cuda", dtype=torch.bfloat16)


class Sampler:
    """Pure-Python index bookkeeping, about `ms` of CPU a call; returns the step's first row."""

    def __init__(self, ms, n=None):
        self.rng = random.Random(0)
        self.order = list(range(512))
        self.n = n or 1
        if not n:
            took = []
            for k in range(21):
                t0 = time.perf_counter()
                self.pick(k)
                took.append(time.perf_counter() - t0)
            self.n = max(1, round(ms / 1e3 / max(statistics.median(took), 1e-7)))

    def pick(self, k):
        for _ in range(self.n):
            self.rng.shuffle(self.order)
            self.order.sort(key=lambda i: (i * 2654435761 + k) % 521)
        return (self.order[0] % SLICES) * ROWS


sampler = Sampler(a.host_ms, a.host_n)
pending = []


phases = {"sampler": [], "launch": [], "item": []}  # ms a step of each part, on the host


def train(k, losses):
    t0 = time.perf_counter()
    start = sampler.pick(k)
    t1 = time.perf_counter()
    loss = net(data.narrow(0, start, ROWS)).float().square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    t2 = time.perf_counter()
    phases["sampler"].append((t1 - t0) * 1e3)
    phases["launch"].append((t2 - t1) * 1e3)
    if a.fix:
        pending.append(loss.detach())
        if len(pending) == a.log_every:
            losses.extend(torch.stack(pending).tolist())  # one read a log line
            pending.clear()
    else:
        losses.append(loss.item())  # the sync: waits for this step's kernels
        phases["item"].append((time.perf_counter() - t2) * 1e3)


losses = []
for k in range(a.log_every):
    train(k, losses)
torch.cuda.synchronize()
for v in phases.values():
    v.clear()
per_step, t_all = [], time.perf_counter()
for g in range(a.steps // a.log_every):
    t0 = time.perf_counter()
    for k in range(a.log_every):
        train(g * a.log_every + k, losses)
    torch.cuda.synchronize()
    per_step.append((time.perf_counter() - t0) / a.log_every * 1e3)
wall = time.perf_counter() - t_all
n = len(per_step) * a.log_every
print(f"WORKLOAD item_sync iters={n} wall_s={wall:.3f} per_iter_ms={1e3 * wall / n:.3f} "
      f"fix={'deferred' if a.fix else 'none'} host_n={sampler.n} loss={losses[-1]:.6f} "
      + " ".join(f"{p}_ms={statistics.median(v):.3f}" for p, v in phases.items() if v), flush=True)
print(f"STEP_MS median={statistics.median(per_step):.3f} mean={statistics.fmean(per_step):.3f} steps={n}", flush=True)
