#!/usr/bin/env bash
# Session 2026-12-06 s4, call 4: item_sync on (hopefully) a quiet machine, then gaptop's parts on optim_loop and backward_bound.
set -u
O=$OUT; cd "$(dirname "$0")"; export PYTHONUNBUFFERED=1; S0=$SECONDS
ARGS_item_sync="--host-n 10" DIAG_DIR=/tmp/diagD OUT=$O REPS=4 REC_REPS=3 KINETO=none RUN_TIMEOUT=60 WORKLOADS="item_sync:200" \
  BUDGET=100 timeout 150 taskset -c 2-13 bash diagnosis.sh > $O/diag-item.txt 2>&1
echo "item_sync took $((SECONDS-S0)) s" >> $O/diag-item.txt
left=$((400 - (SECONDS - S0)))
python3 overhead.py --gaptop ./gaptop --kineto kineto.py --pin 2-13 --no-profiler --reps 8 --budget $left \
  --variant minimal:GAPTOP_SAMPLE_HZ=0,GAPTOP_CTX_SWITCHES=0,GAPTOP_PYSTACKS=0 \
  --variant kernelonly:GAPTOP_API=0,GAPTOP_MEM_ACTIVITY=0,GAPTOP_SAMPLE_HZ=0,GAPTOP_CTX_SWITCHES=0,GAPTOP_PYSTACKS=0 \
  optim_loop.py:20 backward_bound.py:40 > $O/decomp.txt 2>&1
echo "total $((SECONDS-S0)) s" >> $O/decomp.txt
