#!/usr/bin/env bash
# Reports of the old and the new gaptop, byte for byte: every recording in assets/, the traces
# under tests/data (Kineto, Nsight Systems, a rank set), a generated trace, as text, JSON and
# folded stacks, and a diff of two recordings. Any difference is printed and fails the run.
#
#   bench/same_reports.sh [OLD_REV]     (default 7b89eba, before issue 18's import work)
#
# The old binary is built once from OLD_REV in a temporary worktree and kept in
# ${GAPTOP_CACHE:-$HOME/.cache/gaptop}/gaptop-OLD_REV (GAPTOP_OLD names another binary); the
# new one is this checkout's `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-7b89eba}
cache=${GAPTOP_CACHE:-$HOME/.cache/gaptop}
old=${GAPTOP_OLD:-$cache/gaptop-$rev}
mkdir -p "$cache"
if [ ! -x "$old" ]; then
    tree=$(mktemp -d)
    git worktree add --detach "$tree" "$rev" >/dev/null
    (cd "$tree" && CARGO_TARGET_DIR="$cache/target-old" cargo build --release --bin gaptop)
    cp "$cache/target-old/release/gaptop" "$old"
    git worktree remove --force "$tree"
fi
cargo build --release --bin gaptop --example parse_bench
new=target/release/gaptop
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target/release/examples/parse_bench --generate 20000 "$work/generated.json"
inputs=(assets/*.rec tests/data/kineto/*.json.gz tests/data/kineto/hta-two-ranks
    tests/data/nsys/*.sqlite.gz "$work/generated.json")
same=0 differ=0 varies=""
check() { # name, then the arguments of both runs
    local name=$1
    shift
    "$old" "$@" >"$work/old" 2>&1 || echo "exit $?" >>"$work/old"
    "$new" "$@" >"$work/new" 2>&1 || echo "exit $?" >>"$work/new"
    if cmp -s "$work/old" "$work/new"; then
        same=$((same + 1))
        return
    fi
    # Some outputs of the old binary vary from run to run (ties broken by ids that depend on
    # a hash map's order): the new one must match one of its runs.
    for _ in 1 2 3 4 5 6 7 8; do
        "$old" "$@" >"$work/again" 2>&1 || echo "exit $?" >>"$work/again"
        if cmp -s "$work/again" "$work/new"; then
            same=$((same + 1))
            varies="$varies
  $name"
            return
        fi
    done
    {
        differ=$((differ + 1))
        echo "DIFFERS: $name"
        diff "$work/old" "$work/new" | head -20 || true
    }
}
for f in "${inputs[@]}"; do
    for format in text json folded; do
        check "report --format $format $f" report --format "$format" "$f"
    done
done
check "diff llama_decode" diff assets/llama_decode.rec assets/llama_decode_nocudnn.rec
check "diff --format json gpt2" diff --format json assets/gpt2.rec assets/gpt2_native.rec
[ -z "$varies" ] || echo "same as one of several runs of the old binary (its output varies):$varies"
echo "$same same, $differ different (old: $old, new: $new)"
[ "$differ" = 0 ]
