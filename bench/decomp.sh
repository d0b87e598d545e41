#!/usr/bin/env bash
# What each of gaptop's parts costs a program, side by side in one run (overhead.py's variants,
# pinned to CPUs 2-13): a sync-bound loop and a per-parameter optimizer loop under every part
# turned off in turn, then the context-switch records' cost on launchbound over 20 repetitions
# (issue 41's cost row). From the carried folder gpu/ (docs/perf.md says how it is built):
#   OUT=$OUT bash gpu/decomp.sh      (DECOMP_S and SWITCH_S split the time, in seconds)
set -u
cd "$(dirname "$0")"
P="python3 overhead.py --gaptop ./gaptop --kineto kineto.py --pin 2-13 --no-profiler"
$P --reps 6 --budget ${DECOMP_S:-280} --variant nosample:GAPTOP_SAMPLE_HZ=0 \
  --variant noswitch:GAPTOP_CTX_SWITCHES=0 --variant nopy:GAPTOP_PYSTACKS=0 \
  --variant kernelonly:GAPTOP_API=0,GAPTOP_MEM_ACTIVITY=0 \
  item_sync.py:100:--host-n,${HOST_N:-10} optim_loop.py:20 > $OUT/decomp.txt 2>&1
grep -vE "^  [a-z_]+\.py:.* rep[0-9]" $OUT/decomp.txt | tail -40
grep -E "item_sync.py:.* rep" $OUT/decomp.txt | sed 's/ | .*//' | head -40
$P --reps 20 --budget ${SWITCH_S:-200} --variant noswitch:GAPTOP_CTX_SWITCHES=0 launchbound.py:1000 > $OUT/switches.txt 2>&1
tail -12 $OUT/switches.txt
