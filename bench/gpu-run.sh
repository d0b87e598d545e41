#!/usr/bin/env bash
# Runs on the GPU machine from the carried folder gpu/ (docs/perf.md says how it is built).
# usage: gpu-run.sh check|diagnose|nvtx|bench|variants|floor|probe|graphs|sanitizer|ui|attach|serve2|merged|all
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
G=$PWD/gaptop
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODE=${1:-all}
nvidia-smi -L
python3 -c 'import sys; print(sys.version)'
# Which CPUs share a core, as the VM shows it (on 2026-12-01: 16 cores of one thread; per-
# process noise was bimodal however the runs were pinned, docs/perf.md).
lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | tr -s ' ' | paste -sd ';' | cut -c1-400
if [ "$MODE" = check ] || [ "$MODE" = all ]; then
  nvidia-smi topo -m | head -4; nproc
  # Hardware kernel timestamps (HES) are for Blackwell and later; say what this GPU answers.
  GAPTOP_HWTRACE=1 GAPTOP_VERBOSE=1 $G record -o "$OUT/hw.rec" -- python3 launchbound.py 50 2>&1 | grep -iE "hwtrace|HES|recorded|API callbacks"
  $G report "$OUT/hw.rec" | grep -E "^(GPU ops|launch calls)"; rm -f "$OUT/hw.rec"
  python3 pystack.py ./libgaptop_collector.so 2>&1 | tail -3
  # What a CUPTI timestamp costs and which host clock it follows; the callbacks' own time.
  GAPTOP_VERBOSE=1 $G record -o "$OUT/lb.rec" -- python3 launchbound.py 3000 2>&1 | grep -E "probe|inside gaptop"; rm -f "$OUT/lb.rec"
  GAPTOP_VERBOSE=1 $G record -o "$OUT/planted.rec" -- python3 planted.py 100 2>&1 | tail -4
  $G report "$OUT/planted.rec" | head -70
  python3 compare_kineto.py --gaptop $G --kineto kineto.py --out "$OUT" launchbound.py 300 --expect rope 2>&1 | tee "$OUT/compare_lb.txt"
  python3 compare_kineto.py --gaptop $G --kineto kineto.py --out "$OUT" gpt2.py 10 --expect forward 2>&1 | tee "$OUT/compare_gpt2.txt"
  rm -f "$OUT"/*.kineto.json
fi
if [ "$MODE" = diagnose ] || [ "$MODE" = all ]; then
  # The diagnosis on real models and on the planted decode loop: recordings with CPU samples,
  # their text and JSON reports under $OUT/diag/ (DIAG_TOKENS tokens each).
  cat /proc/sys/kernel/perf_event_paranoid
  mkdir -p "$OUT/diag"
  N=${DIAG_TOKENS:-40}
  for w in "llama_decode.py $N" "llama_decode.py $N --no-cudnn-sdp" "decode_planted.py $N" "gpt2.py 20"; do
    name=$(echo "$w" | sed 's/\.py//; s/ --no-cudnn-sdp/_nocudnn/; s/ [0-9]*//')
    timeout 300 $G record -o "$OUT/diag/$name.rec" -- python3 $w 2>&1 | grep -E "WORKLOAD|recorded|CPU samples|Error|error" | cut -c1-300
    $G report "$OUT/diag/$name.rec" > "$OUT/diag/$name.txt" 2>&1
    $G report --format json "$OUT/diag/$name.rec" > "$OUT/diag/$name.json" 2>&1
    echo "== $name"; sed -n '/^Steps/,/^Top stacks/p' "$OUT/diag/$name.txt" | grep -v "^Top stacks" | cut -c1-230 | head -${DIAG_LINES:-24}
  done
fi
if [ "$MODE" = nvtx ]; then
  # NVTX ranges (docs/perf.md, "NVTX on the H200"): torch.cuda.nvtx ranges a step and a layer, recorded; the report
  # must hold them as the outermost frames of the launches and as the steps (PASS/FAIL lines).
  N=${NVTX_ITERS:-100}
  GAPTOP_VERBOSE=1 $G record -o "$OUT/nvtx.rec" -- python3 nvtx_steps.py $N 2>&1 | grep -E "WORKLOAD|recorded|NVTX|MARKER|collecting|rror" | cut -c1-300
  $G report "$OUT/nvtx.rec" > "$OUT/nvtx.txt" 2>&1
  $G report --format json "$OUT/nvtx.rec" > "$OUT/nvtx.json" 2>&1
  $G report --format json --step "step #" "$OUT/nvtx.rec" > "$OUT/nvtx_by_name.json" 2>&1
  sed -n '/^Steps/p;/^Top stacks/,/^$/p' "$OUT/nvtx.txt" | cut -c1-200 | head -30
  python3 - "$OUT/nvtx.json" "$OUT/nvtx_by_name.json" $((N + 10)) <<'PY'
