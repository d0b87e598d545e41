# What every program played against the fake libcupti (no GPU) does first, as the CUDA driver
# would: load the fake (through LD_LIBRARY_PATH, as the collector finds it), then load and
# start the collector (CUDA_INJECTION64_PATH, InitializeInjection).
import ctypes, os

fake = ctypes.CDLL("libcupti.so")
fake.fake_launch.restype = ctypes.c_uint32
collector = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
assert collector.InitializeInjection() == 1
sum(range(10000))  # the interpreter runs the collector's pending calibration here
