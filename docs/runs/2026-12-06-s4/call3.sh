#!/usr/bin/env bash
# Session 2026-12-06 s4, call 3: the rows call 2 left off ±20%, 5 pairs and 3 recorded runs each.
set -u
O=$OUT; cd "$(dirname "$0")"; export PYTHONUNBUFFERED=1; S0=$SECONDS
gs=$(timeout 90 python3 graph_sched.py 5 2>&1 | sed -n 's/.*sched_n=\([0-9]*\).*/\1/p')
echo "sizes: graph_sched sched_n=${gs:-?} at $((SECONDS - S0)) s" > $O/diag-run.txt
export ARGS_graph_sched="--sched-n ${gs:-40}"
DIAG_DIR=/tmp/diagC OUT=$O REPS=5 REC_REPS=3 KINETO=none RUN_TIMEOUT=90 \
  WORKLOADS="optim_loop:40:fused loader_train:30 graph_sched:40:pipeline" \
  BUDGET=$((330 - (SECONDS - S0))) timeout $((520 - (SECONDS - S0))) taskset -c 2-13 bash diagnosis.sh >> $O/diag-run.txt 2>&1
grep -h "collector adds" /tmp/diagC/*.record.log >> $O/diag-run.txt
echo "end at $((SECONDS - S0)) s" >> $O/diag-run.txt
