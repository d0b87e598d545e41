# The step loop that issue 29's diagnosis workloads share (loader_train, optim_loop,
# backward_bound, shape_planning); not a workload itself. Each workload is run as
#   python3 NAME.py [STEPS] [--fix [KIND]] [--warmup N] [--kineto PATH] [--no-nvtx]
# and runs `--warmup` steps, then STEPS timed ones. Every step is an NVTX range `step K` (as
# nvtx_steps.py marks them; gaptop takes those ranges as the steps) with torch.cuda.synchronize()
# before and after it, so each step's time (time.perf_counter) is its whole GPU work too, in
# both modes alike. At the end it prints the usual line
#   WORKLOAD NAME iters=STEPS wall_s=S per_iter_ms=MS fix=KIND
# and one machine-readable line of the timed steps:
#   STEP_MS median=MS mean=MS steps=N
# `--kineto PATH` runs every step (warm-up included, so the steps match a recording's) under
# torch.profiler with Python stacks, each step also a `record_function("step K")` (Kineto keeps
# user annotations, not NVTX ranges, so gaptop finds the same steps in both), and writes its
# Chrome trace to PATH. Fallbacks print a line starting `FALLBACK` and go on.
import argparse, statistics, sys, time
import torch


def parser(name, default_steps, fixes, warmup=3, doc=""):
    """The common arguments; `fixes[0]` is what a bare `--fix` means. The caller may add its own
    before calling parse_args()."""
    ap = argparse.ArgumentParser(prog=f"{name}.py", description=doc)
    ap.add_argument("steps", nargs="?", type=int, default=default_steps, help="timed steps")
    ap.add_argument("--fix", nargs="?", const=fixes[0], default="none", choices=["none"] + fixes,
                    help=f"apply the fix (bare --fix: {fixes[0]})")
    ap.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    ap.add_argument("--kineto", metavar="PATH", help="write a torch.profiler Chrome trace here")
    ap.add_argument("--no-nvtx", action="store_true", help="do not mark steps as NVTX ranges")
    return ap


def check(a):
    if a.steps < 1 or a.warmup < 0:
        sys.exit(f"error: steps must be at least 1 and warm-up at least 0 (got {a.steps}, {a.warmup})")
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device is visible to torch")


def fallback(msg):
    print(f"FALLBACK: {msg}", flush=True)


class _Marks:
    """NVTX `step K` ranges, or nothing where NVTX calls fail."""

    def __init__(self, on):
        self.on = on
        if on:
            try:
                torch.cuda.nvtx.range_push("probe")
                torch.cuda.nvtx.range_pop()
            except Exception as e:  # a torch built without NVTX
                fallback(f"NVTX ranges unavailable ({type(e).__name__}: {e}); steps are not marked")
                self.on = False

    def push(self, k):
        if self.on:
            torch.cuda.nvtx.range_push(f"step {k}")

    def pop(self):
        if self.on:
            torch.cuda.nvtx.range_pop()


def _profiler(path):
    if not path:
        return None
    from torch.profiler import ProfilerActivity, profile
    try:
        p = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True)
        p.__enter__()
        return p
    except Exception as e:
        fallback(f"torch.profiler did not start ({type(e).__name__}: {e}); no Kineto trace")
        return None


def run(name, a, step, detail=""):
    """Runs `step(k)` for the warm-up steps, then the timed ones, and prints the result lines."""
    marks = _Marks(not a.no_nvtx)
    prof = _profiler(a.kineto)
    times = []
    t_all = None
    for k in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if k == a.warmup:
            t_all = t0
        marks.push(k)
        if prof is not None:
            with torch.profiler.record_function(f"step {k}"):
                step(k)
                torch.cuda.synchronize()
        else:
            step(k)
            torch.cuda.synchronize()
        marks.pop()
        dt = time.perf_counter() - t0
        if k >= a.warmup:
            times.append(dt)
    wall = time.perf_counter() - t_all
    ms = [t * 1e3 for t in times]
    extra = f" {detail}" if detail else ""
    print(f"WORKLOAD {name} iters={a.steps} wall_s={wall:.3f} per_iter_ms={wall / a.steps * 1e3:.2f} "
          f"fix={a.fix}{extra}")
    print(f"STEP_MS median={statistics.median(ms):.3f} mean={statistics.fmean(ms):.3f} steps={len(ms)}",
          flush=True)
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(a.kineto)
        print(f"KINETO trace of {a.warmup + a.steps} steps written to {a.kineto}", flush=True)
