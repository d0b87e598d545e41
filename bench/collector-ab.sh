#!/usr/bin/env bash
# Two builds of the collector side by side on the GPU machine, with the same viewer: A (the
# build before a change) and B (after). For a change that only moves the collector's code
# (issue 32), everything the collector does must read the same: the calibration, the Python
# frames of launches and of CPU samples, a dormant collector's attach, detach and second
# attach, and the overhead, interleaved.
#
#   collector-ab.sh A.so B.so       (from the carried folder: gaptop and the workloads beside it)
#
# Writes under $OUT/ab/: each build's reports and logs, and times.tsv (workload, build, rep,
# start and end). ONLY_TIMES=1 runs the interleaved timing alone.
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
G=$PWD/gaptop
A=$(realpath "$1"); B=$(realpath "$2")
O=${OUT:-/tmp/out}/ab; mkdir -p "$O"
nvidia-smi -L; python3 -c 'import sys; print(sys.version)'
for name in A B; do
  [ -n "${ONLY_TIMES:-}" ] && break
  so=$A; [ $name = B ] && so=$B
  export GAPTOP_COLLECTOR=$so
  echo "== $name: $(sha256sum "$so" | cut -c1-16)"
  python3 pystack.py "$so" > "$O/$name-pystack.txt" 2>&1; echo "pystack: $(tail -1 "$O/$name-pystack.txt")"
  # The calibration and a launch-bound loop's launches with their Python frames.
  GAPTOP_VERBOSE=1 $G record -o "$O/$name-lb.rec" -- python3 launchbound.py 2000 > "$O/$name-lb.log" 2>&1
  grep -iE "calibrat|python|recorded" "$O/$name-lb.log" | cut -c1-200 | head -6
  $G report "$O/$name-lb.rec" > "$O/$name-lb.txt" 2>&1; head -3 "$O/$name-lb.txt" | cut -c1-200
  # CPU samples with Python frames (the layout the collector writes beside the socket).
  $G record -o "$O/$name-loader.rec" -- python3 loader_train.py 30 > "$O/$name-loader.log" 2>&1
  $G report "$O/$name-loader.rec" > "$O/$name-loader.txt" 2>&1; head -3 "$O/$name-loader.txt" | cut -c1-240
  # Dormant: attach (a capture), detach, attach again.
  export GAPTOP_CONTROL_DIR=/tmp/gaptop-ctl-$name-$$
  $G run --dormant --job loop$name -- python3 launchbound.py 200000 > "$O/$name-dormant.log" 2>&1 &
  LOOP=$!
  for i in $(seq 60); do $G attach 2>/dev/null | grep -q loop$name && break; sleep 1; done
  for round in 1 2; do
    $G capture loop$name --duration 2s -o "$O/$name-capture$round.rec" > "$O/$name-capture$round.log" 2>&1
    echo "capture $round: $(tail -1 "$O/$name-capture$round.log" | cut -c1-160)"
    $G report "$O/$name-capture$round.rec" 2>&1 | head -2 | cut -c1-200
  done
  $G attach > "$O/$name-list.txt" 2>&1; grep loop$name "$O/$name-list.txt" | cut -c1-160
  kill $LOOP 2>/dev/null; wait $LOOP 2>/dev/null
  unset GAPTOP_CONTROL_DIR
done
# Overhead, interleaved: bare, A, B in turn.
printf 'workload\tbuild\trep\tt0\tt1\n' > "$O/times.tsv"
for rep in $(seq ${REPS:-5}); do
  for name in bare A B; do
    t0=$(date +%s.%N)
    case $name in
      bare) python3 launchbound.py 3000 > /dev/null 2>&1 ;;
      A) GAPTOP_COLLECTOR=$A $G record -o /tmp/ab.rec -- python3 launchbound.py 3000 > /dev/null 2>&1 ;;
      B) GAPTOP_COLLECTOR=$B $G record -o /tmp/ab.rec -- python3 launchbound.py 3000 > /dev/null 2>&1 ;;
    esac
    t1=$(date +%s.%N)
    printf 'launchbound\t%s\t%s\t%s\t%s\n' $name $rep "$t0" "$t1" >> "$O/times.tsv"
  done
done
python3 - "$O/times.tsv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
by = {}
for r in rows:
    by.setdefault(r['build'], []).append(float(r['t1']) - float(r['t0']))
bare = statistics.median(by['bare'])
for b in ('bare', 'A', 'B'):
    m = statistics.median(by[b])
    print(f"{b:5} median {m:.3f} s  ratio to bare {m / bare:.3f}  ({' '.join(f'{x:.2f}' for x in by[b])})")
EOF
