#!/usr/bin/env bash
# One device call for the estimates' and the thread states' GPU rows (docs/gpu-todo.md; as run
# on 2026-12-06): each workload's host work sized once here and given to every run of it (so
# bare, fixed and recorded runs do the same CPU work), then diagnosis.sh: bare runs interleaved
# before and after the fix, the unfixed run recorded and reported, backward_bound's Kineto
# trace reported too. From the carried folder gpu/ (docs/perf.md says how it is built):
#   OUT=$OUT bash gpu/gpu-call.sh        (WL= replaces the workloads, REPS= the pairs)
# diagnosis.sh packs its work into $OUT/diag2.tgz and diag2-traces.tgz (the device tool brings
# back only a few files a call).
set -u
O=$OUT; cd "$(dirname "$0")"; export PYTHONUNBUFFERED=1; S0=$SECONDS
echo "start $(date +%T)"; nvidia-smi -L
# The collector as built: a launch-bound loop recorded, every kernel with its launch and its
# Python stack, nothing dropped.
[ -n "${SKIP_LB:-}" ] || GAPTOP_VERBOSE=1 timeout 60 ./gaptop record -o /tmp/lb.rec -- python3 launchbound.py 2000 > $O/lb.log 2>&1
grep -iE "python frames|recorded|dropped" $O/lb.log | cut -c1-220 | head -4
[ -n "${SKIP_LB:-}" ] || ./gaptop report --format json /tmp/lb.rec | python3 -c "
import json, sys; j = json.load(sys.stdin)
print('lb', {k: j.get(k) for k in ('kernels', 'kernels_with_launch', 'kernels_with_stack', 'kernels_with_python', 'dropped')})"
gs=$(timeout 90 python3 graph_sched.py 5 2>&1 | sed -n 's/.*sched_n=\([0-9]*\).*/\1/p')
is=$(timeout 90 python3 item_sync.py 20 2>&1 | tee $O/item-probe.txt | sed -n 's/.*host_n=\([0-9]*\).*/\1/p')
echo "sizes: graph_sched sched_n=${gs:-?} item_sync host_n=${is:-?} at $((SECONDS - S0)) s"; tail -2 $O/item-probe.txt
export ARGS_graph_sched="--sched-n ${gs:-40}" ARGS_item_sync="--host-n ${is:-20}"
GAPTOP_VERBOSE=1 OUT=$O REPS=${REPS:-4} KINETO=backward_bound RUN_TIMEOUT=90 \
  WORKLOADS="${WL:-item_sync:200 backward_bound:60 optim_loop:40:fused graph_sched:40:pipeline}" \
  BUDGET=$((${TOTAL:-560} * 3 / 4 - (SECONDS - S0))) timeout $((${TOTAL:-560} - (SECONDS - S0))) bash diagnosis.sh > $O/diag-run.txt 2>&1
tail -70 $O/diag-run.txt | cut -c1-260
echo "end $(date +%T) at $((SECONDS - S0)) s"
