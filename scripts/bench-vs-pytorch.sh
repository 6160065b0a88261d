#!/usr/bin/env bash
# imago against PyTorch on this machine's CPU, side by side: alternates
# `imago --device cpu bench` with scripts/bench_pytorch.py (PyTorch twins of the same
# policy and world models: same widths, parameter counts checked equal, same timed
# regions), ROUNDS rounds each, and prints the median ratios and the fp32 GEMM ceiling.
# Not part of CI: PyTorch is a large install.
#
# Usage: PYTHON=/path/to/python-with-torch scripts/bench-vs-pytorch.sh [ROUNDS] [--compile]
#   ROUNDS   rounds of each side (default 2)
#   --compile  also time torch.compile'd twins (minutes of compilation per model)
# Figures and raw JSON go to target/bench-vs-pytorch/, replaced by each run.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
compile="${2:-}"
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
    echo "bench-vs-pytorch: ROUNDS must be a positive whole number, got '$rounds'" >&2
    exit 2
fi
if [ -n "$compile" ] && [ "$compile" != "--compile" ]; then
    echo "bench-vs-pytorch: unknown option '$compile' (the only one is --compile)" >&2
    exit 2
fi
python="${PYTHON:-python3}"
threads="${THREADS:-2}"
out=target/bench-vs-pytorch
mkdir -p "$out"
rm -f "$out"/*.json
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export RAYON_NUM_THREADS="$threads"
if ! "$python" -c "import torch" 2>/dev/null; then
    echo "bench-vs-pytorch: $python cannot import torch; set PYTHON to one that can" >&2
    exit 1
fi
# Built as a workspace, like README's test command, so that the binary reuses that
# build (runtime/Cargo.toml's regex-syntax note tells how the two once diverged).
cargo build --release --workspace
imago=target/release/imago
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds"
    "$imago" --device cpu bench --what policy --batch-size 32 --report "$out/imago-policy-$round.json" >/dev/null
    "$python" scripts/bench_pytorch.py --what policy --batch-size 32 --threads "$threads" >"$out/torch-policy-$round.json"
    "$imago" --device cpu bench --what worldmodel --report "$out/imago-worldmodel-$round.json" >/dev/null
    "$python" scripts/bench_pytorch.py --what worldmodel --threads "$threads" >"$out/torch-worldmodel-$round.json"
    if [ "$compile" = "--compile" ]; then
        "$python" scripts/bench_pytorch.py --what policy --batch-size 32 --threads "$threads" --compile >"$out/compiled-policy-$round.json"
        "$python" scripts/bench_pytorch.py --what worldmodel --threads "$threads" --compile >"$out/compiled-worldmodel-$round.json"
    fi
done
"$python" scripts/bench_pytorch.py --gemm --threads "$threads" >"$out/gemm.json"
"$python" scripts/bench_pytorch.py --table "$out" | tee "$out/table.txt"
