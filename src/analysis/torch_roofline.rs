//! `roofline` and `profile` on the torch engine: the ops the op timer measured
//! (`torch::optime`), each costed by `aten_cost` (the one table of ATen formulas, with
//! `op_cost.rs`'s conventions) and named as memscope's own engine names its modules (`layer 3
//! attention`, `embedding`, `lm head + loss`), so the roofline and profile tables, files and
//! charts are the candle engine's. Pure.

use super::aten_cost::{cost, Kind};
use super::op_cost::{OpCost, EMBEDDING, HEAD, OUTSIDE};
use super::roofline::MeasuredOp;
use crate::record::roofline::Roofs;
use crate::torch::optime::TimedOp;
use crate::torch::peaks::TorchPeaks;

/// Segments a transformers model names its blocks' list with (`transformer.h.3`,
/// `model.layers.3`, `bert.encoder.layer.3`).
const BLOCK_LISTS: &[&str] = &["h", "layers", "layer", "blocks"];

/// memscope's name for the module at `path` in a transformers model, in `phase`.
pub fn module_name(path: &str, phase: &str) -> String {
    if phase == "optimizer" || path.is_empty() {
        return OUTSIDE.into();
    }
    if path == "(model)" {
        return HEAD.into(); // the model's own forward: the loss
    }
    let parts: Vec<&str> = path.split('.').collect();
    let block = parts
        .windows(2)
        .position(|w| BLOCK_LISTS.contains(&w[0]) && w[1].bytes().all(|b| b.is_ascii_digit()));
    if let Some(i) = block {
        let sub = parts.get(i + 2).map(|s| s.to_ascii_lowercase());
        let part = match sub.as_deref() {
            None => "block".to_string(),
            // Before attention: `post_attention_layernorm` is a norm.
            Some(s) if s.contains("norm") || s.starts_with("ln") => "norms".into(),
            Some(s) if s.contains("attn") || s.contains("attention") => "attention".into(),
            Some(s)
                if s.contains("mlp")
                    || s.contains("intermediate")
                    || s.contains("feed_forward")
                    || s == "output" =>
            {
                "mlp".into()
            }
            Some(s) => s.to_string(),
        };
        return format!("layer {} {part}", parts[i + 1]);
    }
    let lower = path.to_ascii_lowercase();
    if lower.contains("emb") || parts.iter().any(|p| *p == "wte" || *p == "wpe") {
        EMBEDDING.into()
    } else if lower.contains("lm_head")
        || lower.contains("norm")
        || lower.contains("ln_f")
        || lower.starts_with("cls")
    {
        HEAD.into()
    } else {
        // The base model's own forward, before its blocks: position adds and masks.
        EMBEDDING.into()
    }
}

/// A norm layer's module: its own name says so (`ln_1`, `input_layernorm`, `norm`).
fn is_norm_module(path: &str) -> bool {
    let last = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    last.contains("norm") || last.starts_with("ln")
}

/// The pass an op of `phase` belongs to in the tables.
fn pass(phase: &str) -> &'static str {
    if phase == "backward" {
        "backward"
    } else {
        "forward"
    }
}

/// The costs and measured times of the ops of `phases`, per run of the section (`runs` runs of
/// it in one step: a generation's decode steps), modules named as memscope's own.
pub fn section(ops: &[TimedOp], phases: &[&str], runs: f64) -> (Vec<OpCost>, Vec<MeasuredOp>) {
    section_named(ops, phases, runs, &module_name)
}

/// [`section`] with modules named by `name(path, phase)`.
pub fn section_named(
    ops: &[TimedOp],
    phases: &[&str],
    runs: f64,
    name: &dyn Fn(&str, &str) -> String,
) -> (Vec<OpCost>, Vec<MeasuredOp>) {
    let mut costs: Vec<OpCost> = Vec::new();
    let mut measured: Vec<MeasuredOp> = Vec::new();
    for t in ops.iter().filter(|t| phases.contains(&t.op.phase.as_str())) {
        let c = cost(&t.op);
        let module = name(&t.module, &t.op.phase);
        // A norm written as elementwise ops (transformers' RMSNorm: pow, mean, rsqrt, mul) is
        // the norm's work.
        let kind = match c.kind {
            Kind::Elementwise if is_norm_module(&t.module) => Kind::Norm,
            k => k,
        };
        let (kind, pass) = (kind.name(), pass(&t.op.phase));
        let k = t.op.calls / runs;
        match costs
            .iter_mut()
            .find(|o| o.module == module && o.kind == kind && o.pass == pass)
        {
            Some(o) => {
                o.flops += c.flops * k;
                o.bytes += c.bytes * k;
            }
            None => costs.push(OpCost {
                module: module.clone(),
                kind,
                pass,
                flops: c.flops * k,
                bytes: c.bytes * k,
            }),
        }
        let ms = 1e3 * t.seconds / runs;
        match measured
            .iter_mut()
            .find(|m| m.module == module && m.kind == kind && m.pass == pass)
        {
            Some(m) => m.ms += ms,
            None => measured.push(MeasuredOp {
                module,
                kind: kind.to_string(),
                pass: pass.to_string(),
                ms,
            }),
        }
    }
    (costs, measured)
}

