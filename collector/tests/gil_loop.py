# A loop that contends for the GIL, played against the fake libcupti (no GPU): a thread named
# `busy_py` (its OS name, as pthread_setname_np sets it) runs pure Python without pause, so it
# holds the GIL whenever it can; before each of its six launches the main loop calls a C
# function that lets the GIL go (`prepare`: 200 µs in usleep, as a tokenizer or an image decoder
# in C would), and each time waits for the GIL to come back: `busy_py` took it meanwhile and
# gives it up only when asked, after the switch interval (5 ms). Its truth: STEPS iterations,
# their gaps the main thread's waits for the GIL held by `busy_py`, in `spin`.
import ctypes, sys, threading

from fakestart import fake

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
stop = False


def spin():
    # The thread's OS name (prctl PR_SET_NAME = 15), as a pin-memory or logger thread may have.
    libc.prctl(15, b"busy_py", 0, 0, 0)
    x = 0
    while not stop:
        x += 1
    return x


libc = ctypes.CDLL(None)


def prepare():
    libc.usleep(200)  # ctypes lets the GIL go for the call


def forward():
    for _ in range(6):
        prepare()
        fake.fake_launch(b"void small_kernel<float>(float*, int)", 1000)


t = threading.Thread(target=spin, name="busy_py")
t.start()
for _ in range(steps):
    forward()
stop = True
t.join()
fake.fake_synchronize()
print(f"GIL_LOOP steps={steps}", flush=True)
