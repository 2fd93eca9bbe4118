#!/usr/bin/env bash
# Instructions per 4 KiB NVMe-oF random read (nvmf-perf embedded, queue depth 32) and per
# 4 KiB RDMA WRITE (rperf write_bw embedded), split by who executes them: the emulated NICs
# and fabric (with the allocations and copies they make), the driver (mlx5, verbs, the cm
# data path), NVMe-oF (host, target, protocol), rperf's own loop. Counted by callgrind over
# whole runs of N and 2N I/Os (or messages); the difference over N is the figure, so set-up
# (connections, the zeroed namespace) drops out. Release build. Takes a few minutes.
#
#   bash scripts/nvmf-read-cost.sh        # N = 10000 (NVMF_READ_COST_N)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind is missing (apt-get install valgrind)" >&2
    exit 1
fi
n=${NVMF_READ_COST_N:-10000}
cargo build --release --quiet -p rperf --bins
cargo build --release --quiet -p nvmf-rdma --bins
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Self cost by group for one run: "group<TAB>instructions" lines.
groups() {
    callgrind_annotate --auto=no --threshold=100 "$1" |
        awk '
        /^ *[0-9,]+ \( *[0-9.]+%\) / && !/PROGRAM TOTALS/ {
            c = $1; gsub(",", "", c)
            # the function: after "file:", before " [object]"
            f = $0; sub(/^ *[0-9,]+ \( *[0-9.]+%\) +/, "", f); sub(/ \[[^]]*\]$/, "", f)
            sub(/^[^:]*:/, "", f)
            g = "emulated NICs and fabric, libc and allocations"
            if (f ~ /nvmf/) g = "NVMe-oF (host, target, protocol)"
            else if (f ~ /rperf/) g = "rperf (its loop, posts and polls inlined)"
            else if (f ~ /mlx5::|verbs::|(^|[ <])cm::/) g = "driver (mlx5, verbs, cm data path)"
            sum[g] += c
        }
        END { for (g in sum) printf "%s\t%d\n", g, sum[g] }'
}

# `$1` name, `$2` N, the rest: the command.
run() {
    local name=$1 k=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$out/$name-$k.cg" "$@" \
        >"$out/$name-$k.log" 2>&1 || {
        cat "$out/$name-$k.log" >&2
        exit 1
    }
    groups "$out/$name-$k.cg" >"$out/$name-$k.txt"
}

per() {
    local name=$1
    awk -F'\t' -v n="$n" -v what="$2" '
        FNR == NR { a[$1] = $2; next }
        { d = ($2 - a[$1]) / n; tot += d; printf "  %-50s %8.0f\n", $1, d }
        END { printf "  %-50s %8.0f\n", "total per " what, tot }' \
        "$out/$name-$n.txt" "$out/$name-$((2 * n)).txt"
}

perf="$target_dir/release/nvmf-perf"
rperf="$target_dir/release/rperf"
for k in "$n" $((2 * n)); do
    run read "$k" "$perf" --rw randread --bs 4096 --qd 32 --count "$k" --no-verify
    run write "$k" "$rperf" write_bw -s 4096 -n "$k"
done
echo "4 KiB random read, queue depth 32 (nvmf-perf, embedded), instructions per I/O:"
per read "read"
echo "4 KiB RDMA WRITE (rperf write_bw -s 4096, embedded), instructions per message:"
per write "WRITE"
