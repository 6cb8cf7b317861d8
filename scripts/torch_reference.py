#!/usr/bin/env python3
"""PyTorch reference for `memscope bench`: the same models, the same workloads, the same Record
fields, so that candle's numbers can be put beside PyTorch's (see docs/compare-torch.md).

Two implementations (--impl):
- `transformers` (default): what users run. Hugging Face transformers' own classes
  (`GPT2LMHeadModel`, `LlamaForCausalLM`, `BertForMaskedLM`) built from the same config as
  memscope's preset or --config file (same sizes, epsilons, tying, rope θ; dropout 0; f32 unless
  --dtype bf16), `attn_implementation="sdpa"`, transformers' own initialisation, `.logits` then the
  same f32 cross-entropy. BERT: every position predicts its own token (memscope's convention).
  Generate uses transformers' KV cache (`past_key_values`, grown per token, not preallocated).
  Install: pip install torch transformers (CPU wheels are fine).
- `eager`: memscope's models re-written op for op in PyTorch eager (below); gpt2 and llama only.

What `eager` reproduces from memscope (src/model/*.rs, src/measure/workload.rs):
- models: GPT-2 (pre-LayerNorm, learned positions, GELU(tanh) MLP, Conv1D (in, out) weights,
  head tied to the token embedding unless `tie_embeddings` is false) and LLaMA (RMSNorm, RoPE
  rotate-half, grouped-query attention, SwiGLU, no biases, untied head by default), with exactly
  the same parameters (names, shapes, count) and the same initialisation per parameter:
  Normal(0.02), positions Normal(0.01), residual projections Normal(0.02 / sqrt(2 L)), norm
  weights 1, biases 0. The random streams differ (torch's RNG, not Rust's StdRng).
- presets by name (gpt2-*, cs336-*, tinyllama-1.1b, tiny-gpt2, tiny-llama) and `--config FILE`
  in memscope's schema (has `family`) or a Hugging Face config.json (has `model_type`).
- train: forward + f32 cross-entropy (forward phase), backward, AdamW (lr --lr, betas 0.9/0.999,
  eps 1e-8, weight decay 0.01 — candle-nn's ParamsAdamW defaults), on one fixed random batch of
  token ids (B, T+1): ids = [:, :T], targets = [:, 1:]. `step` is the wall time of the whole step.
- infer: forward without autograd (torch.inference_mode, parameters with requires_grad=False).
- generate: prefill --prompt-len tokens into a preallocated KV cache, then decode --new-tokens
  tokens greedily; decode time is per token.

Eager settings: F.scaled_dot_product_attention(is_causal=True); torch.optim.AdamW(fused=True)
when the installed torch supports it on CPU for the dtype (probed), else foreach=True;
torch.set_num_threads(--threads).

Output: a Record-shaped JSON (docs/record.md) with the field names memscope uses, to stdout or to
--json FILE; a human summary goes to stderr. Fields memscope's counting allocator fills (heap_*)
cannot be measured here: `memory.counting` is false and they are 0. Extra fields:
`engine` ("pytorch <version>"), `optimizer_impl` (fused / foreach / for-loop),
`memory.library_baseline_rss_bytes` (VmRSS right after `import torch`, before the model exists),
`memory.interpreter_rss_bytes` (VmRSS before `import torch`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

from memscope import _native  # memscope's config loader and statistics (pip install ./python)

SCHEMA_VERSION = 1
MIB = 1024 * 1024

# ----------------------------------------------------------------------------------------------
# /proc


def proc_status_bytes(key: str) -> int | None:
    """A `kB` field of /proc/self/status (VmRSS, VmHWM) in bytes; None where /proc is absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_now() -> int | None:
    """Resident set size now, bytes (/proc/self/statm, as memscope reads it)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return proc_status_bytes("VmRSS")


def pss_now() -> int | None:
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# ----------------------------------------------------------------------------------------------
# Models: memscope's own resolution of --model / --config (the Rust loader, through the package)


class ConfigError(Exception):
    pass


def resolve_model(model: str, config: str | None) -> tuple[str, dict, int]:
    """(name, config, exact parameter count) as `memscope bench` resolves them: a preset, or a
    config file in memscope's schema or Hugging Face's, validated by memscope's own loader."""
    try:
        text, params = _native.model_config(model, config)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    cfg = json.loads(text)
    return (cfg["name"] if config else model), cfg, params


