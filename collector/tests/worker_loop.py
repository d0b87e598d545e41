# A loop fed by loader processes, played against the fake libcupti (no GPU), as a DataLoader
# with too few workers: WORKERS forked processes each spend LOAD_MS of CPU on an item (busy,
# by their own CPU clock) and put it on a multiprocessing queue; each iteration of the main
# loop takes one (`get` with a timeout: a poll, as DataLoader's `_get_data` does), then
# `forward` launches a kernel of STEP_MS and waits for it. Its truth: the loop gets an item
# every LOAD_MS / WORKERS, so it waits about that less STEP_MS an iteration, blocked in
# Queue.get, and ceil(LOAD_MS / STEP_MS) workers would feed it without a wait.
#   python3 worker_loop.py STEPS [DIR] [WORKERS=2] [LOAD_MS=20] [STEP_MS=5]
import multiprocessing as mp, sys, time

from fakestart import fake

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
load_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 20.0
step_ms = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0


def load(q, n):
    for i in range(n):
        # Busy in Python by its own CPU clock, read every few thousand iterations (the clock
        # is a system call: read in a tight loop, most of the time would be the kernel's, which
        # the sampler does not see).
        t = time.thread_time()
        while time.thread_time() - t < load_ms / 1e3:
            for _ in range(2000):
                pass
        q.put(i)


def forward():
    fake.fake_launch(b"void decoder_step<float>(float*, int)", int(step_ms * 1e6))
    fake.fake_synchronize()


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue(maxsize=2 * workers)
    per = -(-steps // workers)
    procs = [ctx.Process(target=load, args=(q, per), daemon=True) for _ in range(workers)]
    for p in procs:
        p.start()
    for _ in range(steps):
        q.get(timeout=30)
        forward()
    print(f"WORKER_LOOP steps={steps} workers={workers} load_ms={load_ms} step_ms={step_ms}", flush=True)
    for p in procs:
        p.join(timeout=5)
