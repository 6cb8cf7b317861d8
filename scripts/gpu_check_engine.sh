#!/usr/bin/env bash
# The torch engine's GPU checks in one run (docs/torch-engine.md, "On a GPU"). Needs a release
# binary (MEMSCOPE_BIN, default target/release/memscope) and memscope's Python package in
# python3 (a wheel built with `maturin build --release -m python/Cargo.toml`, installed with
# `pip install --no-deps target/wheels/memscope_torch-*.whl`), torch with CUDA and transformers.
# Writes everything under OUT (default ./gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${MEMSCOPE_BIN:-target/release/memscope}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, memscope; print(torch.__version__, transformers.__version__, memscope.__version__)" | tee -a "$OUT/gpu.txt"

echo "== 1. allocated and reserved: measured vs estimated"
MEMSCOPE_BIN=$BIN python3 scripts/check_torch_estimate.py --device cuda \
  --models gpt2-small,cs336-small,tiny-llama --batch 4 --seq 256 --steps 5 | tee "$OUT/estimate.md"

echo "== 2. the seeds' table: CS336 sizes, context 512, batch 4, a 16 GiB card simulated"
MODELS=cs336-small,cs336-medium,cs336-large,cs336-xl,cs336-2.7b
"$BIN" sweep --engine torch --device cuda --model $MODELS --batch 4 --seq 512 --warmup 2 \
  --steps 5 --memory-limit 16GiB --timeout 240s --jsonl "$OUT/seeds.jsonl" -q | tee "$OUT/seeds.md"
for m in ${MODELS//,/ }; do
  "$BIN" estimate --engine torch --device cuda --model "$m" --batch 4 --seq 512 --fits 16GiB \
    --json "$OUT/estimate-$m.json" | tail -2
done | tee "$OUT/seeds-estimate.txt"

echo "== 3. the recorder's own CUDA check"
python3 scripts/gpu_check_recorder.py --device cuda | tee "$OUT/recorder.txt"
