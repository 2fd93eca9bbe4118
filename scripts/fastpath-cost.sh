#!/usr/bin/env bash
# Instruction cost of the mlx5 data path (or, with the argument `efa`, the EFA driver's),
# counted by callgrind (hot-path costs are counted in instructions; this machine's clocks are
# noisy). Builds drivers/mlx5/examples/fastpath_cost.rs (drivers/efa/examples/efa_fastpath_cost.rs)
# in release, runs it under callgrind twice, collecting only inside its `post_batch` (16 RDMA
# writes, one doorbell; EFA: 16 SRD sends through the LLQ) and then only inside its
# `poll_batch` (16 CQEs), and divides each total by the WQEs / CQEs it handled:
#
#   instructions per WQE (16/doorbell): N
#   instructions per CQE: N
#
# Installs valgrind when it is missing (as root; otherwise says so and fails).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        echo "valgrind is missing (run as root or install it)" >&2
        exit 1
    fi
fi

case "${1:-mlx5}" in
mlx5) cargo build --release --quiet -p mlx5 --features fake --example fastpath_cost
    example=fastpath_cost ;;
efa) cargo build --release --quiet -p efa --example efa_fastpath_cost
    example=efa_fastpath_cost ;;
*) echo "usage: $0 [mlx5|efa]" >&2
    exit 2 ;;
esac
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
exe="$target_dir/release/examples/$example"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Instructions executed inside function $1 (and what it calls), and the program's output.
count() {
    valgrind --tool=callgrind --callgrind-out-file="$out/$1.cg" --toggle-collect="*$1*" \
        "$exe" >"$out/$1.txt" 2>"$out/$1.log" || {
        cat "$out/$1.log" >&2
        exit 1
    }
    # `totals:` (or the older `summary:`) is the whole run's count, all of it inside $1.
    awk '/^(totals|summary):/ { n = $2 } END { print n }' "$out/$1.cg"
}

post=$(count post_batch)
poll=$(count poll_batch)
# The example prints "rounds: R, per batch: B".
rounds=$(sed -n 's/.*rounds: \([0-9]*\).*/\1/p' "$out/post_batch.txt")
batch=$(sed -n 's/.*per batch: \([0-9]*\).*/\1/p' "$out/post_batch.txt")
if [ -z "$post" ] || [ -z "$poll" ] || [ -z "$rounds" ] || [ -z "$batch" ]; then
    echo "could not read the counts (callgrind output or the example's output changed)" >&2
    exit 1
fi
awk -v p="$post" -v q="$poll" -v r="$rounds" -v b="$batch" 'BEGIN {
    printf "instructions per WQE (%d/doorbell): %.1f\n", b, p / (r * b)
    printf "instructions per CQE: %.1f\n", q / (r * b)
}'
