"""Counts made apart from gaptop, in exact nanoseconds, for the README's expected values:
events by category, GPU ops, and on each stream (ops in order of start) the intervals between
an op and the work before it: gaps of length 0, overlaps (an op starting before the work
before it ended), and the gaps inside CUDA graph replays (an op and the op before it replayed
by the same cudaGraphLaunch call).

    python3 count.py TRACE...
"""
import collections
import gzip
import json
import sys
from decimal import Decimal

GPU = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
API = {"cuda_runtime", "cuda_driver", "Runtime"}


def ns(v):
    return int(Decimal(v) * 1000)


for f in sys.argv[1:]:
    opener = gzip.open if f.endswith(".gz") else open
    events = json.load(opener(f, "rt"), parse_float=Decimal)["traceEvents"]
    cats = collections.Counter(e.get("cat") for e in events if e.get("ph") == "X")
    api = {}
    lanes = collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        if e.get("cat") in API and "correlation" in a:
            api[a["correlation"]] = e["name"]
        if e.get("cat") in GPU:
            lane = (e.get("pid"), a.get("stream", e.get("tid")))
            lanes[lane].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), a.get("correlation")))
    n = collections.Counter()
    for ops in lanes.values():
        ops.sort()
        end, corr = ops[0][1], ops[0][2]
        for start, stop, c in ops[1:]:
            if start == end:
                n["zero-length gaps"] += 1
            if start < end:
                n["overlaps"] += 1
                n["overlap ns"] += end - start
            elif c == corr and str(api.get(c, "")).startswith("cudaGraphLaunch"):
                n["graph gaps"] += 1
                n["graph gap ns"] += start - end
            if stop >= end:
                end, corr = stop, c
    gpu = {k: v for k, v in cats.items() if k in GPU}
    print(f, "GPU ops", sum(gpu.values()), dict(gpu), dict(n))
