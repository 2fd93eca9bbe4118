#!/usr/bin/env bash
# The project's test command (README's second command). Installs what the tests need when it is
# missing, then runs the format, lint, no_std and test checks. Used by .ci/run as is.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-system-x86)
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
# The C ABI tests (capi/) compile C programs against rdma-core's headers and read the built
# libraries' ELF dynamic sections.
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v readelf >/dev/null 2>&1 || need_apt+=(binutils)
# A Debian tool that crashes on our libraries is reported with its threads' backtraces.
command -v gdb >/dev/null 2>&1 || need_apt+=(gdb)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "missing packages: ${need_apt[*]} (run as root or install them)" >&2
        exit 1
    fi
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== the tools without the emulator (vfio only)"
cargo check -p rperf -p rping --no-default-features
echo "== unikernel image (its own workspace: fmt and clippy; the tests build and boot it)"
cargo fmt --manifest-path qemu-tests/unikernel/Cargo.toml --all -- --check
cargo clippy --manifest-path qemu-tests/unikernel/Cargo.toml --target-dir target/uk-image -- -D warnings
echo "== no_std check (freestanding staticlib linking every no_std crate)"
cargo build --manifest-path ci/nostd-check/Cargo.toml --quiet
echo "== no_std check for aarch64-unknown-none (the aarch64 barriers and copy paths)"
if rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-none \
    || rustup target add aarch64-unknown-none >/dev/null 2>&1; then
    cargo build --manifest-path ci/nostd-check/Cargo.toml --target aarch64-unknown-none --quiet
else
    echo "aarch64-unknown-none target not installable here: aarch64 no_std check skipped"
fi
echo "== cargo test"
cargo test --workspace 2>&1 | tee target/test-output.txt
