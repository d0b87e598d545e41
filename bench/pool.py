#!/usr/bin/env python3
"""Pools the repetitions of several overhead.py runs (their printed logs) into one table.

The GPU machine is noisy and one device call fits 5-15 repetitions; runs of the same build and
command on different machines can be pooled: each repetition keeps its own bare run, so the
per-repetition ratios stay paired. Prints overhead.py's table, with the target verdict, over
all the repetitions found. A workload run with different iteration counts is pooled per count.

usage: pool.py LOG [LOG ...]
"""
import collections, os, re, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402

# "  launchbound.py:3000 rep4 gaptop      1055.0 us/iter (9.3s) | ..." (older logs: no ":ITERS")
REP = re.compile(r"^\s+(\S+?\.py)(?::(\d+))? rep(\d+) (\S+)\s+([\d.]+) us/iter")
# The table's row names the iterations where the repetition lines did not.
ROW = re.compile(r"^(\S+?\.py):(\d+)\s+[\d.]+")

def read(path):
    """{(script, iters): {rep: {mode: µs/iter}}} from one log."""
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    iters_of = {m[1]: m[2] for m in map(ROW.match, lines) if m}
    runs = collections.defaultdict(lambda: collections.defaultdict(dict))
    for m in filter(None, map(REP.match, lines)):
        script, iters = m[1], m[2] or iters_of.get(m[1], "?")
        runs[(script, iters)][int(m[3])][m[4]] = float(m[5])
    return runs

def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    pooled = collections.defaultdict(list)  # (script, iters) -> [{mode: µs/iter}] per repetition
    for path in sys.argv[1:]:
        try:
            runs = read(path)
        except OSError as e:
            sys.exit(f"pool.py: cannot read {path}: {e.strerror}")
        if not runs:
            sys.exit(f"pool.py: {path} holds no repetition lines of overhead.py")
        for key, reps in runs.items():
            pooled[key].extend(reps[r] for r in sorted(reps))
            print(f"{path}: {key[0]}:{key[1]}, {len(reps)} repetitions")
    rows = []
    for (script, iters), by_rep in sorted(pooled.items()):
        times = collections.defaultdict(list)
        # bare, gaptop, its variants, torch.profiler: the order overhead.py prints them in.
        order = lambda m: ({"bare": 0, "gaptop": 1, "torch.profiler": 3}.get(m, 2), m)
        for m in sorted({m for r in by_rep for m in r}, key=order):
            times[m] = [r[m] for r in by_rep if m in r]
        if "bare" not in times or "gaptop" not in times:
            print(f"{script}:{iters}: no bare and gaptop runs to compare; left out")
            continue
        med = {m: statistics.median(v) for m, v in times.items()}
        rows.append((script, iters, med, dict(times), by_rep))
    if rows:
        overhead.table(rows)

if __name__ == "__main__":
    main()
