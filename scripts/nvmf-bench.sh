#!/usr/bin/env bash
# The README's NVMe-oF figure table from one run: rperf's embedded 4 KiB RDMA WRITE message
# rate, nvmf-perf's embedded 4 KiB random read and write IOPS at queue depth 32 and 4 KiB
# random read latency at queue depth 1 (three rounds of each, medians; `nvmf-perf --bench`),
# and the target's instructions per 4 KiB I/O (scripts/nvmf-target-cost.sh, callgrind).
#
#   bash scripts/nvmf-bench.sh            # measure and rewrite README.md's NVMe-oF table
#   bash scripts/nvmf-bench.sh --quick    # a tenth of the I/Os (a smoke run)
#   bash scripts/nvmf-bench.sh --no-readme
#
# Release build (a build with debug assertions refuses to write the README). Wall-clock
# figures depend on what else runs on the machine; instruction counts do not.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=()
readme=(--readme README.md)
for a in "$@"; do
    case "$a" in
    --quick) quick=(--quick) ;;
    --no-readme) readme=() ;;
    *)
        echo "usage: bash scripts/nvmf-bench.sh [--quick] [--no-readme]" >&2
        exit 2
        ;;
    esac
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "nvmf-bench: building rperf and nvmf-perf (release)" >&2
cargo build --release --quiet -p rperf --bins
cargo build --release --quiet -p nvmf-rdma --bins
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

echo "nvmf-bench: target instructions per I/O (callgrind)" >&2
cost=()
if bash scripts/nvmf-target-cost.sh >"$out/cost.txt" 2>"$out/cost.err"; then
    cost=(--target-cost "$out/cost.txt")
else
    echo "nvmf-bench: scripts/nvmf-target-cost.sh failed (left out):" >&2
    cat "$out/cost.err" >&2
fi

"$target_dir/release/nvmf-perf" --bench "${quick[@]}" "${cost[@]}" "${readme[@]}"
