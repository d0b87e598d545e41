# A loop whose launches wait on the program's own Python work in another function, played
# against the fake libcupti (no GPU): each step, `Scheduler.pick` sorts a queue for ~5 ms
# (pure Python, with a generator expression that `sorted` calls back into), then `replay`
# launches ten small kernels, then the step syncs. The code to fix is `Scheduler.pick`, not the
# launching `replay` (tests/diagnosis.rs).
import sys

from fakestart import fake


class Scheduler:
    def __init__(self):
        self.queue = [(float(i), i) for i in range(512)]

    def pick(self, token):
        for _ in range(100):
            self.queue = sorted((p * 0.999 + (token % 7) * 1e-4, i) for p, i in self.queue)
        return [i for _, i in self.queue[:32]]


def replay():
    for _ in range(10):
        fake.fake_launch(b"graph_kernel", 20)


def step(sched, k):
    sched.pick(k)
    replay()
    fake.fake_synchronize()


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
s = Scheduler()
for k in range(steps):
    step(s, k)
print(f"SCHEDULER_LOOP steps={steps}", flush=True)
