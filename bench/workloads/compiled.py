# torch.compile'd code: Inductor's Triton kernels are launched through the driver API
# (cuLaunchKernel*), not cudaLaunchKernel; gaptop must still find each launch and its stack.
import sys, time, torch
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
x = torch.randn(1, 32, 1, 128, device="cuda")
cos = torch.randn(1, 1, 1, 64, device="cuda"); sin = torch.randn(1, 1, 1, 64, device="cuda")

def rope(x):
    x1, x2 = x[..., :64], x[..., 64:]
    out = x
    for _ in range(8):
        a = x1 * cos; b = x2 * sin; c = x1 * sin; d = x2 * cos
        out = torch.cat([a - b, c + d], dim=-1) * 1.0001
    return out

try:
    fused = torch.compile(rope)
    for _ in range(3):
        fused(x)
except Exception as e:  # no compiler on the machine, for example
    print(f"COMPILE UNAVAILABLE: {type(e).__name__}: {str(e)[:200]}")
    sys.exit(0)

def compiled_step():
    return fused(x)

torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(iters):
    compiled_step()
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD compiled iters={iters} wall_s={dt:.3f} per_iter_us={dt/iters*1e6:.1f}")
