#!/usr/bin/env bash
# Issue 29's (and 36's: the replayed saving against the fix, graph_sched added) diagnosis check on the GPU machine, from the carried folder gpu/ (as gpu-run.sh;
# docs/perf.md says how gpu/ is built). For each workload (loader_train, optim_loop,
# backward_bound, shape_planning, each with its fix as `--fix`):
#   a. bare runs, unfixed and fixed, interleaved (before, after, before, after, ...), REPS each,
#      keeping each run's STEP_MS median;
#   b. the unfixed program recorded under gaptop, with `gaptop report` as text and JSON;
#   c. for KINETO (one workload), a torch.profiler trace of the same program and its reports;
#   d. a table: measured saving against the top advice's site, verdict, fix, estimate, CPU line.
# Work goes to DIAG_DIR (/tmp/diag2), packed after each workload into $OUT/diag2.tgz (reports,
# logs, timings) and $OUT/diag2-traces.tgz (recordings and the Kineto trace), so that a run cut
# short still returns what it did; the table goes to stdout and $OUT/diag2.txt.
# usage: OUT=/tmp/out bash gpu/diagnosis.sh
#   WORKLOADS="name:steps[:fix] ..." (the fix is --fix's argument; empty for its default),
#   REPS=3, KINETO=shape_planning (none: no trace), RUN_TIMEOUT=120 (seconds a run),
#   BUDGET=420 (no workload is started after this many seconds), ARGS_<name> (arguments every
#   run of that workload gets, e.g. ARGS_graph_sched="--sched-n 40"), REC_REPS=1 (recorded
#   runs; the one of median estimate is reported, every one's top saving in NAME.estimates).
# Each workload's fallbacks (a backend or compiler missing) are in the table; its runs' output
# in diag2/NAME.bare.log, the recording's in NAME.record.log.
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
G=$PWD/gaptop
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=${DIAG_DIR:-/tmp/diag2}; rm -rf "$D"; mkdir -p "$D"
REPS=${REPS:-3}
T=${RUN_TIMEOUT:-120}
BUDGET=${BUDGET:-420}
KINETO=${KINETO:-shape_planning}
W=${WORKLOADS:-"loader_train:30 optim_loop:40 backward_bound:60 shape_planning:30 graph_sched:40"}
START=$SECONDS
nvidia-smi -L
python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
for f in "$G" steploop.py; do [ -e "$f" ] || { echo "missing $f next to diagnosis.sh"; exit 1; }; done
printf "name\tmode\trep\tmedian_ms\tmean_ms\n" > "$D/times.tsv"; : > "$D/workloads.txt"

# One run's STEP_MS median (or "-"), its output appended to $D/NAME.bare.log.
bare() {
  local name=$1 mode=$2 rep=$3; shift 3
  local log=$D/$name.bare.log tmp=$D/.run.out
  echo "== $(date +%T) $mode rep $rep: python3 $name.py $*" >> "$log"
  timeout -k 10 "$T" python3 "$name.py" "$@" > "$tmp" 2>&1; local rc=$?
  cat "$tmp" >> "$log"; [ $rc -eq 0 ] || echo "exit $rc" >> "$log"
  grep -E "^(FALLBACK|WORKLOAD)" "$tmp" | cut -c1-200 | sed "s/^/  [$mode $rep] /" >&2
  local med mean
  med=$(sed -n 's/^STEP_MS median=\([0-9.]*\) mean=\([0-9.]*\).*/\1/p' "$tmp" | tail -1)
  mean=$(sed -n 's/^STEP_MS median=\([0-9.]*\) mean=\([0-9.]*\).*/\2/p' "$tmp" | tail -1)
  printf "%s\t%s\t%s\t%s\t%s\n" "$name" "$mode" "$rep" "${med:--}" "${mean:--}" >> "$D/times.tsv"
  rm -f "$tmp"
}

# One recorded run, k, of a workload, with its reports (NAME.k.rec, .txt, .json, .record.log).
record_one() {
  local name=$1 k=$2; shift 2
  timeout -k 10 "$T" "$G" record -o "$D/$name.$k.rec" -- python3 "$name.py" "$@" > "$D/$name.$k.record.log" 2>&1
  grep -E "WORKLOAD|STEP_MS|FALLBACK|recorded|CPU samples|rror" "$D/$name.$k.record.log" | cut -c1-200 | sed "s/^/  [recorded $k] /"
  "$G" report "$D/$name.$k.rec" > "$D/$name.$k.txt" 2>&1
  "$G" report --format json "$D/$name.$k.rec" > "$D/$name.$k.json" 2> "$D/$name.$k.json.err"
}

