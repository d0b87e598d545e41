#!/usr/bin/env bash
# Session 2026-12-06 s4, call 1: backward_bound with the final probe, then the decomposition.
set -u
cd "$(dirname "$0")"
S=$SECONDS
DIAG_DIR=/tmp/diagA OUT=$OUT/bb REPS=4 REC_REPS=3 WORKLOADS="backward_bound:60" KINETO=none BUDGET=200 RUN_TIMEOUT=60 taskset -c 2-13 bash diagnosis.sh > $OUT/diag-bb.txt 2>&1
grep -h "collector adds" /tmp/diagA/*.record.log >> $OUT/diag-bb.txt
for k in 1 2 3; do python3 -c "import json,sys; j=json.load(open('/tmp/diagA/backward_bound.$k.json')); print($k, j.get('replay',{}).get('profiler'), j.get('replay',{}).get('profiler_unmeasured'))" >> $OUT/diag-bb.txt 2>&1; done
echo "diag took $((SECONDS-S)) s" >> $OUT/diag-bb.txt
left=$((520 - (SECONDS-S)))
echo "decomp budget $left" > $OUT/decomp.txt
if [ $left -gt 90 ]; then
python3 overhead.py --gaptop ./gaptop --kineto kineto.py --pin 2-13 --no-profiler --reps 3 --budget $((left-40)) \
  --variant minimal:GAPTOP_SAMPLE_HZ=0,GAPTOP_CTX_SWITCHES=0,GAPTOP_PYSTACKS=0 \
  --variant kernelonly:GAPTOP_API=0,GAPTOP_MEM_ACTIVITY=0,GAPTOP_SAMPLE_HZ=0,GAPTOP_CTX_SWITCHES=0,GAPTOP_PYSTACKS=0 \
  backward_bound.py:40 >> $OUT/decomp.txt 2>&1
fi
echo "total $((SECONDS-S)) s" >> $OUT/decomp.txt
