# The CUDA driver through ctypes, for the workloads that launch without a framework
# (ctypes_launch.py, launch_cost.py): the library, a checker of its results, and the device's
# primary context made current.
import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
c_void_p, byref = ctypes.c_void_p, ctypes.byref


def ck(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: CUresult {r}")


def init():
    """cuInit, then device 0's primary context made current."""
    ck(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    ck(cuda.cuDeviceGet(byref(dev), 0), "cuDeviceGet")
    ctx = c_void_p()
    ck(cuda.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ck(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
