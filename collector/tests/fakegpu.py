# Plays a CUDA program against the fake libcupti (collector/fake-cupti), without a GPU: the
# collector is loaded and started as the CUDA driver would start it (CUDA_INJECTION64_PATH,
# InitializeInjection); then named Python functions launch kernels, in the main thread and in
# another one, with a synchronization after each step.
import ctypes, os, sys, threading, time

# FAKE_RANKS=N: N processes, as torchrun starts them: this one is rank 0 and starts the others
# (which inherit the collector's environment) before it touches "CUDA".
import subprocess
children = []
if "FAKE_RANKS" in os.environ and "RANK" not in os.environ:
    os.environ["RANK"] = "0"
    for r in range(1, int(os.environ["FAKE_RANKS"])):
        children.append(subprocess.Popen([sys.executable] + sys.argv, env={**os.environ, "RANK": str(r)}))

fake = ctypes.CDLL("libcupti.so")  # through LD_LIBRARY_PATH, as the collector finds it
fake.fake_launch.restype = ctypes.c_uint32
# FAKE_NO_COLLECTOR=1: the program bare, to compare its result with.
if os.environ.get("FAKE_NO_COLLECTOR") != "1":
    collector = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
    assert collector.InitializeInjection() == 1
sum(range(10000))  # the interpreter runs the collector's pending calibration here

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
pause = float(os.environ.get("FAKE_STEP_SLEEP", "0"))
if "FAKE_PIDFILE" in os.environ:
    with open(os.environ["FAKE_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))

# The program's result: what its "CUDA" calls returned (the fake's correlation ids), which
# nothing of gaptop's may change.
result = 0

def rope():
    global result
    for _ in range(8):
        result += fake.fake_launch(b"void rope_kernel<float>(float*, int)", 300)

def attention():
    # 400 µs: the synchronization after it waits about that long, so that the Python between
    # it and the next step's launches (tens of µs, a few hundred on a loaded machine) stays the
    # sync's gap.
    global result
    result += fake.fake_launch(b"attention_kernel", 400000)

# FAKE_NVTX=1: each step is an NVTX range "step" around a range "rope" (in a domain of its
# own) and the attention launch, with a mark after the synchronization.
nvtx = os.environ.get("FAKE_NVTX") == "1"
fake.fake_nvtx_push.restype = ctypes.c_uint32

def step():
    if nvtx:
        fake.fake_nvtx_push(b"step", None)
        fake.fake_nvtx_push(b"rope", b"fakegpu")
    rope()
    if nvtx:
        fake.fake_nvtx_pop()
    attention()
    fake.fake_synchronize()
    if nvtx:
        fake.fake_nvtx_mark(b"synchronized")
        fake.fake_nvtx_pop()

def worker():
    for _ in range(50):
        fake.fake_launch(b"worker_kernel", 1000)

# FAKE_STATUS=FILE: after each step, the step and whether CUPTI is attached and how many
# callbacks are enabled, for a test to watch a dormant collector from outside.
# FAKE_STOP=FILE: the steps end once FILE exists (checked after each step; the step count is
# then an upper bound), so a test ends the program when it is done with it, not on a timer.
status = os.environ.get("FAKE_STATUS")
stop = os.environ.get("FAKE_STOP")
done = 0
for i in range(steps):
    step()
    done = i + 1
    if status:
        with open(status + ".tmp", "w") as f:
            f.write(f"{i} {fake.fake_cupti_attached()} {fake.fake_enabled_callbacks()}\n")
        os.replace(status + ".tmp", status)
    if stop and os.path.exists(stop):
        break
    # Between steps only: a pause before the worker thread would make its first gap (pause plus
    # a thread start) rival the steps' gaps for the biggest one.
    if pause and i < steps - 1:
        time.sleep(pause)
t = threading.Thread(target=worker)
t.start()
t.join()
for c in children:
    assert c.wait() == 0
print(f"FAKE launched={done * 9 + 50} callbacks={fake.fake_enabled_callbacks()} result={result} "
      f"attached={fake.fake_cupti_attached()} finalizes={fake.fake_finalizes(0)}/{fake.fake_finalizes(1)} steps={done} "
      f"kernel_records={fake.fake_kernel_records()}",
      flush=True)
