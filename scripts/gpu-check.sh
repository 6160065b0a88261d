#!/usr/bin/env bash
# Checks imago on an NVIDIA GPU: builds with `--features cuda`, runs the kernel
# parity tests on CUDA (and wgpu, if an adapter exists), checks a policy training
# step on CUDA against the CPU, benchmarks the kernels on CUDA, and prints a table
# (also written, with the raw figures, under target/gpu-check/).
#
# Usage: scripts/gpu-check.sh [TIMED_CALLS]   (default 50)
# Fails, instead of skipping, when no CUDA device answers.
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-50}"
out=target/gpu-check
mkdir -p "$out"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export IMAGO_REQUIRE_CUDA=1

if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | tee "$out/gpu.txt"; then
    echo "gpu-check: nvidia-smi failed: no NVIDIA driver on this machine" >&2
    exit 1
fi

echo "== build (release, --features cuda)"
cargo build --release --features cuda

echo "== kernel parity tests (CUDA required; wgpu if an adapter exists)"
cargo test --release --workspace --features cuda --test parity -- --nocapture 2>&1 \
    | tee "$out/parity.txt"

echo "== policy training step on CUDA against the CPU"
./target/release/imago --device cuda devices --check 2>&1 | tee "$out/devices.txt"

echo "== kernels against burn's composite ops on CUDA"
./target/release/imago --device cuda bench --what kernels --steps "$steps" \
    --report "$out/kernels-cuda.json" 2>&1 | tee "$out/kernels-cuda.md"

echo
echo "gpu-check passed on $(head -n1 "$out/gpu.txt"); table in $out/kernels-cuda.md"
