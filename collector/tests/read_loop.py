# A loop that reads its input from a file on the launch path, played against the fake libcupti
# (no GPU): a 64 MiB file is written once into DIR; each iteration reads the next 16 MiB of it in
# `load`, past the page cache (O_DIRECT; where the file system refuses that, the chunk is dropped
# from the cache first with posix_fadvise DONTNEED, which needs no privilege), so that the read
# waits for the disk, then `forward` launches six short kernels. Its truth: STEPS iterations,
# their gaps the main thread asleep reading DIR/input.bin under `load`.
import mmap, os, sys

from fakestart import fake

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
path = os.path.join(sys.argv[2] if len(sys.argv) > 2 else ".", "input.bin")
CHUNK = 16 << 20  # a read of several ms: the sampler reads each sleeping thread's call about every ms, and a loaded machine delays it
SIZE = 64 << 20
with open(path, "wb") as f:
    block = os.urandom(1 << 20)
    for _ in range(SIZE >> 20):
        f.write(block)
    f.flush()
    os.fsync(f.fileno())
try:
    fd, direct = os.open(path, os.O_RDONLY | os.O_DIRECT), True
except OSError:
    fd, direct = os.open(path, os.O_RDONLY), False
buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT needs


def load(i):
    at = (i * CHUNK) % SIZE
    if not direct:
        os.posix_fadvise(fd, at, CHUNK, os.POSIX_FADV_DONTNEED)
    return os.preadv(fd, [buf], at)


def forward():
    for _ in range(6):
        fake.fake_launch(b"void small_kernel<float>(float*, int)", 1000)


total = 0
for i in range(steps):
    total += load(i)
    forward()
os.close(fd)
os.unlink(path)
fake.fake_synchronize()
print(f"READ_LOOP steps={steps} bytes={total}", flush=True)
