# A decode with per-shape planning (issue 29): a small decoder (4 layers, hidden 1024, 16 heads
# of 64, bf16, random weights) generates one token a step at batch 1, its KV cache growing by
# one position a token, with scaled_dot_product_attention forced onto cuDNN
# (torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)). cuDNN builds (and compiles,
# with NVRTC) an execution plan for each new KV length, so every token pays one plan, tens of
# milliseconds of CPU before the attention kernels (in `attend`).
# --fix (backend): another backend, flash attention (else memory-efficient), with the same
# growing cache; --fix static: static shapes, a cache of the run's full length written in place
# with a mask of the filled positions, still on cuDNN (one plan for the whole run; where cuDNN
# refuses the mask, memory-efficient attention). Where cuDNN attention is missing, it says so
# and runs on the default backends (then nothing is planned).
#   python3 shape_planning.py [STEPS] [--fix [backend|static]] [--layers N] [--kineto PATH]
import contextlib
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import steploop

HEADS, HEAD_DIM, PROMPT = 16, 64, 32
HIDDEN = HEADS * HEAD_DIM
DT = torch.bfloat16


def attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def usable(backend, mask):
    """Whether SDPA runs on `backend` alone for a decode-shaped call (with a mask if asked)."""
    q = torch.randn(1, HEADS, 1, HEAD_DIM, device="cuda", dtype=DT)
    k = torch.randn(1, HEADS, 8, HEAD_DIM, device="cuda", dtype=DT)
    m = torch.ones(1, 1, 1, 8, device="cuda", dtype=torch.bool) if mask else None
    try:
        with sdpa_kernel([backend]):
            attend(q, k, k, m)
        torch.cuda.synchronize()
        return True
    except Exception as e:  # RuntimeError: no available kernel
        steploop.fallback(f"{backend.name} unavailable{' with a mask' if mask else ''}: {str(e)[:200]}")
        return False


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(HIDDEN), torch.nn.LayerNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.out = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.up, self.down = torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x, cache, t, mask):
        q, k, v = self.qkv(self.n1(x)).view(1, 1, 3, HEADS, HEAD_DIM).transpose(1, 3).unbind(2)
        k, v = cache.add(k, v, t)
        o = attend(q, k, v, mask)
        x = x + self.out(o.transpose(1, 2).reshape(1, 1, HIDDEN))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Growing:
    """The KV cache as generation loops keep it by default: one position longer each token."""

    def __init__(self):
        self.k = torch.randn(1, HEADS, PROMPT, HEAD_DIM, device="cuda", dtype=DT)
        self.v = torch.randn_like(self.k)

    def add(self, k, v, t):
        self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
        return self.k, self.v


class Static:
    """A cache of the run's full length, written in place: every step has the same shapes."""

    def __init__(self, length):
        self.k = torch.zeros(1, HEADS, length, HEAD_DIM, device="cuda", dtype=DT)
        self.v = torch.zeros_like(self.k)
        self.k[:, :, :PROMPT].normal_()
        self.v[:, :, :PROMPT].normal_()

    def add(self, k, v, t):
        self.k[:, :, t] = k[:, :, 0]
        self.v[:, :, t] = v[:, :, 0]
        return self.k, self.v


def main():
    ap = steploop.parser("shape_planning", 30, ["backend", "static"], warmup=3,
                         doc="a decode whose attention is planned anew for each KV length")
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    steploop.check(a)
    torch.manual_seed(0)
    static = a.fix == "static"
    if a.fix == "backend":
        order = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    elif static:
        order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    else:
        order = [SDPBackend.CUDNN_ATTENTION]
    backend = next((b for b in order if usable(b, static)), None)
    if backend is None:
        steploop.fallback("no backend of " + ", ".join(b.name for b in order) + " works here: default backends")
    layers = torch.nn.ModuleList([Layer() for _ in range(a.layers)]).to("cuda", DT).eval()
    final = torch.nn.LayerNorm(HIDDEN).to("cuda", DT)
    length = PROMPT + a.warmup + a.steps + 1
    caches = [Static(length) if static else Growing() for _ in layers]
    pos = torch.arange(length, device="cuda")
    x = torch.randn(1, 1, HIDDEN, device="cuda", dtype=DT)

    def token(k):
        nonlocal x
        t = PROMPT + k
        mask = (pos <= t).view(1, 1, 1, length) if static else None
        h = x
        for layer, cache in zip(layers, caches):
            h = layer(h, cache, t, mask)
        x = final(h)

    name = backend.name if backend is not None else "default"
    chosen = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
    with torch.no_grad(), chosen:
        steploop.run("shape_planning", a, token, f"backend={name} kv={PROMPT}+{a.warmup + a.steps}")


if __name__ == "__main__":
    main()
