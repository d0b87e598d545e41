#!/usr/bin/env python3
"""What the context-switch records (issue 41) cost the profiled program: bench/workloads/switchy.py
under `gaptop record` with them (the default) and without (GAPTOP_CTX_SWITCHES=0), alternating
run by run, REPS pairs; the program's own loop time of each, and the median ratio with / without.

    cargo build --release --workspace
    python3 bench/offcpu_cost.py [REPS] [STEPS]      (default 15 pairs of 300 steps)
"""
import os, re, shutil, statistics, subprocess, sys, tempfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
steps = sys.argv[2] if len(sys.argv) > 2 else "300"
rel = os.path.join(root, "target/release")
work = tempfile.mkdtemp(prefix="offcpu-cost-")
lib = os.path.join(work, "cuda/lib64")
os.makedirs(lib)
for name in ["libcupti.so", "libcupti.so.13"]:
    shutil.copy(os.path.join(rel, "libcupti.so"), os.path.join(lib, name))
env = dict(os.environ, CUDA_HOME=os.path.join(work, "cuda"),
           GAPTOP_COLLECTOR=os.path.join(rel, "libgaptop_collector.so"), GAPTOP_FAKE_CUPTI="1")
env.pop("LD_LIBRARY_PATH", None)


def run(switches):
    e = dict(env)
    if not switches:
        e["GAPTOP_CTX_SWITCHES"] = "0"
    rec = os.path.join(work, "x.rec")
    out = subprocess.run([os.path.join(rel, "gaptop"), "record", "-o", rec, "--", "python3",
                          os.path.join(root, "bench/workloads/switchy.py"), steps],
                         env=e, capture_output=True, text=True, check=True)
    m = re.search(r"seconds=([0-9.]+)", out.stdout + out.stderr)
    if "refused" in out.stderr:
        print(out.stderr.strip(), file=sys.stderr)
    return float(m.group(1))


on, off, ratios = [], [], []
for i in range(reps):
    # Alternate which goes first, so that neither always follows the other.
    pair = [(True, on), (False, off)] if i % 2 == 0 else [(False, off), (True, on)]
    got = {}
    for sw, into in pair:
        t = run(sw)
        into.append(t)
        got[sw] = t
    ratios.append(got[True] / got[False])
    print(f"rep {i + 1}: with {got[True]:.4f} s, without {got[False]:.4f} s, "
          f"ratio {ratios[-1]:.3f}", flush=True)
q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
print(f"with switch records: median {statistics.median(on):.4f} s; without: median "
      f"{statistics.median(off):.4f} s; ratio median {statistics.median(ratios):.3f} "
      f"(quartiles {q[0]:.3f} to {q[2]:.3f}, range {min(ratios):.3f} to {max(ratios):.3f}), "
      f"{reps} pairs of {steps} steps")
shutil.rmtree(work)