/// The roofs `peaks --engine torch` measured: the best square product of `dtype` (f32 where it
/// timed none of it) and the better of copy and triad.
pub fn roofs(p: &TorchPeaks, dtype: &str) -> Roofs {
    let best = |d: &str| {
        p.matmul
            .iter()
            .filter(|r| r.name == d)
            .map(|r| r.gflops.best)
            .fold(0.0, f64::max)
    };
    let matmul = best(dtype);
    Roofs {
        matmul_gflops: if matmul > 0.0 { matmul } else { best("f32") },
        bandwidth_gbs: p.triad_gbs.best.max(p.copy_gbs.best),
        copy_gbs: p.copy_gbs.best,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::estimate::TracedOp;

    #[test]
    fn modules_are_named_as_memscope_names_its_own() {
        let n = |p: &str| module_name(p, "forward");
        assert_eq!(n("transformer.h.3.attn.c_attn"), "layer 3 attention");
        assert_eq!(n("transformer.h.11.mlp.act"), "layer 11 mlp");
        assert_eq!(n("transformer.h.0.ln_2"), "layer 0 norms");
        assert_eq!(n("transformer.h.0"), "layer 0 block");
        assert_eq!(n("model.layers.2.self_attn.q_proj"), "layer 2 attention");
        assert_eq!(
            n("model.layers.2.post_attention_layernorm"),
            "layer 2 norms"
        );
        assert_eq!(n("model.layers.2.mlp.down_proj"), "layer 2 mlp");
        assert_eq!(n("bert.encoder.layer.5.output.dense"), "layer 5 mlp");
        assert_eq!(n("bert.embeddings.LayerNorm"), EMBEDDING);
        assert_eq!(n("transformer.wte"), EMBEDDING);
        assert_eq!(n("model.rotary_emb"), EMBEDDING);
        assert_eq!(n("transformer"), EMBEDDING);
        assert_eq!(n("transformer.ln_f"), HEAD);
        assert_eq!(n("model.norm"), HEAD);
        assert_eq!(n("lm_head"), HEAD);
        assert_eq!(n("(model)"), HEAD);
        assert_eq!(module_name("", "backward"), OUTSIDE);
        assert_eq!(module_name("lm_head", "optimizer"), OUTSIDE);
    }

    #[test]
    fn a_section_sums_calls_and_time_per_run() {
        let t = |phase: &str, module: &str, secs: f64| TimedOp {
            op: TracedOp {
                phase: phase.into(),
                op: "aten.mm.default".into(),
                inputs: vec![(vec![4, 8], "f32".into()), (vec![8, 2], "f32".into())],
                outputs: vec![(vec![4, 2], "f32".into())],
                flags: vec![],
                calls: 4.0,
            },
            module: module.into(),
            seconds: secs,
        };
        let ops = [
            t("decode", "model.layers.0.mlp.up_proj", 0.004),
            t("decode", "model.layers.0.mlp.down_proj", 0.002),
            t("prefill", "model.layers.0.mlp.up_proj", 1.0),
        ];
        let (costs, measured) = section(&ops, &["decode"], 2.0);
        assert_eq!(costs.len(), 1);
        // Two signatures × 4 calls a step over 2 decode runs: 4 products of 2·4·8·2 FLOPs.
        assert_eq!(costs[0].flops, 4.0 * 2.0 * 4.0 * 8.0 * 2.0);
        assert_eq!(
            (costs[0].module.as_str(), costs[0].kind),
            ("layer 0 mlp", "matmul")
        );
        assert!((measured[0].ms - 3.0).abs() < 1e-9);
        // RMSNorm's elementwise ops are the norm's.
        let mut mul = t("decode", "model.layers.0.input_layernorm", 0.001);
        mul.op.op = "aten.mul.Tensor".into();
        let (costs, _) = section(&[mul], &["decode"], 1.0);
        assert_eq!(
            (costs[0].module.as_str(), costs[0].kind),
            ("layer 0 norms", "norm")
        );
    }
}