# The recorded run whose top advice's saving is the median of the n runs' becomes NAME.rec
# (.txt, .json, .record.log); every run's top saving goes to NAME.estimates.
pick_median() {
  local name=$1 n=$2 k
  k=$(python3 - "$D" "$name" "$n" <<'PY'
import json, sys
d, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
got = []
for k in range(1, n + 1):
    try:
        a = (json.load(open(f"{d}/{name}.{k}.json")).get("advice") or [{}])[0]
        got.append((a.get("saving_ns") or 0, k, a.get("site", "-")))
    except (OSError, ValueError):
        pass
with open(f"{d}/{name}.estimates", "w") as f:
    for s, k, site in got:
        f.write(f"{k}\t{s}\t{site}\n")
print(sorted(got)[(len(got) - 1) // 2][1] if got else 1)
PY
)
  for x in rec txt json record.log; do
    [ -e "$D/$name.$k.$x" ] && mv "$D/$name.$k.$x" "$D/$name.$x"
  done
  [ -e "$D/$name.$k.json.err" ] && mv "$D/$name.$k.json.err" "$D/$name.json.err"
  return 0
}

pack() {
  tar czf "$OUT/diag2.tgz" -C "$(dirname "$D")" --exclude='*.rec' --exclude='*.kineto.json' "$(basename "$D")"
  (cd "$(dirname "$D")" && ls "$(basename "$D")"/*.rec "$(basename "$D")"/*.kineto.json 2>/dev/null) \
    | tar czf "$OUT/diag2-traces.tgz" -C "$(dirname "$D")" -T -
}

for w in $W; do
  name=${w%%:*}; rest=${w#*:}; steps=${rest%%:*}
  fix=""; [ "$rest" != "$steps" ] && fix=${rest#*:}
  [ -e "$name.py" ] || { echo "no $name.py here: skipped"; continue; }
  [ $((SECONDS - START)) -lt "$BUDGET" ] || { echo "$name skipped: past BUDGET=$BUDGET s"; continue; }
  echo "== $name ($steps steps, fix: --fix $fix) at $((SECONDS - START)) s"
  echo "$name $steps --fix $fix" >> "$D/workloads.txt"
  # ARGS_<name>: arguments every run of that workload gets (graph_sched's --sched-n).
  extra_var="ARGS_$name"; extra=${!extra_var:-}
  # REC_REPS recorded runs, each after a pair of bare ones (the last ones after the pairs):
  # the one whose top estimate is the median of theirs is reported as NAME.rec, so that one
  # slow recorded run on a noisy machine does not decide the estimate alone.
  nrec=${REC_REPS:-1}
  for rep in $(seq "$REPS"); do
    bare "$name" before "$rep" "$steps" $extra
    bare "$name" after "$rep" "$steps" $extra --fix $fix
    [ "$rep" -le "$nrec" ] && [ "$rep" -lt "$REPS" ] && record_one "$name" "$rep" "$steps" $extra
  done
  for k in $(seq "$nrec"); do
    [ -e "$D/$name.$k.rec" ] || record_one "$name" "$k" "$steps" $extra
  done
  pick_median "$name" "$nrec"
  if [ "$name" = "$KINETO" ]; then
    timeout -k 10 "$T" python3 "$name.py" "$steps" $extra --kineto "$D/$name.kineto.json" > "$D/$name.kineto.log" 2>&1
    grep -E "WORKLOAD|KINETO|FALLBACK|rror" "$D/$name.kineto.log" | cut -c1-200
    "$G" report "$D/$name.kineto.json" > "$D/$name.kineto.txt" 2>&1
    "$G" report --format json "$D/$name.kineto.json" > "$D/$name.kineto-report.json" 2> "$D/$name.kineto-report.err"
  fi
  for e in "$D"/*.err; do [ -s "$e" ] || rm -f "$e"; done
  pack
done

python3 - "$D" "$KINETO" > "$D/table.txt" <<'PY'
import json, os, statistics, sys
d, kineto = sys.argv[1], sys.argv[2]
times = {}
for line in open(os.path.join(d, "times.tsv")).read().splitlines()[1:]:
    name, mode, rep, med, mean = line.split("\t")
    times.setdefault((name, mode), []).append(med)

def nums(v):
    return [float(x) for x in v if x != "-"]

def med(v):
    v = nums(v)
    return statistics.median(v) if v else None

def ms(ns):
    return None if ns is None else ns / 1e6

def f(x, w=8):
    return f"{x:{w}.2f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {str(e)[:120]}"}

def top(j):
    a = (j.get("advice") or [None])[0]
    return a or {}

def cpu_line(a):
    c = a.get("cpu") or {}
    fr = c.get("frames") or []
    if not fr:
        return "(no CPU samples)"
    chain = " ‹ ".join(x.get("frame", "?") for x in fr[:4])
    return f"{fr[0].get('share', 0) * 100:.0f}% {chain}  ({c.get('samples', '?')} samples, {c.get('on_cpu', 0) * 100:.0f}% on CPU)"

def text_cpu_line(path):
    try:
        for line in open(path):
            if "CPU during its gaps" in line:
                return line.strip()
    except OSError:
        pass
    return "(none in the text report)"

def steps(j):
    s = j.get("steps") or {}
    if not s:
        return "steps: none"
    return (f"steps: {s.get('count')} ({s.get('source')}{' ' + s['name'] if s.get('name') else ''}), "
            f"steady {s.get('steady')}, median {f(ms(s.get('median_ns')), 0)} ms, idle {f(ms(s.get('idle_median_ns')), 0)} ms")

names = [l.split()[0] for l in open(os.path.join(d, "workloads.txt"))]
print(f"{'workload':16s} {'before':>8s} {'after':>8s} {'saved':>8s} {'estimate':>8s} {'est/saved':>9s}  top site [verdict]   (ms a step; bare medians of {max((len(v) for v in times.values()), default=0)} runs)")
for n in names:
    b, a_ = med(times.get((n, "before"), [])), med(times.get((n, "after"), []))
    saved = b - a_ if b is not None and a_ is not None else None
    j = load(os.path.join(d, f"{n}.json"))
    t = top(j)
    est = ms(t.get("saving_ns"))
    ratio = est / saved if est is not None and saved else None
    verdict = t.get("cause") or t.get("verdict") or "-"
    # The replayed saving (saving_ns) beside the summed gaps it replaced (gap_sum_ns).
    summed = ms(t.get("gap_sum_ns"))
    print(f"{n:16s} {f(b)} {f(a_)} {f(saved)} {f(est)} {f(ratio, 9)}  {t.get('site', j.get('error', '(no advice)'))} [{verdict}] summed {f(summed, 0)}")
    over = ms(t.get("saving_overlapped_ns"))
    if over is not None:
        print(f"{'':16s} overlapped estimate {f(over, 0)} ms, est/saved {f(over / saved if saved else None, 0)}")
    under = "-"
    try:
        for line in open(os.path.join(d, f"{n}.record.log")):
            if line.startswith("STEP_MS median="):
                under = line.split()[1].split("=")[1]
    except OSError:
        pass
    print(f"{'':16s} runs before {times.get((n, 'before'))} after {times.get((n, 'after'))}; under gaptop {under}")
    try:
        ests = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, f"{n}.estimates")) if l.strip()]
    except OSError:
        ests = []
    if len(ests) > 1:
        print(f"{'':16s} top estimates of {len(ests)} recorded runs (ms): "
              + ", ".join(f"{f(ms(int(e[1])), 0)} ({e[2][:30]})" for e in ests) + "; the median one reported")
    # As shares of the step (the estimate of the recorded step, the saving of the bare one):
    # what a slower recorded run (gaptop's own cost, the machine's noise) leaves comparable.
    rec_step = ms((j.get("steps") or {}).get("median_ns"))
    if est is not None and rec_step and saved is not None and b:
        es, ss = est / rec_step, saved / b
        print(f"{'':16s} as shares of the step: estimate {es * 100:.0f}% of {rec_step:.2f} ms recorded, "
              f"saved {ss * 100:.0f}% of {b:.2f} ms bare, ratio {f(es / ss if ss else None, 0)}")
    if t:
        rec = ""
        if t.get("recurring") is not None:
            rec = f"recurring {t.get('recurring')} in {t.get('steps_present')} steps, {f(ms(t.get('per_step_ns')), 0)} ms a step; "
        print(f"{'':16s} {rec}{steps(j)}")
        why = str(t.get("text", "-")).split(" Fix: ")[0]
        print(f"{'':16s} why: {why[:240]}")
        print(f"{'':16s} fix: {str(t.get('fix', '-'))[:240]}")
        print(f"{'':16s} cpu (json): {cpu_line(t)[:240]}")
        print(f"{'':16s} cpu (text): {text_cpu_line(os.path.join(d, n + '.txt'))[:240]}")
    advice = j.get("advice") or []
    best = max(advice, key=lambda x: x.get("saving_ns") or 0, default=None)
    if best is not None and best is not advice[0]:
        print(f"{'':16s} largest estimate: {best.get('site')} [{best.get('verdict')}] {f(ms(best.get('saving_ns')), 0)} ms")
    falls = set()
    for log in (f"{n}.bare.log", f"{n}.record.log"):
        try:
            falls.update(l.strip() for l in open(os.path.join(d, log)) if l.startswith("FALLBACK"))
        except OSError:
            pass
    for fb in sorted(falls):
        print(f"{'':16s} {fb[:240]}")
    others = [x.get("site", "?") + f" {f(ms(x.get('saving_ns')), 0)}" for x in (j.get("advice") or [])[1:4]]
    if others:
        print(f"{'':16s} next: " + "; ".join(others)[:240])
    print()
if kineto != "none" and os.path.exists(os.path.join(d, f"{kineto}.kineto-report.json")):
    r, k = load(os.path.join(d, f"{kineto}.json")), load(os.path.join(d, f"{kineto}.kineto-report.json"))
    print(f"{kineto}: the same program from gaptop's recording and from its Kineto trace")
    for src, j in (("recording", r), ("kineto", k)):
        t = top(j)
        print(f"  {src:9s} top {t.get('site', j.get('error', '-'))} [{t.get('cause') or t.get('verdict', '-')}], "
              f"estimate {f(ms(t.get('saving_ns')), 0)} ms; {steps(j)}")
        print(f"  {'':9s} fix: {str(t.get('fix', '-'))[:200]}")
PY
cat "$D/table.txt" | tee "$OUT/diag2.txt"
echo "total $((SECONDS - START)) s" | tee -a "$OUT/diag2.txt"
pack
ls -la "$OUT"
