#!/usr/bin/env bash
# One device call for all (as run on 2026-12-05, third session; docs/perf.md): the collector's
# sanity on a GPU, issue 36's replayed savings against the fixes, issue 41's loader and .item()
# rows, as time allows. From the carried folder gpu/ (docs/perf.md says how it is built):
#   OUT=$OUT bash gpu/gpu-call.sh        (WL= replaces the diagnosis' workloads)
# Everything but diagnosis.sh's own archives is packed into $OUT/call.tgz at the end: the
# device tool brings back only a few files a call.
set -u
O=$OUT; OUT=/tmp/gpu-call; rm -rf $OUT; mkdir -p $OUT
cd "$(dirname "$0")"; export PYTHONUNBUFFERED=1; G=$PWD/gaptop; S0=$SECONDS
echo "start $(date +%T)"; nvidia-smi -L
# 1. The collector as on main: a launch-bound loop recorded (every kernel with its launch and
#    Python stack, nothing dropped), and a dormant GPT-2 captured from outside.
GAPTOP_VERBOSE=1 timeout 60 $G record -o $OUT/lb.rec -- python3 launchbound.py 2000 > $OUT/lb.log 2>&1
grep -iE "python|recorded|inside gaptop|dropped" $OUT/lb.log | cut -c1-220 | head -5
$G report --format json $OUT/lb.rec > $OUT/lb.json 2>&1
python3 -c "
import json; j=json.load(open('$OUT/lb.json'))
print('lb', {k:j.get(k) for k in ('kernels','kernels_with_launch','kernels_with_stack','kernels_with_python','dropped')})"
export GAPTOP_CONTROL_DIR=/tmp/ctl-gpt2
$G run --dormant --job gpt2loop -- python3 gpt2.py 20000 > $OUT/gpt2-dormant.log 2>&1 &
L=$!
for i in $(seq 60); do $G attach 2>/dev/null | grep -q gpt2loop && break; sleep 1; done
sleep 3
timeout 40 $G capture gpt2loop --duration 4s -o $OUT/gpt2cap.rec > $OUT/gpt2cap.log 2>&1; echo "capture exit $?: $(tail -1 $OUT/gpt2cap.log | cut -c1-200)"
$G attach 2>&1 | grep gpt2loop | cut -c1-160
kill $L; wait $L 2>/dev/null; unset GAPTOP_CONTROL_DIR
$G report --format json $OUT/gpt2cap.rec > $OUT/gpt2cap.json 2>&1
python3 -c "
import json; j=json.load(open('$OUT/gpt2cap.json'))
print('gpt2 capture', {k:j.get(k) for k in ('kernels','kernels_with_launch','kernels_with_stack','kernels_with_python','dropped')})" 2>&1 | tail -1
echo "== 36 at $((SECONDS - S0)) s"
# 2. Issue 36.
GAPTOP_VERBOSE=1 OUT=$O REPS=3 WORKLOADS="${WL:-llama_steps:24:warm graph_sched:40:pipeline backward_bound:60}" \
  KINETO=none BUDGET=$((330 - (SECONDS - S0))) RUN_TIMEOUT=80 timeout $((470 - (SECONDS - S0))) bash diagnosis.sh > $O/diag-run.txt 2>&1
tail -45 $O/diag-run.txt | cut -c1-260
echo "== 41 at $((SECONDS - S0)) s"
# 3. Issue 41, as time allows.
for w in "loader2:loader_train.py 30 --fix --workers 2" "item:item_sync.py 200" "item_fix:item_sync.py 200 --fix"; do
  [ $((SECONDS - S0)) -lt 540 ] || { echo "skipped ${w%%:*}"; continue; }
  n=${w%%:*}; cmd=${w#*:}
  timeout 45 $G record -o $OUT/$n.rec -- python3 $cmd > $OUT/$n.log 2>&1; echo "$n exit $? $(grep STEP_MS $OUT/$n.log)"
  $G report $OUT/$n.rec > $OUT/$n.txt 2>&1; $G report --format json $OUT/$n.rec > $OUT/$n.json 2>&1
  head -3 $OUT/$n.txt | cut -c1-400
done
echo "end $(date +%T) at $((SECONDS - S0)) s"
tar czf $O/call.tgz -C /tmp gpu-call
