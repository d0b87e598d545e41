# Drives the collector's Python stack walk without a GPU: calibrate with the GIL held, then walk
# with it released (ctypes.CDLL drops the GIL around the call, as PyTorch does around launches).
import ctypes, sys, threading
lib_path = sys.argv[1]
held = ctypes.PyDLL(lib_path)
free = ctypes.CDLL(lib_path)
assert held.gaptop_selftest_calibrate() == 1, "calibration failed"
free.gaptop_selftest_stack.restype = ctypes.c_ssize_t
free.gaptop_selftest_stack_native.restype = ctypes.c_ssize_t
buf = ctypes.create_string_buffer(1 << 16)

class Model:
    def forward(self, depth):
        return self.inner(depth)
    def inner(self, depth):
        if depth:
            return self.inner(depth - 1)  # at:recurse
        n = free.gaptop_selftest_stack(buf, len(buf))  # at:launch
        assert n > 0, "no stack"
        return buf.raw[:n].decode()

def launch_site(depth=2):
    return Model().forward(depth)

def native_site():
    n = free.gaptop_selftest_stack_native(buf, len(buf))
    assert n > 0, "no native stack"
    return buf.raw[:n].decode().splitlines()

# Qualified names from 3.11 (co_qualname), plain ones before; lines from 3.10 (3.9's frames
# show their function's first line).
M = "Model." if sys.version_info >= (3, 11) else ""
at = {}
for i, text in enumerate(open(__file__), 1):
    if "# at:" in text and "at[" not in text:
        at[text.rsplit("# at:", 1)[1].strip()] = i

out = {}
def worker():
    out["thread"] = launch_site()
t = threading.Thread(target=worker); t.start(); t.join()
main = launch_site()
for name, s in (("main", main), ("thread", out["thread"])):
    frames = s.splitlines()
    print(name, frames)
    quals = [f.split(": ", 1)[1] for f in frames]
    assert quals[-4:] == [M + "forward", M + "inner", M + "inner", M + "inner"], quals
    if sys.version_info >= (3, 10):
        lines = [int(f.rsplit("(", 1)[1].split(")")[0]) for f in frames[-3:]]
        assert lines == [at["recurse"], at["recurse"], at["launch"]], (lines, at)
    assert "launch_site" in quals, quals
    assert frames[-1].startswith(__file__), frames[-1]
# Walks from the same few stacks in turn, as a layer's launches come: the walk's per-thread
# cache of recent stacks must hand each its own stack every time.
for rnd in range(3):
    for depth in (0, 3, 3, 1, 4, 4, 2, 0):
        quals = [f.split(": ", 1)[1] for f in launch_site(depth).splitlines()]
        assert quals.count(M + "inner") == depth + 1, (rnd, depth, quals)
# --native: the Python frames, then the native frames from the interpreter down to the call
# (here ctypes' foreign call), without gaptop's own frames or the interpreter's.
import os
frames = native_site()
print("native", frames)
py = [f for f in frames if not f.startswith("native:")]
nat = [f for f in frames if f.startswith("native:")]
assert py and py[-1].endswith(": native_site"), frames
assert frames[len(py):] == nat and nat, "native frames follow the Python ones: %r" % frames
exe = os.path.realpath(sys.executable)
for f in nat:
    path = f[len("native:"):].rsplit("+0x", 1)[0]
    assert "gaptop_collector" not in path, f
    assert os.path.realpath(path) != exe or "libpython" in path, "walk passed the interpreter: %r" % f
assert any("ctypes" in f or "ffi" in f for f in nat), nat
print("PYSTACK OK")
