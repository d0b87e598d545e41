#!/usr/bin/env bash
# Runs on the GPU machine from the carried folder gpu/ (docs/perf.md says how it is built).
# usage: gpu-run.sh check|bench|variants|all
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
G=$PWD/gaptop
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODE=${1:-all}
nvidia-smi -L
python3 -c 'import sys; print(sys.version)'
if [ "$MODE" = check ] || [ "$MODE" = all ]; then
  python3 pystack.py ./libgaptop_collector.so 2>&1 | tail -3
  GAPTOP_VERBOSE=1 $G record -o "$OUT/planted.rec" -- python3 planted.py 100 2>&1 | tail -4
  $G report "$OUT/planted.rec" | head -70
  python3 compare_kineto.py --gaptop $G --kineto kineto.py --out "$OUT" launchbound.py 300 --expect rope 2>&1 | tee "$OUT/compare_lb.txt"
  python3 compare_kineto.py --gaptop $G --kineto kineto.py --out "$OUT" gpt2.py 10 --expect forward 2>&1 | tee "$OUT/compare_gpt2.txt"
  rm -f "$OUT"/*.kineto.json
fi
if [ "$MODE" = variants ]; then
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-3} --no-profiler \
    --variant nostack:GAPTOP_PYSTACKS=0 --variant nodriver:GAPTOP_DRIVER_CB=0 \
    --variant noapi:GAPTOP_API=0 --variant noflush:GAPTOP_FLUSH_MS=0 \
    launchbound.py:2000 2>&1 | tee "$OUT/variants.txt"
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-5} launchbound.py:${LB_ITERS:-1000} gpt2.py:${GPT2_ITERS:-10} 2>&1 | tee "$OUT/overhead.txt"
fi
