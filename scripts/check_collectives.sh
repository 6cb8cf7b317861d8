#!/usr/bin/env bash
# The collectives of one training step, predicted (`estimate --engine torch --nproc N --parallel
# PLAN`, traced under PyTorch's fake process group) against measured (`bench --engine torch`
# with the same flags: every rank under torchrun, gloo, counted by its recorder): calls and bytes
# by kind, per rank. Prints one Markdown table (docs/parallel.md).
#
#   MODELS=gpt2-small,cs336-small PLANS=ddp,fsdp NPROC=2 BATCH=2 SEQ=64 bash scripts/check_collectives.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MEMSCOPE_BIN:-target/release/memscope}
OUT=${OUT:-$(mktemp -d)}
MODELS=${MODELS:-gpt2-small,cs336-small}
PLANS=${PLANS:-ddp,fsdp}
NPROC=${NPROC:-2}
BATCH=${BATCH:-2}
SEQ=${SEQ:-64}
for m in ${MODELS//,/ }; do
  for p in ${PLANS//,/ }; do
    flags=(--engine torch --model "$m" --batch "$BATCH" --seq "$SEQ" --nproc "$NPROC" --parallel "$p")
    "$BIN" estimate "${flags[@]}" --json "$OUT/$m-$p.estimate.json" > /dev/null
    "$BIN" bench "${flags[@]}" --warmup 1 --steps 2 --json "$OUT/$m-$p.run.json" -q > /dev/null
  done
done
OUT="$OUT" MODELS="$MODELS" PLANS="$PLANS" python3 - <<'PY'
import json, os
out = os.environ["OUT"]
print("| model | plan | kind | predicted calls / bytes | measured per rank (calls / bytes) | exact |")
print("|---|---|---|--:|--:|---|")
bad = 0
for m in os.environ["MODELS"].split(","):
    for p in os.environ["PLANS"].split(","):
        e = json.load(open(f"{out}/{m}-{p}.estimate.json"))["by_dtype"]["f32"]["collectives"]
        ranks = json.load(open(f"{out}/{m}-{p}.run.json"))["ranks"]
        for kind, c in sorted(e.items()):
            got = [r["collectives"].get(kind, {}) for r in ranks]
            ok = all(g == c for g in got)
            bad += not ok
            each = " · ".join(f"{g.get('calls')} / {g.get('bytes'):,}" for g in got)
            print(f"| {m} | {p} | {kind} | {c['calls']} / {c['bytes']:,} | {each} | "
                  f"{'yes' if ok else 'NO'} |")
raise SystemExit(1 if bad else 0)
PY
