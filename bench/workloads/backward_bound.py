# A training step whose backward is launch-bound (issue 29): 50 gated layers of tiny
# elementwise ops on a [64, 256] activation (h = sigmoid(x*w + b); x = x*(0.6 + 0.4h), w and b
# per-channel parameters), so the forward launches ~250 kernels of a microsecond or two and the
# backward, run by autograd's own thread without a Python stack, about twice as many, each
# parameter's gradient a small reduction. SGD(foreach=True) steps the 100 tensors.
# --fix: torch.compile of the model (default mode): the forward and, through AOTAutograd, the
# backward become a few fused Triton kernels. Compilation happens in the warm-up steps (3 by
# default), never in the timed ones. Where compiling fails, it says so and runs eager.
#   python3 backward_bound.py [STEPS] [--fix] [--layers N] [--kineto PATH]
import torch
import steploop


class Gate(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((d,), 0.5))
        self.b = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x):
        h = torch.sigmoid(x * self.w + self.b)
        return x * (0.6 + 0.4 * h)  # a gate that never lets x grow


class Stack(torch.nn.Module):
    def __init__(self, layers, d):
        super().__init__()
        self.layers = torch.nn.ModuleList([Gate(d) for _ in range(layers)])

    def forward(self, x):
        for g in self.layers:
            x = g(x)
        return x


def main():
    ap = steploop.parser("backward_bound", 60, ["compile"], warmup=3,
                         doc="a training step of thousands of tiny kernels, backward included")
    ap.add_argument("--layers", type=int, default=50)
    a = ap.parse_args()
    steploop.check(a)
    if a.fix != "none" and a.warmup < 2:
        a.warmup = 2  # the compiled forward and backward are built in the first step
    torch.manual_seed(0)
    net = Stack(a.layers, 256).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(64, 256, device="cuda")
    fwd = net
    if a.fix == "compile":
        try:
            fwd = torch.compile(net)
            fwd(x).square().mean().backward()  # compiles forward and backward now
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        except Exception as e:  # no compiler or Triton on the machine, for example
            steploop.fallback(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); running eager")
            fwd, a.fix = net, "none(compile failed)"

    def train_step(k):
        loss = fwd(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    steploop.run("backward_bound", a, train_step, f"layers={a.layers}")


if __name__ == "__main__":
    main()