# ----------------------------------------------------------------------------------------------
# Parameters (src/model/gpt2.rs, src/model/llama.rs: param_specs)


def param_specs(cfg: dict) -> list[tuple[str, tuple[int, ...], tuple[str, float]]]:
    """(name, shape, init) exactly as memscope's `param_specs`; init is ("normal", std),
    ("ones", 0) or ("zeros", 0)."""
    c, f, v, L = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"], cfg["n_layers"]
    std = 0.02
    # memscope computes this in f32: 0.02 / sqrt(2L).
    proj_std = 0.02 / math.sqrt(2 * L)
    N, ONE, ZERO = (lambda s: ("normal", s)), ("ones", 0.0), ("zeros", 0.0)
    s = []
    if cfg["family"] == "gpt2":
        s += [("wte.weight", (v, c), N(std)), ("wpe.weight", (cfg["max_seq_len"], c), N(0.01))]
        for i in range(L):
            p = f"h.{i}."
            s += [
                (p + "ln_1.weight", (c,), ONE), (p + "ln_1.bias", (c,), ZERO),
                (p + "attn.c_attn.weight", (c, 3 * c), N(std)), (p + "attn.c_attn.bias", (3 * c,), ZERO),
                (p + "attn.c_proj.weight", (c, c), N(proj_std)), (p + "attn.c_proj.bias", (c,), ZERO),
                (p + "ln_2.weight", (c,), ONE), (p + "ln_2.bias", (c,), ZERO),
                (p + "mlp.c_fc.weight", (c, f), N(std)), (p + "mlp.c_fc.bias", (f,), ZERO),
                (p + "mlp.c_proj.weight", (f, c), N(proj_std)), (p + "mlp.c_proj.bias", (c,), ZERO),
            ]
        s += [("ln_f.weight", (c,), ONE), ("ln_f.bias", (c,), ZERO)]
    else:
        kv = cfg["n_kv_heads"] * (c // cfg["n_heads"])
        s += [("model.embed_tokens.weight", (v, c), N(std))]
        for i in range(L):
            p = f"model.layers.{i}."
            s += [
                (p + "input_layernorm.weight", (c,), ONE),
                (p + "self_attn.q_proj.weight", (c, c), N(std)),
                (p + "self_attn.k_proj.weight", (kv, c), N(std)),
                (p + "self_attn.v_proj.weight", (kv, c), N(std)),
                (p + "self_attn.o_proj.weight", (c, c), N(proj_std)),
                (p + "post_attention_layernorm.weight", (c,), ONE),
                (p + "mlp.gate_proj.weight", (f, c), N(std)),
                (p + "mlp.up_proj.weight", (f, c), N(std)),
                (p + "mlp.down_proj.weight", (c, f), N(proj_std)),
            ]
        s += [("model.norm.weight", (c,), ONE)]
    if not cfg["tie_embeddings"]:
        s += [("lm_head.weight", (v, c), N(std))]
    return s


# ----------------------------------------------------------------------------------------------
# CLI


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="PyTorch eager reference for `memscope bench` (same models, workloads and "
                    "Record fields). JSON goes to stdout (or --json FILE), a summary to stderr.")
    ap.add_argument("--model", default="gpt2-small", help="preset name (default gpt2-small)")
    ap.add_argument("--config", metavar="FILE",
                    help="model config JSON: memscope's schema (with `family`) or a HF config.json")
    ap.add_argument("--mode", choices=["train", "infer", "generate"], default="train")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128, help="sequence length (train, infer)")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured steps (default 2)")
    ap.add_argument("--steps", type=int, default=10, help="measured steps (default 10)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (train)")
    ap.add_argument("--prompt-len", type=int, default=None,
                    help="prompt tokens (generate; default --seq)")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens decoded per step (generate)")
    ap.add_argument("--optimizer", choices=["auto", "fused", "foreach", "for-loop"], default="auto",
                    help="AdamW implementation; auto = fused if it works on CPU, else foreach")
    ap.add_argument("--impl", choices=["transformers", "eager"], default="transformers",
                    help="transformers (default): Hugging Face's model classes, SDPA; eager: "
                         "memscope's models re-written in PyTorch eager (gpt2, llama)")
    ap.add_argument("--json", metavar="FILE", help="write the JSON here instead of stdout")
    ap.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    a = ap.parse_args(argv)
    if a.threads is None:
        try:
            a.threads = len(os.sched_getaffinity(0))
        except AttributeError:
            a.threads = os.cpu_count() or 1
    for k in ("batch", "seq", "steps", "threads", "new_tokens"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    if a.prompt_len is None:
        a.prompt_len = a.seq
    if a.mode == "generate":
        a.seq = a.prompt_len
    if not (math.isfinite(a.lr) and a.lr > 0):
        ap.error("--lr must be a finite positive number")
    return a


# ----------------------------------------------------------------------------------------------
# Everything below needs torch.


def build(torch, cfg: dict):
    """The nn.Module classes, defined once torch is imported."""
    nn = torch.nn
    F = torch.nn.functional
    has_rms_norm = hasattr(F, "rms_norm")

    def attend(q, k, v, offset: int):
        """q (B, H, T, D), k v (B, H, S, D), S = offset + T → (B, H, T, D)."""
        t = q.shape[2]
        if offset == 0:
            return F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        if t == 1:
            return F.scaled_dot_product_attention(q, k, v)
        s = k.shape[2]
        mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(diagonal=offset)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    class KvCache:
        """Preallocated (B, KV, S_max, D) buffers per layer (src/model/kv_cache.rs)."""

        def __init__(self, n_layers, batch, kv_heads, max_len, head_dim, dtype):
            self.k = [torch.zeros(batch, kv_heads, max_len, head_dim, dtype=dtype)
                      for _ in range(n_layers)]
            self.v = [torch.zeros(batch, kv_heads, max_len, head_dim, dtype=dtype)
                      for _ in range(n_layers)]
            self.len = 0
            self.pending = 0

        def bytes(self) -> int:
            return sum(t.numel() * t.element_size() for t in self.k + self.v)

        def reset(self):
            self.len = self.pending = 0

        def append(self, layer, k, v):
            t = k.shape[2]
            end = self.len + t
            if end > self.k[layer].shape[2]:
                raise RuntimeError("KV cache full")
            self.k[layer][:, :, self.len:end] = k
            self.v[layer][:, :, self.len:end] = v
            self.pending = t
            return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

        def advance(self):
            self.len += self.pending
            self.pending = 0

    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = cfg
            self.p = nn.ParameterDict()
            # ParameterDict keys cannot contain '.': map checkpoint names to safe keys.
            for name, shape, _ in param_specs(cfg):
                self.p[name.replace(".", "__")] = nn.Parameter(torch.empty(shape))

        def w(self, name: str):
            return self.p[name.replace(".", "__")]

        @torch.no_grad()
        def init_weights(self, seed: int):
            g = torch.Generator().manual_seed(seed)
            for name, _, (kind, std) in param_specs(cfg):
                t = self.w(name)
                if kind == "ones":
                    t.fill_(1.0)
                elif kind == "zeros":
                    t.zero_()
                else:
                    t.normal_(0.0, std, generator=g)

        def new_cache(self, batch, max_len, dtype):
            hd = cfg["d_model"] // cfg["n_heads"]
            return KvCache(cfg["n_layers"], batch, cfg["n_kv_heads"], max_len, hd, dtype)

    class Gpt2(Base):
        def forward(self, ids, cache=None):
            b, t = ids.shape
            c, nh = cfg["d_model"], cfg["n_heads"]
            hd, eps = c // nh, cfg["norm_eps"]
            offset = cache.len if cache is not None else 0
            wte = self.w("wte.weight")
            x = F.embedding(ids, wte) + self.w("wpe.weight")[offset:offset + t]  # (B, T, C)
            for i in range(cfg["n_layers"]):
                g = lambda n: self.w(f"h.{i}.{n}")  # noqa: E731
                h = F.layer_norm(x, (c,), g("ln_1.weight"), g("ln_1.bias"), eps).view(b * t, c)
                qkv = torch.addmm(g("attn.c_attn.bias"), h, g("attn.c_attn.weight"))  # (B*T, 3C)
                qkv = qkv.view(b, t, 3, nh, hd).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
                q, k, v = qkv[0], qkv[1], qkv[2]
                if cache is not None:
                    k, v = cache.append(i, k, v)
                y = attend(q, k, v, offset)  # (B, H, T, D)
                y = y.transpose(1, 2).reshape(b * t, c)
                y = torch.addmm(g("attn.c_proj.bias"), y, g("attn.c_proj.weight")).view(b, t, c)
                x = x + y
                h = F.layer_norm(x, (c,), g("ln_2.weight"), g("ln_2.bias"), eps).view(b * t, c)
                h = F.gelu(torch.addmm(g("mlp.c_fc.bias"), h, g("mlp.c_fc.weight")),
                           approximate="tanh")
                h = torch.addmm(g("mlp.c_proj.bias"), h, g("mlp.c_proj.weight")).view(b, t, c)
                x = x + h
            if cache is not None:
                cache.advance()
            x = F.layer_norm(x, (c,), self.w("ln_f.weight"), self.w("ln_f.bias"), eps)
            head = wte if cfg["tie_embeddings"] else self.w("lm_head.weight")
            return F.linear(x, head)  # (B, T, V)

    class Llama(Base):
        def __init__(self):
            super().__init__()
            hd = cfg["d_model"] // cfg["n_heads"]
            half = hd // 2
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(half, dtype=torch.float64) * 2 / hd))
            ang = torch.arange(cfg["max_seq_len"], dtype=torch.float64)[:, None] * inv[None, :]
            ang = torch.cat([ang, ang], dim=-1)  # (T_max, D): both halves (rotate-half)
            self.register_buffer("cos_t", ang.cos().float(), persistent=False)
            self.register_buffer("sin_t", ang.sin().float(), persistent=False)

        def rms(self, x, w):
            if has_rms_norm:
                return F.rms_norm(x, (x.shape[-1],), w, cfg["norm_eps"])
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + cfg["norm_eps"])
            return y.to(x.dtype) * w

        def forward(self, ids, cache=None):
            b, t = ids.shape
            c, nh, nkv = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
            hd, rep = c // nh, nh // nkv
            offset = cache.len if cache is not None else 0
            x = F.embedding(ids, self.w("model.embed_tokens.weight"))  # (B, T, C)
            cos = self.cos_t[offset:offset + t].to(x.dtype)  # (T, D)
            sin = self.sin_t[offset:offset + t].to(x.dtype)

            def rope(z):  # (B, H, T, D)
                z1, z2 = z[..., : hd // 2], z[..., hd // 2:]
                return z * cos + torch.cat([-z2, z1], dim=-1) * sin

            for i in range(cfg["n_layers"]):
                g = lambda n: self.w(f"model.layers.{i}.{n}")  # noqa: E731
                h = self.rms(x, g("input_layernorm.weight"))
                q = F.linear(h, g("self_attn.q_proj.weight")).view(b, t, nh, hd).transpose(1, 2)
                k = F.linear(h, g("self_attn.k_proj.weight")).view(b, t, nkv, hd).transpose(1, 2)
                v = F.linear(h, g("self_attn.v_proj.weight")).view(b, t, nkv, hd).transpose(1, 2)
                q, k = rope(q), rope(k)
                if cache is not None:
                    k, v = cache.append(i, k, v)
                if rep > 1:  # (B, KV, S, D) → (B, H, S, D), each kv head shared by rep heads
                    s = k.shape[2]
                    k = k[:, :, None].expand(b, nkv, rep, s, hd).reshape(b, nh, s, hd)
                    v = v[:, :, None].expand(b, nkv, rep, s, hd).reshape(b, nh, s, hd)
                y = attend(q, k, v, offset).transpose(1, 2).reshape(b, t, c)
                x = x + F.linear(y, g("self_attn.o_proj.weight"))
                h = self.rms(x, g("post_attention_layernorm.weight"))
                y = F.silu(F.linear(h, g("mlp.gate_proj.weight"))) * F.linear(h, g("mlp.up_proj.weight"))
                x = x + F.linear(y, g("mlp.down_proj.weight"))
            if cache is not None:
                cache.advance()
            x = self.rms(x, self.w("model.norm.weight"))
            head = (self.w("model.embed_tokens.weight") if cfg["tie_embeddings"]
                    else self.w("lm_head.weight"))
            return F.linear(x, head)  # (B, T, V)

    return Gpt2 if cfg["family"] == "gpt2" else Llama


def build_transformers(torch, cfg: dict):
    """Hugging Face transformers' own model for `cfg` (memscope's fields), SDPA attention, no
    dropout. Returns (model, forward(ids, past=None) -> (logits, past))."""
    import transformers as T  # noqa: PLC0415 - only this implementation needs it
    # memscope's configs as transformers' classes: what the torch engine builds.
    from memscope import _contract  # noqa: PLC0415
    from memscope._workers import models as _hf  # noqa: PLC0415
    hf, cls = _hf.hf_config(T, _contract.read_type("ModelConfig", cfg), "sdpa")
    model = cls(hf)
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "sdpa":
        raise SystemExit(f"error: transformers built {cls.__name__} with attention {impl!r}, "
                         "not sdpa")

    def forward(ids, past=None, use_cache=False):
        out = model(input_ids=ids, past_key_values=past, use_cache=use_cache)
        return out.logits, (out.past_key_values if use_cache else None)

    return model, forward


def make_adamw(torch, params, lr: float, choice: str, dtype):
    """AdamW with candle-nn's defaults. Returns (optimizer, impl name, note)."""
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    note = None
    if choice in ("auto", "fused"):
        # Probe on a throwaway parameter of the run's dtype: some versions accept fused=True in
        # the constructor and fail only at step() (or not support the dtype).
        try:
            p = torch.nn.Parameter(torch.ones(4, dtype=dtype))
            p.grad = torch.ones(4, dtype=dtype)
            torch.optim.AdamW([p], fused=True, **kw).step()
            return torch.optim.AdamW(params, fused=True, **kw), "fused", None
        except Exception as e:  # noqa: BLE001 - any failure means "not available here"
            note = f"fused AdamW unavailable on CPU in torch {torch.__version__}: {e}"
            if choice == "fused":
                raise SystemExit(f"error: --optimizer fused: {note}")
    if choice in ("auto", "foreach"):
        return torch.optim.AdamW(params, foreach=True, **kw), "foreach", note
    return torch.optim.AdamW(params, foreach=False, **kw), "for-loop", note


def run(args, interpreter_rss, baseline_rss, baseline_hwm, import_seconds, torch) -> dict:
    torch.set_num_threads(args.threads)
    started_at = int(time.time())
    wall0 = time.perf_counter()
    model_name, cfg, memscope_params = resolve_model(args.model, args.config)
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    trainable = args.mode == "train"
    warnings: list[str] = []

    # Load: seeded random parameters (f32 values, then cast, as memscope does).
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    if args.impl == "transformers":
        model, hf_forward = build_transformers(torch, cfg)
        model = model.to(dtype)
        model.train(trainable)
    else:
        if cfg["family"] == "bert":
            raise ConfigError("family bert needs --impl transformers (the eager reference "
                              "re-writes gpt2 and llama only)")
        cls = build(torch, cfg)
        model = cls()
        model.init_weights(args.seed)
        model = model.to(dtype)
        if hasattr(model, "cos_t"):  # RoPE tables stay f32; cast per forward
            model.cos_t, model.sin_t = model.cos_t.float(), model.sin_t.float()
        hf_forward = None
    model.requires_grad_(trainable)

    def forward(ids):
        return hf_forward(ids)[0] if hf_forward else model(ids)
    load_seconds = time.perf_counter() - t0
    rss_after_load = rss_now()

    params = sum(p.numel() for p in model.parameters())
    expected = memscope_params if cfg["family"] != "bert" else params
    if params != expected:
        warnings.append(f"parameter count {params} differs from memscope's spec count {expected}")
    elem = torch.tensor([], dtype=dtype).element_size()

    gen = torch.Generator().manual_seed(args.seed)
    v = cfg["vocab_size"]
    total = args.warmup + args.steps
    samples: dict[str, list[float]] = {}
    series, loss_hist = [], []
    kv_cache_bytes = None
    optimizer_impl = None
    optimizer_import_rss = None

    def end_step(step):
        series.append({"step": step, "warmup": step < args.warmup, "heap_live_bytes": 0,
                       "live_allocations": 0, "heap_peak_bytes": 0, "rss_bytes": rss_now(),
                       "pss_bytes": pss_now()})

    if args.mode == "train":
        all_ids = torch.randint(0, v, (args.batch, args.seq + 1), generator=gen)
        ids, targets = all_ids[:, :-1].contiguous(), all_ids[:, 1:].contiguous()
        if cfg["family"] == "bert":  # every position predicts its own token (memscope's convention)
            targets = ids
        flat_targets = targets.reshape(-1)
        before_opt = rss_now()
        opt, optimizer_impl, note = make_adamw(torch, list(model.parameters()), args.lr,
                                               args.optimizer, dtype)
        # The first torch.optim construction imports torch._dynamo, sympy, triton, ... (library
        # code, no optimizer state yet: that is created lazily by the first step()).
        if before_opt is not None and rss_now() is not None:
            optimizer_import_rss = rss_now() - before_opt
        if note:
            warnings.append(note)
        names = ["forward", "backward", "optimizer", "step"]
        samples = {n: [] for n in names}
        for step in range(total):
            s0 = time.perf_counter()
            logits = forward(ids)  # (B, T, V)
            loss = F_cross_entropy(torch, logits, flat_targets)
            s1 = time.perf_counter()
            loss_hist.append(loss.item())
            s2 = time.perf_counter()
            loss.backward()
            del logits, loss
            s3 = time.perf_counter()
            opt.step()
            s4 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            s5 = time.perf_counter()
            if step >= args.warmup:
                for n, ms in zip(names, [s1 - s0, s3 - s2, s4 - s3, s5 - s0]):
                    samples[n].append(ms * 1e3)
            end_step(step)
    elif args.mode == "infer":
        all_ids = torch.randint(0, v, (args.batch, args.seq + 1), generator=gen)
        ids = all_ids[:, :-1].contiguous()
        samples = {"forward": []}
        for step in range(total):
            with torch.inference_mode():
                s0 = time.perf_counter()
                logits = forward(ids)
                s1 = time.perf_counter()
            del logits
            if step >= args.warmup:
                samples["forward"].append((s1 - s0) * 1e3)
            end_step(step)
    else:
        all_ids = torch.randint(0, v, (args.batch, args.prompt_len + 1), generator=gen)
        prompt = all_ids[:, :-1].contiguous()
        max_len = args.prompt_len + args.new_tokens
        if max_len > cfg["max_seq_len"]:
            raise SystemExit(f"error: --prompt-len + --new-tokens ({max_len}) exceeds the model's "
                             f"max_seq_len ({cfg['max_seq_len']})")
        if hf_forward is None:
            cache = model.new_cache(args.batch, max_len, dtype)
            kv_cache_bytes = cache.bytes()
        samples = {"prefill": [], "decode": []}
        for step in range(total):
            if hf_forward is None:
                cache.reset()
            with torch.inference_mode():
                s0 = time.perf_counter()
                if hf_forward is None:
                    logits = model(prompt, cache)
                else:
                    logits, past = hf_forward(prompt, None, use_cache=True)
                nxt = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
                s1 = time.perf_counter()
                for _ in range(args.new_tokens):
                    if hf_forward is None:
                        logits = model(nxt, cache)
                    else:
                        logits, past = hf_forward(nxt, past, use_cache=True)
                    nxt = logits[:, -1].argmax(-1, keepdim=True)
                s2 = time.perf_counter()
            del logits, nxt
            if step >= args.warmup:
                samples["prefill"].append((s1 - s0) * 1e3)
                samples["decode"].append((s2 - s1) * 1e3 / args.new_tokens)
            end_step(step)

    rss_peak = proc_status_bytes("VmHWM")
    rss_end = rss_now()

    # memscope's own statistics and noise warnings (src/analysis/timing.rs, through the package).
    text, noise = _native.phase_timings([(n, xs) for n, xs in samples.items() if xs])
    timing = json.loads(text)
    warnings.extend(noise)
    # Throughput over the median step (src/analysis/timing.rs).
    if "step" in timing:
        step_ms = timing["step"]["median_ms"]
    elif "forward" in timing:
        step_ms = timing["forward"]["median_ms"]
    else:
        step_ms = timing["prefill"]["median_ms"] + timing["decode"]["median_ms"] * args.new_tokens
    tokens = args.batch * (args.prompt_len + args.new_tokens if args.mode == "generate" else args.seq)
    per_s = (lambda n: n * 1e3 / step_ms) if step_ms > 0 else (lambda n: None)
    throughput = {
        "tokens_per_s": per_s(tokens),
        "samples_per_s": per_s(args.batch),
        "decode_tokens_per_s": (args.batch * 1e3 / timing["decode"]["median_ms"])
        if "decode" in timing and timing["decode"]["median_ms"] > 0 else None,
    }

    engine = f"pytorch {torch.__version__}"
    if args.impl == "transformers":
        import transformers  # noqa: PLC0415
        engine = f"transformers {transformers.__version__} (sdpa) on pytorch {torch.__version__}"
    spec = {
        "model": model_name, "config": cfg, "config_path": args.config, "weights": None,
        "mode": args.mode, "batch": args.batch, "seq": args.seq, "dtype": args.dtype,
        "threads": args.threads, "seed": args.seed, "warmup": args.warmup, "steps": args.steps,
        "grad_accum": 1, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "lr": args.lr,
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "engine": engine,
        "optimizer_impl": optimizer_impl,
        "spec": spec,
        "model": {
            "name": model_name, "family": cfg["family"], "params": params,
            "param_bytes": params * elem, "n_layers": cfg["n_layers"], "d_model": cfg["d_model"],
            "n_heads": cfg["n_heads"], "vocab_size": cfg["vocab_size"],
            "expected_params": expected,
        },
        "timing": timing,
        "throughput": throughput,
        "memory": {
            # No counting allocator here: heap figures are not measured (0), as with
            # MEMSCOPE_NO_COUNT=1 in memscope.
            "counting": False,
            "load_bytes": 0, "load_seconds": load_seconds, "load_peak_bytes": 0,
            "param_bytes": params * elem, "heap_peak_bytes": 0, "heap_live_end_bytes": 0,
            "rss_peak_bytes": rss_peak, "rss_end_bytes": rss_end,
            "kv_cache_bytes": kv_cache_bytes,
            "phases": {}, "series": series, "micro_steps": [], "peak_moments": [],
            "breakdown": {},
            # Extra (torch only):
            "interpreter_rss_bytes": interpreter_rss,
            "library_baseline_rss_bytes": baseline_rss,
            "library_baseline_hwm_bytes": baseline_hwm,
            "rss_after_load_bytes": rss_after_load,
            "optimizer_import_rss_bytes": optimizer_import_rss,
            "rss_peak_minus_baseline_bytes": (rss_peak - baseline_rss)
            if rss_peak is not None and baseline_rss is not None else None,
            "import_seconds": import_seconds,
        },
        "loss": loss_hist,
        "warnings": warnings,
        "environment": {
            "cpu_model": cpu_model(), "cores": os.cpu_count() or 0, "threads": args.threads,
            "os": f"{platform.system().lower()} {platform.release()}",
            "memscope_version": "", "git_commit": "", "candle_version": "",
            "allocator": "pytorch CPU allocator (system malloc)",
            "engine": engine, "python": platform.python_version(),
            "torch_num_threads": torch.get_num_threads(),
            "torch_parallel_info": parallel_backend(torch),
            # The vector ISA ATen's kernels run (ATEN_CPU_CAPABILITY caps it) and MKL's cap.
            "isa": torch.backends.cpu.get_cpu_capability().lower(),
            "mkl_enable_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
        },
        "started_at": started_at,
        "wall_seconds": time.perf_counter() - wall0,
    }


def F_cross_entropy(torch, logits, flat_targets):
    """Mean cross-entropy in f32 of logits (B, T, V) against targets (B*T,)."""
    v = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, v).float(), flat_targets)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def parallel_backend(torch) -> str:
    try:
        info = torch.__config__.parallel_info()
        keep = [ln.strip() for ln in info.splitlines()
                if ln.strip().startswith(("ATen parallel backend", "MKL_NUM_THREADS",
                                          "OMP_NUM_THREADS", "Intel(R) MKL", "MKL-DNN"))]
        return "; ".join(keep)
    except Exception:  # noqa: BLE001
        return ""


