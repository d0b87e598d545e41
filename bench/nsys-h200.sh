#!/usr/bin/env bash
# Nsight Systems on the H200 (docs/perf.md, "Nsight Systems captures"). A trimmed nsys target
# (nsys-t.tar.xz: Debian's nsight-systems-target 2023.4.4 package cut to the CLI, its injection
# libraries and its CUPTI 12.4) profiles ctypes_launch.py in its CUDA runtime mode, through the
# libcudart 12.4 of the nvidia-cuda-runtime-cu12 wheel: nsys 2023.4 traces CUDA 12.4 calls on
# this CUDA 13 driver, not torch's CUDA 13 runtime. Two captures come back as .qdstrm (xz):
#   pe: Python backtraces taken at CUDA calls (they need --cudabacktrace in 2023.4),
#   ps: periodic Python samples.
# gaptop then records the same workload for comparison.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/nsysw; rm -rf $W; mkdir -p $W
tar xJf nsys-t.tar.xz -C $W || exit 1
python3 -m zipfile -e nvidia_cuda_runtime_cu12-*.whl $W/rt || exit 1
RT=$(ls $W/rt/nvidia/cuda_runtime/lib/libcudart.so.12*)
N=$W/nsys-t/target-linux-x64/nsys
$N --version
STEPS=${STEPS:-20}
WL="ctypes_launch.py $STEPS cudart $RT"
run() { # name, nsys options...
  local name=$1; shift
  timeout 240 $N profile "$@" -f true -o $W/$name python3 $WL > "$OUT/$name.log" 2>&1
  echo "$name: rc=$?"; tail -4 "$OUT/$name.log"
  [ -s $W/$name.qdstrm ] || return
  xz -T8 -6 -c $W/$name.qdstrm > "$OUT/$name.qdstrm.xz"; ls -la "$OUT/$name.qdstrm.xz"
}
# Sampling every CPU of the machine made a 1.8 GB capture: the process tree only, at nsys's
# lowest rate, without context switches.
S="--sample=process-tree --sampling-period=16000000 --cpuctxsw=none"
run pe --trace=cuda,nvtx --python-backtrace=cuda --cudabacktrace=all $S
run ps --trace=cuda,nvtx --python-sampling=true --python-sampling-frequency=1000 $S
./gaptop record -o "$OUT/rt.rec" -- python3 $WL > "$OUT/record.log" 2>&1
echo "record: rc=$?"; tail -3 "$OUT/record.log"
./gaptop report "$OUT/rt.rec" | head -30
ls -la "$OUT"
