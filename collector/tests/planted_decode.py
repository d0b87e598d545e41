# A decode-style loop played against the fake libcupti (no GPU), with stalls planted at known
# functions, so that a test can check gaptop's diagnosis: every step ("token") launches a
# layer's small kernels, then `plan_attention` spends ~15 ms in a native call (zlib's deflate,
# on the CPU, in C) before launching the attention kernel: a recurring stall. Only the first
# three steps also call `warmup_stall`, ~40 ms of native work (OpenSSL's PBKDF2) before a
# launch: a one-off.
import hashlib, os, sys, zlib

from fakestart import fake

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
DATA = bytes(range(256)) * (16 << 10)  # 4 MiB that deflate works at for ~15 ms

def layer():
    for _ in range(30):
        fake.fake_launch(b"void gemv_kernel<float>(float const*, float*)", 2000)

def plan_attention():
    zlib.compress(DATA, 9)  # CPU work in C before each launch, as a per-shape plan would be
    fake.fake_launch(b"attention_kernel", 50000)

def warmup_stall():
    hashlib.pbkdf2_hmac("sha256", b"gaptop", b"salt", 150000)
    fake.fake_launch(b"warmup_kernel", 5000)

def step(i):
    if i < 3:
        warmup_stall()
    layer()
    plan_attention()
    fake.fake_synchronize()

for i in range(steps):
    step(i)
print(f"PLANTED steps={steps}", flush=True)
