# A loop that sleeps before its launches, played against the fake libcupti (no GPU): each
# iteration sleeps 10 ms in `pace` (as a rate limiter or a polling loop would), then `forward`
# launches six short kernels. Its truth: STEPS iterations, their gaps the main thread asleep in
# time.sleep under `pace`.
import sys, time

from fakestart import fake

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40


def pace():
    time.sleep(0.010)


def forward():
    for _ in range(6):
        fake.fake_launch(b"void small_kernel<float>(float*, int)", 1000)


for _ in range(steps):
    pace()
    forward()
fake.fake_synchronize()
print(f"SLEEP_LOOP steps={steps}", flush=True)
