# An optimizer-bound training step (issue 29): a deep stack of small residual blocks (Linear
# 64x64 and LayerNorm, 4 parameter tensors a block; 64 blocks, 256 tensors) on a batch of 32,
# trained with Adam(foreach=False). Adam's single-tensor path launches about 7 tiny kernels a
# tensor, one tensor after another from Python (`_single_tensor_adam`): ~1,800 launches a step,
# more than the forward and backward together.
# --fix (foreach): Adam(foreach=True), a few multi-tensor kernels for all tensors at once;
# --fix fused: Adam(fused=True).
#   python3 optim_loop.py [STEPS] [--fix [foreach|fused]] [--blocks N] [--kineto PATH]
import torch
import steploop


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return x + torch.tanh(self.norm(self.lin(x)))


def main():
    ap = steploop.parser("optim_loop", 40, ["foreach", "fused"], warmup=5,
                         doc="a training step whose optimizer launches a kernel per tensor")
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    a = ap.parse_args()
    steploop.check(a)
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[Block(a.dim) for _ in range(a.blocks)]).cuda()
    params = list(net.parameters())
    if a.fix == "fused":
        opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    else:
        opt = torch.optim.Adam(params, lr=1e-4, foreach=a.fix == "foreach")
    x = torch.randn(32, a.dim, device="cuda")
    target = torch.randn(32, a.dim, device="cuda")

    def train_step(k):
        loss = torch.nn.functional.mse_loss(net(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    steploop.run("optim_loop", a, train_step, f"tensors={len(params)}")


if __name__ == "__main__":
    main()
