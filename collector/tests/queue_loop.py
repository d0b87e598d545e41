# A loop fed by a queue, played against the fake libcupti (no GPU): a producer thread sleeps
# ~15 ms for each item (as a slow input pipeline would), and each iteration of the main loop
# waits for one in `queue.get`, then `forward` launches six short kernels. The GPU idles ~15 ms
# an iteration while the launching thread is blocked, not on a CPU. Its truth: STEPS
# iterations, each ~15 ms, all of it the wait before `forward`'s first launch.
import os, queue, sys, threading, time

from fakestart import fake

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
items = queue.Queue(maxsize=2)


def produce():
    for i in range(steps):
        time.sleep(0.015)
        items.put(i)


def forward():
    for _ in range(6):
        fake.fake_launch(b"void small_kernel<float>(float*, int)", 1000)


threading.Thread(target=produce, daemon=True).start()
for _ in range(steps):
    items.get()
    forward()
fake.fake_synchronize()
print(f"QUEUE_LOOP steps={steps}", flush=True)
