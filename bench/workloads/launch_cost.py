# What one kernel launch costs the CPU, in a tight loop: `driver` launches an empty PTX kernel
# through the CUDA driver API (ctypes; no framework), `torch` a tiny in-place add (the runtime's
# cudaLaunchKernel under PyTorch's dispatch). Run bare and under `gaptop record`, the difference
# is what gaptop adds to each launch. Prints "LAUNCH_NS mode=M median=X min=Y" (per launch, over
# ROUNDS rounds of N launches, each round's launches timed without its sync).
# usage: python3 launch_cost.py driver|torch [N] [ROUNDS]
import ctypes, statistics, sys, time

mode = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 30

if mode == "driver":
    from cudadrv import byref, c_void_p, ck, cuda, init

    init()
    PTX = b".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n\0"
    mod = c_void_p()
    ck(cuda.cuModuleLoadData(byref(mod), PTX), "cuModuleLoadData")
    fn = c_void_p()
    ck(cuda.cuModuleGetFunction(byref(fn), mod, b"noop"), "cuModuleGetFunction")
    cuda.cuLaunchKernel.argtypes = [c_void_p] + [ctypes.c_uint] * 7 + [c_void_p] * 3
    launch = cuda.cuLaunchKernel

    def rnd():
        t = time.perf_counter_ns()
        for _ in range(N):
            launch(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        dt = time.perf_counter_ns() - t
        ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        return dt
else:
    import torch
    x = torch.zeros(1, device="cuda")

    def rnd():
        t = time.perf_counter_ns()
        for _ in range(N):
            x.add_(1)
        dt = time.perf_counter_ns() - t
        torch.cuda.synchronize()
        return dt

for _ in range(3):
    rnd()
per = [rnd() / N for _ in range(ROUNDS)]
print(f"LAUNCH_NS mode={mode} median={statistics.median(per):.0f} min={min(per):.0f}", flush=True)
