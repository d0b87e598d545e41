# The cost of recording what threads do off their CPU (issue 41), against the fake libcupti (no
# GPU): a main loop that works in pure Python (~1 ms a step) and launches six kernels, beside a
# thread that sleeps 0.5 ms at a time and a queue it feeds, so that both threads switch on and
# off their CPUs thousands of times a second (each switch a record in the sampler's rings) and the
# main thread waits on the queue now and then. Prints the main loop's time: what the program
# pays. Run it under `gaptop record` with and without GAPTOP_CTX_SWITCHES=0
# (bench/offcpu_cost.py does, interleaved).
import os, queue, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../collector/tests"))
from fakestart import fake  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
items = queue.Queue(maxsize=4)
done = False


def produce():
    i = 0
    while not done:
        time.sleep(0.0005)
        try:
            items.put(i, timeout=0.01)
        except queue.Full:
            pass
        i += 1


def work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def forward():
    for _ in range(6):
        fake.fake_launch(b"void small_kernel<float>(float*, int)", 1000)


threading.Thread(target=produce, daemon=True).start()
t0 = time.perf_counter()
for _ in range(steps):
    items.get()
    work(20000)
    forward()
elapsed = time.perf_counter() - t0
done = True
fake.fake_synchronize()
print(f"SWITCHY steps={steps} seconds={elapsed:.4f}", flush=True)