import json, sys
j, by, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
st = j.get("steps") or {}
print("steps:", st)
ok = st.get("source") == "range" and st.get("name") == "step #" and abs(st.get("count", 0) - n) <= 1
print(("PASS " if ok else "FAIL ") + f"steps are the {n} 'step N' ranges")
ok = (by.get("steps") or {}).get("count") == st.get("count")
print(("PASS " if ok else "FAIL ") + "--step 'step #' finds the same steps")
heads = [s["frames"][:3] for s in j["top_stacks"]]
inside = [h for h in heads if h and h[0].startswith("step ") and len(h) > 1 and h[1].startswith("layer ")]
for h in heads[:5]: print("   ", " > ".join(h))
print(("PASS " if len(inside) >= len(heads) // 2 else "FAIL ") + f"{len(inside)} of {len(heads)} top stacks start with step N > layer I")
print(("PASS " if j["kernels_with_stack"] == j["kernels"] > 0 else "FAIL ") + f"kernels {j['kernels']} with stack {j['kernels_with_stack']}")
PY
  # What NVTX capture costs: gaptop with and without it (GAPTOP_NVTX=0), on a program without
  # NVTX calls and on this one; bare beside them.
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-7} --budget ${BUDGET:-520} ${PIN:+--pin $PIN} --no-profiler \
    --variant nonvtx:GAPTOP_NVTX=0 launchbound.py:${LB_ITERS:-1000} nvtx_steps.py:${NVTX_BENCH_ITERS:-1000} > "$OUT/nvtx_overhead.txt" 2>&1
  tail -20 "$OUT/nvtx_overhead.txt"
fi
if [ "$MODE" = probe ]; then
  # Native frames, callback self-timing and the lag report on one launch-bound run each.
  python3 pystack.py ./libgaptop_collector.so 2>&1 | tail -2
  GAPTOP_VERBOSE=1 $G record --native -o "$OUT/lb_native.rec" -- python3 launchbound.py 300 2>&1 | tail -5
  $G report "$OUT/lb_native.rec" | sed -n '1,12p;/Top stacks/,/^$/p' | cut -c1-220 | head -60
  GAPTOP_VERBOSE=1 $G record --native -o "$OUT/gpt2_native.rec" -- python3 gpt2.py 10 2>&1 | tail -4
  $G report "$OUT/gpt2_native.rec" | sed -n '/Top stacks/,/^$/p' | cut -c1-220 | head -40
  # Which correlation id do kernels carry when only driver callbacks run?
  GAPTOP_RUNTIME_CB=0 $G record -o "$OUT/lb_driveronly.rec" -- python3 launchbound.py 300 2>&1 | tail -2
  $G report "$OUT/lb_driveronly.rec" | grep -E "^(GPU ops|launch calls)"
  GAPTOP_VERBOSE=1 $G record -o "$OUT/lb_plain.rec" -- python3 launchbound.py 3000 2>&1 | tail -4
  $G report "$OUT/lb_plain.rec" | grep -E "^(GPU ops|launch calls)"
  # Raw CUPTI buffers for the replay test.
  GAPTOP_DUMP="$OUT/planted.cuptibuf" GAPTOP_DUMP_BYTES=${DUMP_BYTES:-700000} $G record -o "$OUT/planted_dump.rec" -- python3 planted.py 3 2>&1 | tail -2
  ls -la "$OUT"/*.cuptibuf
fi
if [ "$MODE" = ui ]; then
  # The live UI in tmux (120x40) on GPT-2: screens while it loads, after it ended, after b
  # (biggest gap), Enter (zoom to it), e (export) and q, as $OUT/ui-*.txt.
  command -v tmux >/dev/null || { echo "no tmux on this machine"; exit 1; }
  mkdir -p /tmp/ui && cd /tmp/ui
  tmux new-session -d -s g -x 120 -y 40 "$G run -- python3 $OLDPWD/gpt2.py ${GPT2_ITERS:-40}; sleep 60"
  for i in 1 2; do sleep 15; tmux capture-pane -p -t g > "$OUT/ui-live$i.txt"; done
  for k in b Enter e q; do tmux send-keys -t g $k; sleep 3; tmux capture-pane -p -t g > "$OUT/ui-$k.txt"; done
  ls -la /tmp/ui >> "$OUT/ui-q.txt"; tmux kill-server 2>/dev/null
  tail -3 "$OUT/ui-e.txt"
  cd "$OLDPWD"
fi
if [ "$MODE" = graphs ]; then
  # CUDA graph replays and torch.compile'd (driver-API) launches, with stacks.
  for w in graphs compiled; do
    timeout 240 $G record -o "$OUT/$w.rec" -- python3 $w.py 200 2>&1 | grep -E "WORKLOAD|UNAVAILABLE|recorded|collector"
    $G report "$OUT/$w.rec" --format json > "$OUT/$w.json" && python3 - "$OUT/$w.json" $w <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); w = sys.argv[2]
frames = [" > ".join(s["frames"]) for s in j["top_stacks"][:4]]
print(f"{w}: kernels {j['kernels']} with launch {j['kernels_with_launch']} with stack {j['kernels_with_stack']}; reasons " +
      ", ".join(f"{k} {v['count']}" for k, v in j["reasons"].items() if v["count"]))
for f in frames: print("   ", f[-400:])
ok = j["kernels"] > 0 and j["kernels_with_launch"] == j["kernels"] and j["kernels_with_stack"] == j["kernels"]
if w == "graphs": ok = ok and j["reasons"]["graph"]["count"] > 0 and any("replay" in f for f in frames)
if w == "compiled": ok = ok and any("compiled_step" in f for f in frames)
print(("PASS " if ok else "FAIL ") + w)
PY
  done
fi
if [ "$MODE" = sanitizer ]; then
  # compute-sanitizer around a workload that runs under gaptop.
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  echo "compute-sanitizer: $CS"
  python3 checksum.py 300 | grep CHECKSUM
  echo "-- gaptop record -- compute-sanitizer python3"
  timeout ${CS_TIMEOUT:-200} $G record -o "$OUT/sanitized.rec" -- "$CS" --tool memcheck --target-processes all python3 checksum.py 300 2>&1 | grep -vE "^=========  +(Host|Saved)" | tail -12
  $G report "$OUT/sanitized.rec" 2>&1 | grep -E "^(GPU ops|launch calls)|error"
  echo "-- compute-sanitizer gaptop record -- python3"
  timeout ${CS_TIMEOUT:-200} "$CS" --tool memcheck --target-processes all $G record -o "$OUT/sanitized2.rec" -- python3 checksum.py 300 2>&1 | grep -vE "^=========  +(Host|Saved)" | tail -12
  $G report "$OUT/sanitized2.rec" 2>&1 | grep -E "^(GPU ops|launch calls)|error"
fi
if [ "$MODE" = variants ]; then
  # Collector switches side by side with bare and torch.profiler; VARIANTS replaces the list.
  # By default: what CUPTI's synchronization records cost (the fourth session of 2026-12-01
  # found them to be most of gaptop's overhead), next to kernel records alone.
  V=${VARIANTS:-"sync:GAPTOP_SYNC_ACTIVITY=1 kernelonly:GAPTOP_API=0,GAPTOP_MEM_ACTIVITY=0"}
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-3} --budget ${BUDGET:-520} ${PIN:+--pin $PIN} ${NOPROF:+--no-profiler} \
    $(for v in $V; do echo --variant $v; done) launchbound.py:${LB_ITERS:-1000} > "$OUT/variants.txt" 2>&1
  tail -25 "$OUT/variants.txt"
fi
if [ "$MODE" = floor ]; then
  # Does CUPTI's own buffering move the floor that kernel records alone set (1.28x bare on
  # launchbound.py in the fifth session)? Timestamps in pinned host memory instead of device
  # memory, and larger, pre-allocated device buffers, with kernel records alone and with gaptop.
  A="host_pinned=1;device_buffer=64m;device_buffer_prealloc=4"
  GAPTOP_VERBOSE=1 GAPTOP_CUPTI_ATTRS="$A" $G record -o "$OUT/attrs.rec" -- python3 launchbound.py 50 2>&1 | grep -E "attribute|refused|cannot read|recorded"
  $G report "$OUT/attrs.rec" | grep -E "^(GPU ops|launch calls)"; rm -f "$OUT/attrs.rec"
  K=GAPTOP_API=0,GAPTOP_MEM_ACTIVITY=0
  V=${VARIANTS:-"kernelonly:$K kpinned:$K,GAPTOP_CUPTI_ATTRS=host_pinned=1 kbigbuf:$K,GAPTOP_CUPTI_ATTRS=device_buffer=64m;device_buffer_prealloc=4 pinned:GAPTOP_CUPTI_ATTRS=host_pinned=1"}
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-12} --budget ${BUDGET:-500} ${PIN:+--pin $PIN} $([ -n "${PROF:-}" ] || echo --no-profiler) \
    $(for v in $V; do echo --variant $v; done) launchbound.py:${LB_ITERS:-3000} > "$OUT/floor.txt" 2>&1
  tail -30 "$OUT/floor.txt"
fi
if [ "$MODE" = attach ]; then
  # Issue 19 on the GPU, in about 8 minutes: (1) overhead of the dormant collector, after an
  # attach and detach (finalize and keep), and of serve's default windows, next to bare and
  # gaptop record; (2) attach to a GPT-2 loop from tmux, q, attach again, and a capture; (3)
  # serve scraped every 5 s for a minute. Everything under $OUT/attach/.
  A="$OUT/attach"; mkdir -p "$A"
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-8} --budget ${BUDGET:-270} ${PIN:+--pin $PIN} \
    --no-profiler --attach-modes launchbound.py:${LB_ITERS:-3000} gpt2.py:${GPT2_ITERS:-100} > "$A/overhead.txt" 2>&1
  grep -E "target|per-repetition|variant .* us/iter  " "$A/overhead.txt" | grep -v min
  # (2) The GPT-2 loop, dormant, started elsewhere (as a service would be).
  export GAPTOP_CONTROL_DIR=/tmp/gaptop-ctl-$$
  nohup $G run --dormant --job gpt2loop -- python3 gpt2.py ${LOOP_ITERS:-20000} > "$A/loop.log" 2>&1 &
  LOOP=$!
  for i in $(seq 60); do $G attach >/dev/null 2>&1 && break; sleep 1; done
  $G attach > "$A/list-before.txt" 2>&1; cat "$A/list-before.txt"
  if command -v tmux >/dev/null; then
    for round in 1 2; do
      tmux new-session -d -s att -x 160 -y 45 "GAPTOP_CONTROL_DIR=$GAPTOP_CONTROL_DIR $G attach gpt2loop; echo GAPTOP_EXIT=\$?; sleep 30"
      sleep 10; tmux capture-pane -p -t att > "$A/ui-attach$round.txt"
      tmux send-keys -t att b; sleep 2; tmux capture-pane -p -t att > "$A/ui-attach$round-b.txt"
      tmux send-keys -t att q; sleep 3; tmux capture-pane -p -t att > "$A/ui-attach$round-q.txt"
      tmux kill-session -t att 2>/dev/null
      tail -4 "$A/ui-attach$round-q.txt"
      $G attach > "$A/list-after$round.txt" 2>&1; grep -E "gpt2loop" "$A/list-after$round.txt"
    done
  else
    echo "no tmux here: the attach UI rounds are skipped"
  fi
  $G capture gpt2loop --duration 3s -o "$A/gpt2-capture.rec" 2>&1 | tee "$A/capture.txt"
  $G report "$A/gpt2-capture.rec" > "$A/gpt2-capture.txt" 2>&1; head -4 "$A/gpt2-capture.txt"
  kill $LOOP 2>/dev/null; wait $LOOP 2>/dev/null
  # (3) serve with its default windows (1 s every 10 s), scraped every 5 s for a minute.
  mkdir -p "$A/serve"
  $G serve --listen 127.0.0.1:${SERVE_PORT:-9464} -- python3 gpt2.py ${LOOP_ITERS:-20000} > "$A/serve/serve.log" 2>&1 &
  SRV=$!
  get() { if command -v curl >/dev/null; then curl -s "$1"; else python3 -c "import sys,urllib.request;sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" "$1"; fi; }
  sleep 5
  for i in $(seq -w 1 13); do get http://127.0.0.1:${SERVE_PORT:-9464}/metrics > "$A/serve/scrape-$i.txt"; sleep 5; done
  get http://127.0.0.1:${SERVE_PORT:-9464}/sites > "$A/serve/sites.txt"
  kill $SRV 2>/dev/null; wait $SRV 2>/dev/null
  grep -hE "^gaptop_(windows|observed|gpu_launches|gpu_busy)|category=\"host_wait\"" "$A/serve/scrape-13.txt"
  head -3 "$A/serve/sites.txt" | cut -c1-250
  rm -rf "$GAPTOP_CONTROL_DIR"
fi
if [ "$MODE" = merged ]; then
  # After the store was repacked (tenth session): the live path against torch.profiler on
  # launchbound and GPT-2 (kernel counts, time, stacks), the planted workload's diagnosis, and a
  # capture from a dormant GPT-2 loop, each report's counts printed.
  python3 compare_kineto.py --gaptop $G --kineto kineto.py --out "$OUT" launchbound.py 300 --expect rope 2>&1 | tail -6
  python3 compare_kineto.py --gaptop $G --kineto kineto.py --out "$OUT" gpt2.py 10 --expect forward 2>&1 | tail -6
  rm -f "$OUT"/*.kineto.json
  $G record -o "$OUT/planted.rec" -- python3 planted.py 100 2>&1 | tail -2
  $G report "$OUT/planted.rec" | sed -n '/^Steps/,/^Top stacks/p' | head -16
  export GAPTOP_CONTROL_DIR=/tmp/gaptop-ctl-$$
  nohup $G run --dormant --job gpt2loop -- python3 gpt2.py 20000 > "$OUT/loop.log" 2>&1 &
  LOOP=$!
  for i in $(seq 60); do $G attach >/dev/null 2>&1 && break; sleep 1; done
  $G capture gpt2loop --duration 3s -o "$OUT/gpt2-capture.rec" 2>&1 | tail -2
  $G report --format json "$OUT/gpt2-capture.rec" | python3 -c "import json,sys; j=json.load(sys.stdin); print({k: j[k] for k in ('gpu_ops','kernels','kernels_with_launch','kernels_with_stack','device_idle_ns')})"
  kill $LOOP 2>/dev/null; wait $LOOP 2>/dev/null; rm -rf "$GAPTOP_CONTROL_DIR"
fi
if [ "$MODE" = serve2 ]; then
  # Issue 19's rest on the GPU: serve's UUID label (from the real nvidia-smi) and its pprof
  # endpoint over a GPT-2 loop, then the attach modes' overhead on GPT-2 alone (the earlier
  # run fitted one repetition of it). Everything under $OUT/serve2/.
  A="$OUT/serve2"; mkdir -p "$A"
  nvidia-smi --query-gpu=uuid,name,pci.bus_id --format=csv,noheader | tee "$A/smi.txt"
  fetch() { python3 -c "import sys,urllib.request;open(sys.argv[2],'wb').write(urllib.request.urlopen(sys.argv[1]).read())" "$1" "$2" 2>/dev/null; }
  export GAPTOP_CONTROL_DIR=/tmp/gaptop-ctl-$$
  $G serve --listen 127.0.0.1:9464 --window 1s --every 5s -- python3 gpt2.py ${LOOP_ITERS:-20000} > "$A/serve.log" 2>&1 &
  SRV=$!
  for i in $(seq 60); do fetch http://127.0.0.1:9464/debug/pprof/idle "$A/idle1.pb.gz" && break; sleep 1; done
  sleep 6
  fetch http://127.0.0.1:9464/debug/pprof/idle "$A/idle2.pb.gz"
  fetch http://127.0.0.1:9464/metrics "$A/metrics.txt"
  kill $SRV 2>/dev/null; wait $SRV 2>/dev/null
  grep -E "^gaptop_gpu_(launches|busy)" "$A/metrics.txt"; ls -la "$A"/*.pb.gz
  rm -rf "$GAPTOP_CONTROL_DIR"
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-8} --budget ${BUDGET:-330} ${PIN:+--pin $PIN} \
    --no-profiler --attach-modes gpt2.py:${GPT2_ITERS:-60} > "$A/overhead-gpt2.txt" 2>&1
  grep -E "target|per-repetition|variant .* us/iter  " "$A/overhead-gpt2.txt" | grep -v min
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  # torch.profiler's runs stop once their timed section has printed (overhead.py), so each
  # repetition costs about three plain runs a workload; up to REPS of them fit the budget.
  python3 overhead.py --gaptop $G --kineto kineto.py --reps ${REPS:-10} --budget ${BUDGET:-520} ${PIN:+--pin $PIN} \
    $(for v in ${VARIANTS:-}; do echo --variant $v; done) \
    ${WORKLOADS:-launchbound.py:${LB_ITERS:-3000} gpt2.py:${GPT2_ITERS:-100}} > "$OUT/overhead.txt" 2>&1
  tail -34 "$OUT/overhead.txt"
fi
