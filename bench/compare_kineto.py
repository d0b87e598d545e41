#!/usr/bin/env python3
"""Checks gaptop's kernel capture against torch.profiler's on the same workload.

Runs the workload once under torch.profiler (kineto.py, writing a trace) and once under
`gaptop record`, reports both with `gaptop report --format json`, and compares kernel counts
(must be equal) and total kernel time (within 1%). Also checks that the Python stacks name the
given functions.

usage: compare_kineto.py --gaptop PATH --kineto kineto.py --out DIR WORKLOAD.py ITERS [--expect NAME ...]
"""
import argparse, json, os, subprocess, sys

def report(gaptop, path):
    p = subprocess.run([gaptop, "report", path, "--format", "json", "--top", "5"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"report failed on {path}: {p.stderr}")
    return json.loads(p.stdout)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gaptop", required=True)
    ap.add_argument("--kineto", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("script")
    ap.add_argument("iters")
    a = ap.parse_args()
    name = os.path.splitext(os.path.basename(a.script))[0]
    trace = os.path.join(a.out, f"{name}.kineto.json")
    rec = os.path.join(a.out, f"{name}.rec")
    p = subprocess.run([sys.executable, a.kineto, trace, "nostack", "--", a.script, a.iters], capture_output=True, text=True)
    print("torch.profiler:", p.stdout.strip().splitlines()[-1:] , p.returncode)
    p = subprocess.run([a.gaptop, "record", "-o", rec, "--", sys.executable, a.script, a.iters], capture_output=True, text=True)
    print("gaptop:", p.stdout.strip().splitlines()[-1:], p.stderr.strip().splitlines()[-2:], p.returncode)
    k = report(a.gaptop, trace)
    g = report(a.gaptop, rec)
    ok = True
    print(f"{'':16s} {'kernels':>10s} {'kernel_ns':>14s} {'gpu_ops':>10s}")
    for n, r in (("torch.profiler", k), ("gaptop", g)):
        print(f"{n:16s} {r['kernels']:10d} {r['kernel_ns']:14d} {r['gpu_ops']:10d}")
    if k["kernels"] != g["kernels"]:
        print(f"FAIL kernel count differs: {k['kernels']} vs {g['kernels']}"); ok = False
    diff = abs(k["kernel_ns"] - g["kernel_ns"]) / max(1, k["kernel_ns"])
    print(f"kernel time difference {diff*100:.3f}%")
    if diff > 0.01:
        print("FAIL kernel time differs by more than 1%"); ok = False
    frames = [f for s in g["top_stacks"] for f in s["frames"]]
    for e in a.expect:
        hit = any(e in f for f in frames)
        print(f"stack names {e!r}: {'yes' if hit else 'NO'}")
        ok &= hit
    print(f"gaptop kernels with a launch call {g.get('kernels_with_launch')}, with a stack {g.get('kernels_with_stack')}")
    print("top gaptop stack:", g["top_stacks"][0]["frames"][-6:] if g["top_stacks"] else None)
    print(f"idle gaptop: {g['idle']}\nidle torch.profiler: {k['idle']}")
    print("RESULT", name, "PASS" if ok else "FAIL")

if __name__ == "__main__":
    main()
