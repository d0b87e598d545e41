#!/usr/bin/env python3
"""Overhead benchmark: each workload bare, under `gaptop record` (Python stacks on), and under
torch.profiler (kineto.py, stacks on, nothing written), interleaved, REPS times each.

Prints the median per-iteration time of the workload's own timed section for each mode and the
ratios to bare, measured side by side in one run. Each repetition runs every workload once in
every mode (in a shuffled order); with --budget a run stops before a repetition that would pass
it, so a run cut short still compares every workload.

usage: overhead.py --gaptop PATH --kineto PATH/kineto.py [--reps 5] [--budget S] WORKLOAD.py:ITERS ...
"""
import argparse, os, random, re, statistics, subprocess, sys, tempfile, time

def per_iter(out):
    m = re.search(r"WORKLOAD (\S+) iters=(\d+) wall_s=([\d.]+)", out)
    if not m:
        return None
    return float(m.group(3)) / int(m.group(2)) * 1e6  # µs per iteration

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gaptop", required=True)
    ap.add_argument("--kineto", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[],
                    help="extra gaptop mode NAME:ENV=V,ENV=V (collector knobs)")
    ap.add_argument("--no-profiler", action="store_true")
    ap.add_argument("--pin", help="run every command under taskset -c PIN (less noise)")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: start no repetition that would end past this (0: no limit)")
    ap.add_argument("workloads", nargs="+")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    plans = []  # (script, iters, {mode: (cmd, env)}, {mode: [µs/iter]}, [{mode: µs/iter} per rep])
    for wl in a.workloads:
        script, iters = wl.split(":")
        grec = [a.gaptop, "record", "-o", os.path.join(tmp, "r.rec"), "--", sys.executable, script, iters]
        modes = {"bare": ([sys.executable, script, iters], {}), "gaptop": (grec, {})}
        for v in a.variant:
            name, _, kv = v.partition(":")
            modes[name] = (grec, dict(x.split("=", 1) for x in kv.split(",") if x))
        if not a.no_profiler:
            modes["torch.profiler"] = ([sys.executable, a.kineto, "-", "stack", "--", script, iters], {})
        plans.append((script, iters, modes, {m: [] for m in modes}, []))
    t_start = time.time()
    # Repetitions outside, workloads inside: a run cut short still has samples of every workload.
    for rep in range(a.reps):
        if a.budget and rep > 0:
            spent = time.time() - t_start
            if spent / rep * (rep + 1) > a.budget:
                print(f"(stopping after {rep} repetitions: another would pass the {a.budget:.0f} s budget)", flush=True)
                break
        for script, iters, modes, times, by_rep in plans:
            # A fresh order each repetition: a mode never always follows the same one.
            by_rep.append({})
            order = list(modes.items())
            random.Random(rep).shuffle(order)
            for m, (cmd, env) in order:
                if a.pin:
                    cmd = ["taskset", "-c", a.pin] + cmd
                t0 = time.time()
                p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
                v = per_iter(p.stdout)
                if v is None:
                    print(f"{script}:{iters} {m}: no WORKLOAD line (exit {p.returncode})\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}", flush=True)
                    continue
                times[m].append(v)
                by_rep[-1][m] = v
                extra = ""
                if "record" in cmd:
                    extra = " | " + " ".join(l for l in p.stderr.splitlines() if "recorded" in l)
                print(f"  {os.path.basename(script)} rep{rep} {m:15s} {v:10.1f} us/iter ({time.time()-t0:.1f}s){extra}", flush=True)
    table([(os.path.basename(script), iters,
            {m: statistics.median(v) if v else float("nan") for m, v in times.items()}, times, by_rep)
           for script, iters, modes, times, by_rep in plans])
    print("(overhead ratio = gaptop's added time / torch.profiler's added time; target < 0.5)", flush=True)

def table(rows):
    print(flush=True)
    print(f"{'workload':16s} {'bare us/it':>11s} {'gaptop':>9s} {'torch.prof':>11s} {'gaptop/bare':>12s} {'prof/bare':>10s} {'overhead ratio':>15s}")
    for name, iters, med, times, by_rep in rows:
        b, g, k = med["bare"], med["gaptop"], med.get("torch.profiler", float("nan"))
        for m, v in med.items():
            if m not in ("bare", "gaptop", "torch.profiler"):
                print(f"  variant {m:20s} {v:10.1f} us/iter  {v/b:.3f}x bare")
        ratio = (g - b) / (k - b) if k > b else float("nan")
        print(f"{name + ':' + iters:16s} {b:11.1f} {g:9.1f} {k:11.1f} {g/b:12.3f} {k/b:10.3f} {ratio:15.2f}")
        # Minimums too: on a shared machine interference only ever adds time.
        lo = {m: min(v) if v else float("nan") for m, v in times.items()}
        lb, lg, lk = lo["bare"], lo["gaptop"], lo.get("torch.profiler", float("nan"))
        lr = (lg - lb) / (lk - lb) if lk > lb else float("nan")
        print(f"{'  (minimums)':16s} {lb:11.1f} {lg:9.1f} {lk:11.1f} {lg/lb:12.3f} {lk/lb:10.3f} {lr:15.2f}")
        for m, v in lo.items():
            if m not in ("bare", "gaptop", "torch.profiler"):
                print(f"  variant {m:20s} min {v:10.1f} us/iter  {v/lb:.3f}x bare")
        # Ratios within each repetition (each mode against that repetition's bare run), then
        # their median: slow drifts of the machine cancel out of these.
        paired = {m: [r[m] / r["bare"] for r in by_rep if m in r and "bare" in r]
                  for m in times if m != "bare"}
        print("  per-repetition ratios to bare, median (range): " + ", ".join(
            f"{m} {statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})" for m, r in paired.items() if r))
        # The overhead ratio from the same repetitions' ratios: (gaptop - 1) / (profiler - 1).
        pg, pk = paired.get("gaptop", []), paired.get("torch.profiler", [])
        if pg and pk and statistics.median(pk) > 1:
            print(f"  overhead ratio from per-repetition medians: "
                  f"{(statistics.median(pg) - 1) / (statistics.median(pk) - 1):.2f}")
        print(f"  samples: " + "; ".join(f"{m}=" + ",".join(f"{x:.0f}" for x in v) for m, v in times.items()))
    sys.stdout.flush()

if __name__ == "__main__":
    main()
