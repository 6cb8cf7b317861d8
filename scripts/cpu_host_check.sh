#!/usr/bin/env bash
# The engine's CPU checks for a host this project rarely gets: an Intel Xeon (AMX where
# `grep amx_bf16 /proc/cpuinfo` finds it) with many cores, such as a GPU machine's 16-core host
# (docs/performance.md, "Where it stands on AMD EPYC Zen 5; bf16 on AMX tiles"). Needs no Rust
# toolchain there: a release binary (MEMSCOPE_BIN, default target/release/memscope) and,
# optionally, the library's test binary (TEST_BIN, built where Rust is:
#   cargo test --release --lib --no-run 2>&1 | grep -o 'target/release/deps/memscope-[0-9a-f]*'
# ), plus torch and transformers in python3. About 5 minutes on a 16-core host. Writes everything under OUT (default ./cpu-check).
#   THREADS (default "2,<all cores>"), CASES (default a,b,f), ROUNDS (default 2).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${MEMSCOPE_BIN:-target/release/memscope}
OUT=${OUT:-cpu-check}
CORES=$(nproc)
THREADS=${THREADS:-2,$CORES}
mkdir -p "$OUT"
{
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $CORES"
  echo "flags: $(grep -m1 -o 'avx512f\|avx512_bf16\|amx_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} | tee "$OUT/cpu.txt"

if [ -n "${TEST_BIN:-}" ]; then
  echo "== 1. the AMX kernel on this CPU's tiles (and its software model)"
  "$TEST_BIN" kernels::amx_ kernels::dot_bf16 kernels::pairs environment:: --nocapture 2>&1 | tee "$OUT/amx-tests.txt"
fi

echo "== 2. ceilings at 2 and all cores: bf16 on the tiles beside the AVX-512 BF16 kernel"
for t in 2 "$CORES"; do
  MEMSCOPE_CACHE_DIR="$OUT/peaks" "$BIN" peaks --refresh --threads "$t" --json "$OUT/peaks-$t.json" | tee "$OUT/peaks-$t.txt"
done

echo "== 3. bf16 training on the tiles and without them (MEMSCOPE_AMX=0), 2 threads"
for r in 1 2; do
  for amx in 1 0; do
    step=$(MEMSCOPE_AMX=$amx "$BIN" bench --model gpt2-small --batch 2 --seq 128 --dtype bf16 \
      --precision pure --warmup 2 --steps 5 --threads 2 --json "$OUT/bf16-amx$amx-$r.json" \
      2>&1 | grep -m1 '^Throughput')
    echo "MEMSCOPE_AMX=$amx round $r: $step"
  done
done | tee "$OUT/bf16-amx.txt"

echo "== 4. against transformers at $THREADS threads, and each engine's scaling"
python3 scripts/compare_torch.py --cases "${CASES:-a,b,f}" --threads "$THREADS" \
  --rounds "${ROUNDS:-2}" --warmup 2 --steps 4 --memscope "$BIN" --json "$OUT/compare.json" \
  | tee "$OUT/compare.md"
