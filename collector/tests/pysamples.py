# A program whose CPU time is in known Python functions, for the viewer's reading of Python
# frames from outside (tests/pysamples.rs): the collector's calibration writes the layout into
# GAPTOP_PYTHON_LAYOUT_DIR, then the main thread works in `blur` (under `Noisy.__getitem__`),
# calling math.factorial (C code under the interpreter; map calls __getitem__), and `spin`.
import ctypes, math, os, sys, threading, time

lib = ctypes.PyDLL(sys.argv[1])
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
assert lib.gaptop_selftest_calibrate() == 1, "calibration failed"
stop = time.time() + seconds


def blur(n):
    total = 0
    for _ in range(n):
        total += math.factorial(300) % 7
    return total


class Noisy:
    def __getitem__(self, i):
        return blur(200)


def spin():
    x = 0
    while time.time() < stop:
        x += 1
    return x


t = threading.Thread(target=spin, name="spinner")
t.start()
print("READY", os.getpid(), flush=True)
data = Noisy()
i = 0
while time.time() < stop:
    # Called from C (map's next), as a dataset's item often is: 3.13 puts an entry frame of
    # no code between __getitem__ and this module's frame.
    next(map(data.__getitem__, (i,)))
    i += 1
t.join()
print("DONE", i, flush=True)
