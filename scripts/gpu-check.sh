#!/usr/bin/env bash
# Checks imago on an NVIDIA GPU: builds with `--features cuda`, runs the kernel
# parity tests on CUDA (and wgpu, if an adapter exists), checks a policy training
# step on CUDA against the CPU, benchmarks the kernels on CUDA, measures certified
# acceleration's variants (flow steps, open-loop steps, f16/bf16) on CUDA, and prints
# tables (also written, with the raw figures, under target/gpu-check/).
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

echo "== certified acceleration's variants on CUDA (f16 and bf16 where supported)"
# A small cloned policy; --budget 0.01 with 16 episodes certifies nothing, so every
# faster variant is listed with its measured latency.
acc="$out/accelerate"
rm -rf "$acc" && mkdir -p "$acc"
./target/release/imago collect --episodes 20 --out "$acc/replay"
./target/release/imago --device cuda train --what bc --replay "$acc/replay" \
    --out "$acc/policy" --steps 200
./target/release/imago --device cuda accelerate --ckpt "$acc/policy" --budget 0.01 \
    --max-episodes 16 --report "$out/accelerate-cuda.json" 2>&1 \
    | tee "$out/accelerate-cuda.txt"

echo
echo "gpu-check passed on $(head -n1 "$out/gpu.txt"); table in $out/kernels-cuda.md"
