"""Cuts a Chrome trace to the events that start inside [A, B] (µs, the trace's own `ts`), keeping
its header and its metadata events; with `noflows`, flow events (ph s/f/t) are left out too.
Timestamps are copied as written (no float round trip). Writes gzipped JSON.

    python3 cut.py IN OUT A B [noflows]
"""
import gzip
import json
import sys
from decimal import Decimal

src, dst, a, b = sys.argv[1], sys.argv[2], Decimal(sys.argv[3]), Decimal(sys.argv[4])
drop_flows = len(sys.argv) > 5 and sys.argv[5] == "noflows"
opener = gzip.open if src.endswith(".gz") else open
d = json.load(opener(src, "rt"), parse_float=Decimal)


def keep(e):
    if e.get("ph") == "M":
        return True
    if drop_flows and e.get("ph") in ("s", "f", "t"):
        return False
    t = e.get("ts")
    return isinstance(t, (int, Decimal)) and a <= t <= b


def dump(o):
    if isinstance(o, Decimal):
        return str(o)
    if isinstance(o, dict):
        return "{" + ", ".join(json.dumps(k) + ": " + dump(v) for k, v in o.items()) + "}"
    if isinstance(o, list):
        return "[" + ", ".join(dump(v) for v in o) + "]"
    return json.dumps(o)


d["traceEvents"] = [e for e in d["traceEvents"] if keep(e)]
members = []
for k, v in d.items():
    body = "[\n" + ",\n".join(dump(e) for e in v) + "\n]" if k == "traceEvents" else dump(v)
    members.append(json.dumps(k) + ": " + body)
with gzip.open(dst, "wt", compresslevel=9) as f:
    f.write("{" + ",\n".join(members) + "}\n")
print(dst, len(d["traceEvents"]), "events")
