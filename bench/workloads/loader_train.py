# A DataLoader-bound training loop (issue 29). Each sample is a noisy multi-channel signal,
# blurred in numpy with an FFT in the dataset's __getitem__ (`blur`, under a millisecond of CPU
# a sample: --channels rows of 4096 points), then decimated; a batch of 32 goes to a small 1-D
# conv net trained with Adam, a few ms of GPU a step (--width). Unfixed, the DataLoader has
# num_workers=0, so every step waits for its batch (~20-30 ms) on the main thread, in `blur`,
# before the `.cuda()` copy.
# --fix: num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=4, and
# non_blocking copies; the batches are made by worker processes while the GPU trains.
#   python3 loader_train.py [STEPS] [--fix] [--workers N] [--channels C] [--kineto PATH]
import numpy as np
import torch
import steploop

LENGTH = 4096  # points per channel
DECIMATE = 4   # the model sees every 4th point of the blurred signal


def blur(x, sigma):
    """Gaussian blur of each row of `x`, through the frequency domain."""
    spec = np.fft.rfft(x, axis=-1)
    freq = np.fft.rfftfreq(x.shape[-1])
    spec *= np.exp(-0.5 * (2 * np.pi * freq * sigma) ** 2)
    return np.fft.irfft(spec, n=x.shape[-1], axis=-1)


class Noisy(torch.utils.data.Dataset):
    def __init__(self, n, channels):
        self.n = n
        rng = np.random.default_rng(0)
        self.bank = rng.standard_normal((32, channels, LENGTH))  # noise, made once

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        y = blur(self.bank[i % len(self.bank)], sigma=2.0 + i % 7)
        x = torch.from_numpy(y[:, ::DECIMATE].astype(np.float32))
        return x, i % 10


def model(channels, width):
    c = torch.nn
    return c.Sequential(
        c.Conv1d(channels, width, 9, padding=4), c.GELU(),
        *[m for _ in range(4) for m in (c.Conv1d(width, width, 9, padding=4), c.GELU())],
        c.AdaptiveAvgPool1d(8), c.Flatten(), c.Linear(width * 8, 10))


def main():
    ap = steploop.parser("loader_train", 30, ["workers"], warmup=5,
                         doc="a training loop that waits for its DataLoader")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--channels", type=int, default=12, help="signal rows a sample (CPU work)")
    ap.add_argument("--width", type=int, default=256, help="conv channels (GPU work)")
    ap.add_argument("--workers", type=int, default=4, help="DataLoader workers with --fix")
    a = ap.parse_args()
    steploop.check(a)
    fix = a.fix != "none"
    torch.manual_seed(0)
    # One epoch covers every step, so no iterator is restarted mid-run.
    ds = Noisy((a.warmup + a.steps + 8) * a.batch + 4 * a.workers * a.batch, a.channels)
    if fix:
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                             pin_memory=True, persistent_workers=True, prefetch_factor=4)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=0)
    net = model(a.channels, a.width).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    it = iter(loader)

    def train_step(k):
        x, y = next(it)
        if fix:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        else:
            x, y = x.cuda(), y.cuda()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    workers = f" workers={a.workers}" if fix else " workers=0"
    steploop.run("loader_train", a, train_step, f"batch={a.batch} channels={a.channels}{workers}")
    del it


if __name__ == "__main__":
    main()
