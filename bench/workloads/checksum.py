# A deterministic launch-bound workload that prints a checksum of its result, so a run under
# gaptop (even one whose viewer is killed halfway) can be compared with a bare run.
import sys, time, torch
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
torch.manual_seed(0)
x = torch.randn(4096, device="cuda", dtype=torch.float64)
w = torch.randn(4096, device="cuda", dtype=torch.float64)
torch.cuda.synchronize(); t = time.perf_counter()
for i in range(iters):
    x = torch.tanh(x * 0.999 + w * 1e-3)
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD checksum iters={iters} wall_s={dt:.3f} per_iter_us={dt/iters*1e6:.1f}")
print(f"CHECKSUM {x.sum().item():.12e}")
