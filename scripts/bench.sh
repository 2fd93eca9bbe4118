#!/usr/bin/env bash
# The README's figure table from one run: rperf's embedded figures (64 B SEND / WRITE latency
# and message rate, 64 KiB and 1 MiB WRITE / READ bandwidth), memcpy for the same sizes (the
# ceiling of an emulated DMA engine) and TCP over loopback (std::net) measured next to them,
# the driver's instructions per post and per poll (scripts/fastpath-cost.sh, callgrind) and
# the zero-allocation test's verdict. Targets are shown, not asserted.
#
#   bash scripts/bench.sh            # measure and rewrite README.md's table
#   bash scripts/bench.sh --quick    # a tenth of the iterations (a smoke run)
#   bash scripts/bench.sh --no-readme
#
# Wall-clock figures depend on the machine and on what else runs; instruction counts do not.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=()
readme=(--readme README.md)
for a in "$@"; do
    case "$a" in
    --quick) quick=(--quick) ;;
    --no-readme) readme=() ;;
    *)
        echo "usage: bash scripts/bench.sh [--quick] [--no-readme]" >&2
        exit 2
        ;;
    esac
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "bench: building rperf and rperf-bench (release)" >&2
cargo build --release --quiet -p rperf --bins
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

echo "bench: driver fast-path cost (callgrind)" >&2
fastpath=()
if bash scripts/fastpath-cost.sh >"$out/fastpath.txt" 2>"$out/fastpath.err"; then
    fastpath=(--fastpath "$out/fastpath.txt")
else
    echo "bench: scripts/fastpath-cost.sh failed (shown as n/a):" >&2
    cat "$out/fastpath.err" >&2
fi

echo "bench: zero heap allocations per post / poll" >&2
if cargo test --release --quiet -p mlx5 --test zero_alloc >"$out/zero.txt" 2>&1; then
    zero=passed
else
    cat "$out/zero.txt" >&2
    zero=failed
fi

"$target_dir/release/rperf-bench" "${quick[@]}" "${fastpath[@]}" --zero-alloc "$zero" "${readme[@]}"
