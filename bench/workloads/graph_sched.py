# A serving loop's bubble (issue 36): each step serves two micro-batches, each a CUDA graph
# replay of a small decoder step (captured once), and before each replay a Python scheduler
# (pure-Python bookkeeping over the waiting requests, about SCHED_MS of CPU) picks what runs
# next from the tokens the previous replay sampled, read back with .item(). The GPU idles
# while the scheduler runs: the bubble serving engines show before each replay.
# --fix (overlap): the second micro-batch is scheduled while the first one's graph runs (its
# tokens read after), as engines that schedule one step ahead do: the same work, the
# scheduler's CPU under the GPU's, for one of the two calls.
# --fix pipeline: every scheduler call runs while the replay before it does (each micro-batch
# is scheduled one ahead), so that no scheduler call is left between replays: the what-if
# gaptop's `saving_overlapped_ns` describes (the site's CPU overlapped with the GPU's work).
#   python3 graph_sched.py [STEPS] [--fix [overlap|pipeline]] [--sched-ms MS] [--sched-n N] [--kineto PATH]
import random, statistics, time
import torch
import steploop

# A replay of about a millisecond and a half on an H200 (6 layers of 16384x2048 @ 2048x2048),
# so that the fix has a replay to hide a scheduler call under.
HIDDEN, LAYERS, ROWS = 2048, 6, 16384


def build():
    torch.manual_seed(0)
    ws = [torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.bfloat16) / HIDDEN**0.5
          for _ in range(LAYERS)]
    x = torch.randn(ROWS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(ROWS, dtype=torch.long, device="cuda")

    def body():
        h = x
        for w in ws:
            h = torch.nn.functional.gelu(h @ w)
        out.copy_(h.float().sum(1).long() % 1000)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return g, out


class Scheduler:
    """Pure-Python bookkeeping over waiting requests, about `ms` of CPU a call."""

    def __init__(self, ms, n=None):
        self.rng = random.Random(0)
        self.queue = [(self.rng.random(), i) for i in range(512)]
        self.n = 1
        if n:
            self.n = n
            return
        took = []
        for k in range(21):  # one sort's time: the median of 21, the first ones warming up
            t0 = time.perf_counter()
            self.schedule(k)
            took.append(time.perf_counter() - t0)
        self.n = max(1, round(ms / 1e3 / max(statistics.median(took), 1e-7)))

    def schedule(self, token):
        picked = []
        for _ in range(self.n):
            self.queue = sorted((p * 0.999 + (token % 7) * 1e-4, i) for p, i in self.queue)
            picked = [i for _, i in self.queue[:32]]
        return picked


def main():
    ap = steploop.parser("graph_sched", 40, ["overlap", "pipeline"], warmup=5,
                         doc="a Python scheduler between CUDA graph replays")
    ap.add_argument("--sched-ms", type=float, default=1.5, help="the scheduler's CPU a call")
    ap.add_argument("--sched-n", type=int, help="sorts a scheduler call (default: sized to --sched-ms "
                    "in this process; give one count to time every run with the same scheduler)")
    a = ap.parse_args()
    steploop.check(a)
    g, out = build()
    sched = Scheduler(a.sched_ms, a.sched_n)

    def step(k):
        if a.fix == "pipeline":
            # the first micro-batch was scheduled under the previous step's second replay
            g.replay()
            sched.schedule(k + 1)
            tok = int(out[0].item())
            g.replay()
            sched.schedule(k + 2)
            tok += int(out[0].item())
        elif a.fix == "overlap":
            sched.schedule(k)
            g.replay()
            sched.schedule(k + 1)  # the next micro-batch, while this one's graph runs
            tok = int(out[0].item())
            g.replay()
            tok += int(out[0].item())
        else:
            sched.schedule(k)
            g.replay()
            tok = int(out[0].item())
            sched.schedule(tok)
            g.replay()
            tok += int(out[0].item())
        return tok

    t0 = time.perf_counter()
    for k in range(5):
        sched.schedule(k)
    took = (time.perf_counter() - t0) / 5 * 1e3
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    replay = (time.perf_counter() - t0) / 5 * 1e3
    steploop.run("graph_sched", a, step,
                 detail=f"sched_ms={a.sched_ms} sched_n={sched.n} measured_sched_ms={took:.2f} replay_ms={replay:.2f}")


if __name__ == "__main__":
    main()
