# A decode-style loop with stalls planted at known functions, so that gaptop's diagnosis can be
# checked on the GPU: every token runs a few small layers, then `plan_attention` spends ~10 ms
# in a native call (zlib's deflate, in C) before its attention kernels: a recurring stall. Only
# the first three tokens also call `warmup_stall`, ~40 ms of native work (OpenSSL's PBKDF2)
# before a launch: a one-off.
import hashlib, sys, time, zlib, torch
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 40
torch.manual_seed(0)
d = 512
w = [torch.randn(d, d, device="cuda") / d**0.5 for _ in range(4)]
kv = torch.randn(64, d, device="cuda")
x = torch.randn(1, d, device="cuda")
DATA = bytes(range(256)) * (12 << 10)  # 3 MiB that deflate works at for ~10 ms

def layers(x):
    for m in w:
        x = torch.nn.functional.gelu(x @ m) + x
    return x

def plan_attention(x):
    zlib.compress(DATA, 9)  # CPU work in C before the launches, as a per-shape plan would be
    a = torch.softmax(x @ kv.T, dim=-1)
    return a @ kv

def warmup_stall(x):
    hashlib.pbkdf2_hmac("sha256", b"gaptop", b"salt", 150000)
    return x * 1.0

def token(i, x):
    if i < 3:
        x = warmup_stall(x)
    x = layers(x)
    x = plan_attention(x)
    return x / x.norm()

torch.cuda.synchronize(); t = time.perf_counter()
for i in range(iters):
    x = token(i, x)
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD decode_planted iters={iters} wall_s={dt:.3f} per_iter_ms={dt/iters*1e3:.2f}")
