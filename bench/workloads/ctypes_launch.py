# Kernel launches straight from Python through the CUDA driver API (ctypes; no framework, no
# CUDA runtime): a one-thread PTX kernel `tick` that adds one to a counter, launched LAUNCHES
# times a step with some Python work between launches, and a context sync at each step's end.
# Every launch has a Python stack (step > launch), whichever CUDA runtime a profiler knows: it
# is the workload for Nsight Systems' Python backtraces (docs/perf.md, "Nsight Systems
# captures"). The counter read back at the end says how many launches ran.
# `ctypes_launch.py STEPS cudart LIBCUDART` makes the same steps of CUDA runtime calls instead
# (cudaMemsetAsync of the counter, LAUNCHES a step), for a profiler that traces only those.
import ctypes, sys
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
cudart = ctypes.CDLL(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "cudart" else None
LAUNCHES = 20
from cudadrv import byref, c_void_p, ck, cuda, init

init()
PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry tick(.param .u64 p)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r1, [%rd2];
  add.s32 %r2, %r1, 1;
  st.global.u32 [%rd2], %r2;
  ret;
}
\0"""
mod = c_void_p()
ck(cuda.cuModuleLoadData(byref(mod), PTX), "cuModuleLoadData")
fn = c_void_p()
ck(cuda.cuModuleGetFunction(byref(fn), mod, b"tick"), "cuModuleGetFunction")
buf = ctypes.c_uint64()
ck(cuda.cuMemAlloc_v2(byref(buf), ctypes.c_size_t(4)), "cuMemAlloc")
ck(cuda.cuMemsetD32_v2(buf, ctypes.c_uint(0), ctypes.c_size_t(1)), "cuMemsetD32")
arg = ctypes.c_uint64(buf.value)
params = (c_void_p * 1)(ctypes.addressof(arg))
one = ctypes.c_uint(1)
cuda.cuLaunchKernel.argtypes = [c_void_p] + [ctypes.c_uint] * 7 + [c_void_p] * 3


def launch():
    if cudart is not None:
        ck(cudart.cudaMemsetAsync(ctypes.c_void_p(buf.value), 7, ctypes.c_size_t(4), None), "cudaMemsetAsync")
        return
    ck(cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")


def host_work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def step():
    for _ in range(LAUNCHES):
        launch()
        host_work(500)
    ck(cuda.cuCtxSynchronize(), "cuCtxSynchronize")


for _ in range(steps):
    step()
out = ctypes.c_uint32()
ck(cuda.cuMemcpyDtoH_v2(byref(out), buf, ctypes.c_size_t(4)), "cuMemcpyDtoH")
if cudart is not None:
    print(f"WORKLOAD ctypes_launch cudart steps={steps} memsets={steps * LAUNCHES} value={out.value:#x}")
else:
    print(f"WORKLOAD ctypes_launch steps={steps} launches={out.value} expected={steps * LAUNCHES}")
