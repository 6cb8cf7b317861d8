#!/usr/bin/env python3
"""memscope's loss equals Hugging Face transformers' on the same checkpoint and the same tokens.

For each model below: build it in transformers from a small random config (seeded, with a wider
initialisation than the default so attention is sharp and positions matter), `save_pretrained`
it (safetensors, Hugging Face names) into a temp dir, write a token file (.bin of u16), run

    memscope bench --mode infer --config DIR/config.json --weights DIR/model.safetensors \
        --data FILE --batch B --seq T --warmup 0 --steps N --json OUT

and compare memscope's per-batch loss (the Record's `loss`) with transformers' loss on the same
windows (memscope's batch k, row r starts at splitmix64(seed, k·B + r) mod (N − T); docs/data.md).
Decoders: mean next-token cross-entropy. BERT: every position predicts its own token, nothing
masked (memscope's documented convention). The "sensitivity" column is the loss change when the
rotary schedule is swapped for plain RoPE (llama3) or the positions are ignored: it shows the
check would catch a wrong rope type. Prints a table; exits 1 if any |Δ| exceeds --tol.

Install: pip install torch transformers (CPU wheels are fine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MASK64 = (1 << 64) - 1


def splitmix64(seed: int, j: int) -> int:
    z = (seed + (j + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def windows(tokens, k: int, batch: int, seq: int, seed: int):
    """memscope's batch k: `batch` windows of seq + 1 tokens (src/input/tokens.rs)."""
    starts = len(tokens) - (seq + 1) + 1
    rows = []
    for r in range(batch):
        s = splitmix64(seed, k * batch + r) % starts
        rows.append(tokens[s:s + seq + 1])
    return rows


def models(transformers):
    """(name, config, class) for each checked model."""
    T = transformers
    common = dict(initializer_range=0.2, vocab_size=512)
    return [
        ("gpt2 (4 layers, d 64, tied)",
         T.GPT2Config(n_layer=4, n_embd=64, n_head=4, n_positions=128, bos_token_id=0,
                      eos_token_id=0, **common), T.GPT2LMHeadModel),
        ("llama GQA (8 heads, 2 kv, untied)",
         T.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128,
                       rms_norm_eps=1e-5, **common), T.LlamaForCausalLM),
        ("llama rope llama3, theta 500000",
         T.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                       rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                        "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 16},
                       **common), T.LlamaForCausalLM),
        ("bert (masked LM, own-token targets)",
         T.BertConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=4, max_position_embeddings=128,
                      **common), T.BertForMaskedLM),
    ]


def hf_losses(torch, model, family: str, batches) -> list[float]:
    import torch.nn.functional as F
    out = []
    with torch.no_grad():
        for rows in batches:
            w = torch.tensor(rows, dtype=torch.long)  # (B, T+1)
            ids = w[:, :-1]
            targets = ids if family == "bert" else w[:, 1:]
            kwargs = {"token_type_ids": torch.zeros_like(ids)} if family == "bert" else {}
            logits = model(input_ids=ids, **kwargs).logits.float()  # (B, T, V)
            out.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       targets.reshape(-1)).item())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memscope", default=str(ROOT / "target" / "release" / "memscope"))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batches", type=int, default=3, help="batches checked per model")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)

    import numpy as np
    import torch
    import transformers
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; batch {a.batch} × "
          f"seq {a.seq}, {a.batches} batches per model, f32, tolerance {a.tol:g}")
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, (name, cfg, cls) in enumerate(models(transformers)):
            cfg._attn_implementation = "sdpa" if cfg.model_type != "bert" else "eager"
            torch.manual_seed(i)
            model = cls(cfg).eval()
            d = tmp / f"m{i}"
            model.save_pretrained(d, safe_serialization=True)
            rng = np.random.default_rng(i)
            tokens = rng.integers(0, cfg.vocab_size, size=4096, dtype=np.uint16)
            data = tmp / f"tokens{i}.bin"
            tokens.tofile(data)
            out = tmp / f"r{i}.json"
            cmd = [a.memscope, "bench", "--mode", "infer", "--config", str(d / "config.json"),
                   "--weights", str(d / "model.safetensors"), "--data", str(data),
                   "--batch", str(a.batch), "--seq", str(a.seq), "--warmup", "0",
                   "--steps", str(a.batches), "--seed", str(a.seed), "--threads", str(a.threads),
                   "--json", str(out), "-q"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{name}: memscope failed ({p.returncode}):\n{p.stderr}", file=sys.stderr)
                failed = True
                continue
            ours = json.load(open(out))["loss"]
            toks = tokens.tolist()
            batches = [windows(toks, k, a.batch, a.seq, a.seed) for k in range(a.batches)]
            family = cfg.model_type
            theirs = hf_losses(torch, model, family, batches)
            # Sensitivity: the same weights with plain RoPE (llama3 model) or shuffled positions.
            if "llama3" in name:
                plain = transformers.LlamaConfig(**{**cfg.to_dict(), "rope_parameters": {
                    "rope_type": "default", "rope_theta": 500000.0}})
                other = cls(plain).eval()
                other.load_state_dict(model.state_dict())
                alt = hf_losses(torch, other, family, batches)
                what = "plain RoPE"
            else:
                alt = hf_losses(torch, model, family,
                                [[list(reversed(r[:-1])) + [r[-1]] for r in b] for b in batches])
                what = "reversed inputs"
            for k, (m, t, s) in enumerate(zip(ours, theirs, alt)):
                diff = abs(m - t)
                ok = diff <= a.tol
                failed |= not ok
                rows.append((name, k, m, t, diff, f"{abs(s - t):.4f} ({what})",
                             "ok" if ok else "MISMATCH"))
    w = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'model':<{w}}  batch  {'memscope':>10}  {'transformers':>12}  {'|Δ|':>9}  "
          f"{'sensitivity':<24}  verdict")
    for name, k, m, t, diff, sens, verdict in rows:
        print(f"{name:<{w}}  {k:>5}  {m:>10.6f}  {t:>12.6f}  {diff:>9.2e}  {sens:<24}  {verdict}")
    print("all within tolerance" if not failed else "MISMATCH: see the rows above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
