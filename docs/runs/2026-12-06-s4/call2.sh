#!/usr/bin/env bash
# Session 2026-12-06 s4, call 2: the other rows with the final probe.
set -u
O=$OUT; cd "$(dirname "$0")"; export PYTHONUNBUFFERED=1; S0=$SECONDS
gs=$(timeout 90 python3 graph_sched.py 5 2>&1 | sed -n 's/.*sched_n=\([0-9]*\).*/\1/p')
echo "sizes: graph_sched sched_n=${gs:-?} at $((SECONDS - S0)) s"
export ARGS_graph_sched="--sched-n ${gs:-40}" ARGS_item_sync="--host-n 10"
DIAG_DIR=/tmp/diagB OUT=$O REPS=3 KINETO=none RUN_TIMEOUT=90 \
  WORKLOADS="item_sync:200 optim_loop:40:fused graph_sched:40:pipeline shape_planning:30 loader_train:30" \
  BUDGET=$((400 - (SECONDS - S0))) timeout $((540 - (SECONDS - S0))) taskset -c 2-13 bash diagnosis.sh > $O/diag-run.txt 2>&1
grep -h "collector adds" /tmp/diagB/*.record.log >> $O/diag-run.txt
echo "end at $((SECONDS - S0)) s" >> $O/diag-run.txt
