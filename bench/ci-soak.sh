#!/usr/bin/env bash
# Runs .ci/run on N fresh clones of one commit in a row while a CPU-heavy job runs beside it
# (issue 38: a CI that never flakes). The job beside: one process hashing /dev/zero without
# pause, a full core of this machine's two, for the whole run. Each clone gets its own target
# folder (removed after its run) and ../shared beside it, as CI has. Stops at the first failure.
#   bench/ci-soak.sh [N=5] [LOG_DIR=/tmp/ci-soak] [COMMIT=HEAD]
# (GAPTOP_REPO=PATH names the checkout when the script runs from a copy elsewhere.)
set -uo pipefail
n="${1:-5}"
logs="${2:-/tmp/ci-soak}"
repo="${GAPTOP_REPO:-$(cd "$(dirname "$0")/.." && pwd)}"
commit="$(git -C "$repo" rev-parse --short "${3:-HEAD}")"
shared="$(cd "$repo/../shared" && pwd)"
mkdir -p "$logs"
sh -c 'while :; do head -c 1G /dev/zero | sha256sum >/dev/null; done' &
burn=$!
roots=()
cleanup() {
  pkill -P "$burn" 2>/dev/null
  kill "$burn" 2>/dev/null
  for r in "${roots[@]}"; do pkill -f "$r/" 2>/dev/null; rm -rf "$r"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for i in $(seq 1 "$n"); do
  root="$(mktemp -d "$(dirname "$repo")/ci-soak.XXXX")"
  roots+=("$root")
  git clone -q "$repo" "$root/gaptop" && git -C "$root/gaptop" checkout -q "$commit"
  ln -s "$shared" "$root/shared"
  t0=$(date +%s)
  (cd "$root/gaptop" && .ci/run) >"$logs/run$i.log" 2>&1
  rc=$?
  t1=$(date +%s)
  echo "run $i of $n at $commit: rc=$rc in $((t1 - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg), ended $(date -u +%H:%M)" | tee -a "$logs/summary"
  rm -rf "$root"
  [ "$rc" = 0 ] || exit "$rc"
done
