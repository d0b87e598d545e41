# Drives the collector's Python stack walk without a GPU: calibrate with the GIL held, then walk
# with it released (ctypes.CDLL drops the GIL around the call, as PyTorch does around launches).
import ctypes, sys, threading
lib_path = sys.argv[1]
held = ctypes.PyDLL(lib_path)
free = ctypes.CDLL(lib_path)
assert held.gaptop_selftest_calibrate() == 1, "calibration failed"
free.gaptop_selftest_stack.restype = ctypes.c_ssize_t
buf = ctypes.create_string_buffer(1 << 16)

class Model:
    def forward(self, depth):
        return self.inner(depth)
    def inner(self, depth):
        if depth:
            return self.inner(depth - 1)
        n = free.gaptop_selftest_stack(buf, len(buf))
        assert n > 0, "no stack"
        return buf.raw[:n].decode()

def launch_site():
    return Model().forward(2)

out = {}
def worker():
    out["thread"] = launch_site()
t = threading.Thread(target=worker); t.start(); t.join()
main = launch_site()
for name, s in (("main", main), ("thread", out["thread"])):
    frames = s.splitlines()
    print(name, frames)
    quals = [f.split(": ", 1)[1] for f in frames]
    assert quals[-4:] == ["Model.forward", "Model.inner", "Model.inner", "Model.inner"], quals
    assert "launch_site" in quals, quals
    assert frames[-1].startswith(__file__), frames[-1]
print("PYSTACK OK")