def summary(rec: dict) -> str:
    sp, m, mem = rec["spec"], rec["model"], rec["memory"]
    lines = [
        f"torch reference ({rec['engine']}) · {sp['model']} ({m['family']}, {m['params']:,} params) · "
        f"{sp['mode']} · batch {sp['batch']} × seq {sp['seq']} · {sp['dtype']} · "
        f"{sp['threads']} threads · {sp['warmup']} warm-up + {sp['steps']} measured steps",
    ]
    if rec["optimizer_impl"]:
        lines.append(f"AdamW: {rec['optimizer_impl']}")
    lines.append(f"{'phase':<10} {'median':>10} {'mean':>10} {'std':>9} {'min':>10} {'max':>10}  (ms)")
    for n, t in rec["timing"].items():
        std = "-" if t["std_ms"] is None else f"{t['std_ms']:.3g}"
        lines.append(f"{n:<10} {t['median_ms']:>10.2f} {t['mean_ms']:>10.2f} {std:>9} "
                     f"{t['min_ms']:>10.2f} {t['max_ms']:>10.2f}")

    def mib(b):
        return "n/a" if b is None else f"{b / MIB:.1f} MiB"

    lines += [
        f"parameters       {mib(mem['param_bytes'])} ({m['params']:,} × {mem['param_bytes'] // max(m['params'], 1)} B)",
        f"library baseline {mib(mem['library_baseline_rss_bytes'])} (VmRSS right after import torch)",
        f"RSS peak         {mib(mem['rss_peak_bytes'])} (VmHWM); peak − baseline "
        f"{mib(mem['rss_peak_minus_baseline_bytes'])}",
        f"RSS at end       {mib(mem['rss_end_bytes'])}",
    ]
    if mem["optimizer_import_rss_bytes"] is not None:
        lines.append(f"of which library code loaded by constructing torch.optim.AdamW: "
                     f"{mib(mem['optimizer_import_rss_bytes'])} (torch._dynamo, sympy, ... imports)")
    tp = rec["throughput"]
    if tp["tokens_per_s"]:
        lines.append(f"Throughput (median step): {tp['tokens_per_s']:.1f} tokens/s, "
                     f"{tp['samples_per_s']:.2f} sequences/s")
    if rec["loss"]:
        lines.append(f"Loss: {rec['loss'][0]:.4f} at the first step → {rec['loss'][-1]:.4f} after "
                     f"{len(rec['loss'])} steps (same batch every step)")
    for w in rec["warnings"]:
        lines.append(f"  ! {w}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    # Validate the model before the (slow) torch import so that typos fail fast.
    try:
        resolve_model(args.model, args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    interpreter_rss = proc_status_bytes("VmRSS")
    t0 = time.perf_counter()
    try:
        import torch  # noqa: PLC0415 - the import itself is measured
    except ImportError as e:
        print(f"error: PyTorch is not installed ({e}); install it with: pip install torch transformers",
              file=sys.stderr)
        return 3
    import_seconds = time.perf_counter() - t0
    baseline_rss = proc_status_bytes("VmRSS")
    baseline_hwm = proc_status_bytes("VmHWM")
    try:
        rec = run(args, interpreter_rss, baseline_rss, baseline_hwm, import_seconds, torch)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(rec, indent=2)
    if args.json and args.json != "-":
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.json)
    else:
        print(text)
    if not args.quiet:
        print(summary(rec), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
