#!/usr/bin/env bash
# Instructions the NVMe-oF target executes per 4 KiB I/O, target side only, counted by
# callgrind (this machine's clocks are noisy; instruction counts repeat). Builds
# tools/nvmf-rdma/examples/target_cost.rs in release: host and target in one process on two
# emulated NICs, one I/O queue, 4 KiB random reads (or writes, in-capsule data) one at a time.
# Under callgrind, collection is on only inside the target queue engine's `serve`
# (nvmf_rdma_target::QueueConn::serve, shared by the threaded tool and the unikernel; its per-I/O
# work: capsules taken and receives re-posted, the namespace read or write, the RDMA WRITE and
# response SEND posted, send completions handled; it runs only when a completion or a capsule
# is there, so empty polls, the emulated devices' steps and the host are not counted). The
# emulated NIC's work done synchronously inside the doorbell writes posted from there
# (`EmuRegs` writes: the device model, not the target) is subtracted. Two runs of N and 2N
# I/Os each; their difference over N is the figure (connection setup and admin commands drop
# out). The CQ polls are the driver's (scripts/fastpath-cost.sh: 40 instructions per CQE; two
# CQEs per I/O on the target) and are not included.
#
#   bash scripts/nvmf-target-cost.sh        # prints:
#   target instructions per 4 KiB read: N
#   target instructions per 4 KiB write: N
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind is missing (apt-get install valgrind)" >&2
    exit 1
fi
n=${NVMF_COST_IOS:-400}

cargo build --release --quiet -p nvmf-rdma --example target_cost
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
exe="$target_dir/release/examples/target_cost"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Instructions inside the target's `serve` for `$1` (read|write) x `$2` I/Os, less the
# emulated device's work inside doorbell writes made from there.
count() {
    local f="$out/$1-$2.cg"
    valgrind --tool=callgrind --callgrind-out-file="$f" --collect-atstart=no \
        --compress-strings=no --compress-pos=no \
        --toggle-collect='nvmf_rdma_target::QueueConn<*>::serve' \
        "$exe" "$1" "$2" >"$out/$1-$2.txt" 2>"$out/$1-$2.log" || {
        cat "$out/$1-$2.log" >&2
        exit 1
    }
    # totals: everything collected (all of it inside `serve`); the inclusive cost of each
    # call to an EmuRegs register write (the line after `calls=`: position, then cost).
    awk '
        /^(totals|summary):/ { total = $2 }
        /^cfn=/ { emu = ($0 ~ /EmuRegs as nic_hal::RegisterIo>::write/) }
        /^calls=/ { if (emu) take = 1; next }
        take { device += $2; take = 0 }
        END {
            if (total == "") exit 1
            printf "%d\n", total - device
        }' "$f"
}

per_io() {
    local a b
    a=$(count "$1" "$n")
    b=$(count "$1" $((2 * n)))
    if [ -z "$a" ] || [ -z "$b" ]; then
        echo "could not read the counts (callgrind output changed?)" >&2
        exit 1
    fi
    awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.0f\n", (b - a) / n }'
}

echo "target instructions per 4 KiB read: $(per_io read)"
echo "target instructions per 4 KiB write: $(per_io write)"
