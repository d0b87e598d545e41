#!/usr/bin/env python3
"""Runs a workload in a process whose dormant collector was attached to and detached from
first, to measure what a program costs after a detach (overhead.py's `detached` modes).

usage (under a dormant collector): attached.py --gaptop PATH [--no-attach] SCRIPT ARGS...

It starts CUDA (the collector loads, dormant), has `gaptop capture` attach to this process
for a second while it launches kernels (so there are CUDA API exits for the detach to
finalize CUPTI at), waits for the capture to end, then runs SCRIPT with ARGS as __main__: the
workload's timed section starts after the detach. --no-attach skips the capture, for the
`dormant` mode to pay the same wrapper.
"""
import os, runpy, subprocess, sys, tempfile, time

class Gpu:
    """A tensor to launch small kernels on (nothing without torch: the harness's own test)."""
    def __init__(self):
        try:
            import torch
        except ImportError:
            torch = None
        self.torch = torch
        self.x = torch.ones(256, device="cuda") if torch else None

    def launch(self, n):
        if self.torch is None:
            return
        for _ in range(n):
            self.x = self.x * 1.0001
        self.torch.cuda.synchronize()

def main():
    args = sys.argv[1:]
    gaptop, attach = None, True
    while args and args[0].startswith("--"):
        flag = args.pop(0)
        if flag == "--gaptop":
            gaptop = args.pop(0)
        elif flag == "--no-attach":
            attach = False
        else:
            sys.exit(f"attached.py: unknown option {flag}")
    if not args:
        sys.exit(__doc__)
    gpu = Gpu()
    gpu.launch(1)
    if attach:
        if not gaptop:
            sys.exit("attached.py: --gaptop PATH is needed to attach")
        rec = os.path.join(tempfile.mkdtemp(), "attached.rec")
        cap = subprocess.Popen([gaptop, "capture", str(os.getpid()), "--duration", "1s", "-o", rec],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        t = time.time()
        while cap.poll() is None and time.time() - t < 30:
            gpu.launch(50)
            time.sleep(0.001)
        err = cap.communicate()[1]
        ok = cap.returncode == 0 and "detached" in err
        # A few more launches: the detach's cuptiFinalize runs at the next API exit.
        gpu.launch(10)
        print(f"ATTACHED ok={int(ok)} " + " ".join(l for l in err.splitlines() if "recorded" in l),
              file=sys.stderr, flush=True)
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")

if __name__ == "__main__":
    main()
