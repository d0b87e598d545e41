#!/usr/bin/env bash
# Fault tests on the GPU machine (run from the carried gpu/ folder). Prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")"
G=$PWD/gaptop
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }

N=150000
bare=$(python3 checksum.py $N | grep CHECKSUM)
echo "bare: $bare"

# 1. The viewer is SIGKILLed mid-run: the program finishes with the same result.
$G record -o "$OUT/killed-viewer.rec" -- python3 checksum.py $N > "$OUT/kv.out" 2> "$OUT/kv.err" &
gp=$!
sleep 6
if kill -9 $gp; then echo "viewer killed while the program ran"; else fail "viewer killed: the program ended before the kill"; fi
for i in $(seq 1 90); do pgrep -f "^python3 checksum.py $N" >/dev/null || break; sleep 1; done
got=$(grep CHECKSUM "$OUT/kv.out")
[ "$got" = "$bare" ] && pass "viewer killed: program finished, same checksum" || fail "viewer killed: got '$got' want '$bare'"
grep -h "collector" "$OUT/kv.err" | head -3
$G report "$OUT/killed-viewer.rec" > "$OUT/kv.report" 2>&1 && pass "partial recording opens: $(head -2 "$OUT/kv.report" | tail -1)" || fail "partial recording: $(cat "$OUT/kv.report" | head -3)"

# 2. The program is SIGKILLed mid-run: the recording keeps what arrived and says it ended.
$G record -o "$OUT/killed-prog.rec" -- python3 checksum.py 200000 > "$OUT/kp.out" 2> "$OUT/kp.err" &
gp=$!
sleep 8
pkill -9 -f "^python3 checksum.py 200000"
wait $gp; rc=$?
echo "gaptop exit status $rc (the program's status, 137 = SIGKILL); $(tail -1 "$OUT/kp.err")"
$G report "$OUT/killed-prog.rec" | head -2 | tail -1 && pass "program killed: recording opens" || fail "program killed"

# 3. Two processes on one GPU, labelled by rank, in one recording.
$G record -o "$OUT/multiproc.rec" -- python3 multiproc.py 2>&1 | tail -3
$G report "$OUT/multiproc.rec" --format json > "$OUT/mp.json"
python3 - "$OUT/mp.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
pids = {g["pid"] for g in j["top_gaps"]}
frames = " ".join(f for s in j["top_stacks"] for f in s["frames"])
ok = len(pids) == 2 and "stall_rank0" in frames and "stall_rank1" in frames
print(("PASS" if ok else "FAIL") + f" multi-process: {len(pids)} processes in top gaps, stalls named: {'stall_rank0' in frames}, {'stall_rank1' in frames}")
PY

# 4. The live UI under a pseudo-terminal, stopped with SIGTERM: the program keeps running.
TERM=xterm-256color timeout -s TERM 20 script -qfec "$G run --log $OUT/run.log -- python3 checksum.py 100000" /dev/null > "$OUT/tui.raw" 2>&1
echo "script exit $?"
echo "UI output: $(wc -c < "$OUT/tui.raw") bytes; its end:"
tail -c 700 "$OUT/tui.raw" | tr -c '[:print:]\n' ' ' | tr -s ' ' | tail -5
grep -a -o "LIVE\|PAUSED\|ENDED[^)]*)\|Call tree\|launches/s [0-9]*\|gaptop: [^\r]*" "$OUT/tui.raw" | sort | uniq -c | sort -rn | head -8
for i in $(seq 1 90); do pgrep -f "checksum.py 100000" >/dev/null || break; sleep 1; done
grep CHECKSUM "$OUT/run.log" && pass "gaptop run: program ran to completion after the UI quit" || fail "gaptop run: no checksum in run.log: $(tail -3 $OUT/run.log)"
