//! Terminal report of `memscope estimate --engine torch`: the allocated peak by category (one
//! column per dtype), the reserved peak on CUDA, and the `--fits` verdict.

use crate::record::torch_estimate::TorchEstimateFile;
use crate::units::{bytes, thousands};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use std::fmt::Write;

const CATEGORIES: [&str; 10] = [
    "parameters",
    "gradients",
    "optimizer_state",
    "gathered_parameters",
    "collective_buffers",
    "activations",
    "kv_cache",
    "temporaries",
    "runtime_buffers",
    "gradient_buckets",
];

pub fn render(f: &TorchEstimateFile) -> String {
    let mut out = String::new();
    let Some(first) = f.by_dtype.values().next() else {
        return out;
    };
    let cuda = first.device.starts_with("cuda");
    let _ = writeln!(
        out,
        "memscope estimate --engine torch: {} {} (batch {}, seq {}) on {}, {} parameters (exact: counted on transformers' model)\n",
        f.model,
        f.mode,
        f.batch,
        f.seq,
        first.device,
        thousands(first.params)
    );
    if let Some(b) = &f.built {
        built_lines(&mut out, b);
    }
    out += &plan_line(f);
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["category (as a run measures it)".to_string()];
    header.extend(f.by_dtype.keys().cloned());
    t.set_header(header);
    for c in CATEGORIES {
        // DDP's buckets, FSDP2's gathered parameters and buffers only where a plan has them.
        if matches!(
            c,
            "gradient_buckets" | "gathered_parameters" | "collective_buffers"
        ) && !f.by_dtype.values().any(|e| e.categories.contains_key(c))
        {
            continue;
        }
        let mut row = vec![c.replace('_', " ")];
        row.extend(
            f.by_dtype
                .values()
                .map(|e| bytes(e.categories.get(c).copied().unwrap_or(0) as f64)),
        );
        t.add_row(row);
    }
    let what = if cuda {
        "allocated peak (CUDA, 512 B blocks)"
    } else {
        "allocated peak (tensor bytes)"
    };
    let mut row = vec![what.to_string()];
    row.extend(
        f.by_dtype
            .values()
            .map(|e| format!("{} ({})", bytes(e.peak_bytes as f64), e.peak_phase)),
    );
    t.add_row(row);
    if cuda {
        let mut row = vec!["reserved peak (caching allocator)".to_string()];
        row.extend(f.by_dtype.values().map(|e| {
            e.reserved_peak_bytes
                .map_or("—".into(), |r| bytes(r as f64))
        }));
        t.add_row(row);
    }
    for i in 1..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{t}");
    let _ = writeln!(
        out,
        "The categories are each one's size as a run's Record measures it (gradients as the last backward ends, the optimizer's state after its step, activations as the last forward ends, the KV cache at its largest): they are not all live at once, so they can sum to more than the peak. The peak holds the parameters, runtime buffers, temporaries and what its phase keeps live ({}).",
        f.by_dtype
            .values()
            .next()
            .map_or("", |e| match e.peak_phase.as_str() {
                "optimizer" => "the optimizer's state and the gradients",
                "prefill" | "decode" => "the KV cache",
                "backward" => "the optimizer's state and the activations not yet freed",
                _ => "the optimizer's state and the activations",
            })
    );
    if f.by_dtype
        .values()
        .any(|e| e.categories.contains_key("gathered_parameters"))
    {
        let _ = writeln!(
            out,
            "Gathered parameters: FSDP2's unsharded copies live at the peak (the root's, gathered from its forward to its backward, and the block that runs), read from FSDP2's own parameters in the trace as a run's recorder reads them; autograd saves them too, counted here and not again as activations. Collective buffers: what FSDP2 gave its all-gathers and reduce-scatters, still alive at the peak (a flat all-gather buffer before its copy-out, the last reduce-scatter's unreduced gradients, which FSDP2 holds until the next one), gradients and gathered parameters left out."
        );
    }
    let _ = writeln!(
        out,
        "How: the workload's first steps traced under PyTorch's FakeTensorMode (every op dispatched as on {}, the same kernels and saved tensors; nothing allocated or computed), {} storages allocated and freed, replayed{}.",
        first.device,
        thousands(first.events as u64),
        if cuda {
            " through the CUDA caching allocator's rules (512 B rounding, 2 MiB small and 20 MiB large segments, best fit, splitting), with cuBLAS's workspace for each thread that runs products (the forward's, and in training autograd's: 32 MiB each from Hopper on and where no GPU was there to ask, 8.125 MiB before; CUBLAS_WORKSPACE_CONFIG sets it) counted as runtime buffers. nvidia-smi shows the reserved bytes plus the CUDA context the driver takes per process (a few hundred MiB, outside PyTorch's figures)"
        } else {
            "; a run's measured heap adds the Python objects and library scratch of the step (a few MiB)"
        }
    );
    if let Some(total) = first.flops.get("total") {
        let phases: Vec<String> = first
            .flops
            .iter()
            .filter(|(k, _)| k.as_str() != "total")
            .map(|(k, v)| format!("{k} {:.2}", *v as f64 / 1e9))
            .collect();
        let _ = writeln!(
            out,
            "FLOPs of one step, from the traced ops: {:.2} GFLOP ({} GFLOP).",
            *total as f64 / 1e9,
            phases.join(", ")
        );
    }
    if first.traced_on != first.device {
        let _ = writeln!(
            out,
            "No GPU is visible here: the trace dispatched to the CPU's kernels ({}) and the sequence was replayed under CUDA's allocator rules. Modules, saved tensors and SDPA's log-sum-exp are the same; CUDA's autocast casts a few more ops than the CPU's, so bf16 autocast estimates are less exact than f32 ones.",
            first.traced_on
        );
    }
    out += &super::torch_pipeline::pipeline_ranks(f);
    out += &ddp_rebuild(f);
    out += &outside_allocator(f);
    out += &host_lines(f);
    out += &fits_lines(f);
    out
}

/// `--fits`: each dtype's verdict on the device total (a pipeline's fullest rank, named).
fn fits_lines(f: &TorchEstimateFile) -> String {
    let mut out = String::new();
    if let Some(b) = f.budget_bytes {
        let _ = writeln!(out);
        for (dtype, e) in &f.by_dtype {
            let need = e.device_total_bytes();
            let verdict = match &e.out_of_memory {
                Some(why) => format!("does not fit: {why}"),
                None if need <= b => format!("fits: {} of {}", bytes(need as f64), bytes(b as f64)),
                None => format!("does not fit: {} > {}", bytes(need as f64), bytes(b as f64)),
            };
            // A pipeline's figures are its fullest rank's: named.
            let whose = e
                .fullest_rank()
                .map_or(String::new(), |r| format!(", rank {r}, the fullest"));
            let _ = writeln!(
                out,
                "--fits {} ({dtype}{whose}): {verdict}",
                bytes(b as f64)
            );
        }
    }
    out
}

/// `--fsdp-offload` on CUDA: each dtype's host memory beside the device's figures; empty
/// without offload.
fn host_lines(f: &TorchEstimateFile) -> String {
    let mut out = String::new();
    for (dtype, e) in &f.by_dtype {
        let Some(h) = &e.host else { continue };
        let b = |v: u64| bytes(v as f64);
        // Every rank on a node holds its own: the job's ranks, up to a node of 8 GPUs.
        let on_node = f.parallel.map_or(1, |p| p.world.min(8));
        let _ = writeln!(
            out,
            "\nHost memory under FSDP2's CPU offload ({dtype}): {} at most a rank ({on_node} ranks on one node: {}) — the parameters' shards {} and the gradients' copies {} pinned ({} pinned held: PyTorch's pinned host allocator rounds each block up to a power of two and keeps it), the optimizer's state and its step {} pageable. The device's figures above leave these out. The optimizer steps on the host's cores: a predicted step time times it on the device's roofs.",
            b(h.peak_bytes),
            b(h.peak_bytes * on_node as u64),
            b(h.parameters_bytes),
            b(h.gradients_bytes),
            b(h.pinned_bytes),
            b(h.pageable_peak_bytes)
        );
    }
    out
}

/// The job's plan in one paragraph (`--nproc --parallel`); empty for one process.
fn plan_line(f: &TorchEstimateFile) -> String {
    use crate::spec::ParallelPlan;
    let Some(p) = &f.parallel else {
        return String::new();
    };
    if let (ParallelPlan::Pp, Some(pipe)) = (p.plan, &f.pipeline) {
        return format!(
            "A pipeline of {} ranks ({} stages, {} a rank{}), PyTorch's {} schedule over {} micro-batches of {}; each rank traced as itself under a fake process group. The figures below are the fullest rank's, every rank's in the table after them. Activations and gradients cross between stages point to point: their buffers are counted, and their time over the link where one is known.\n\n",
            p.world,
            pipe.stages(p.world),
            pipe.stages_per_rank,
            pipe.split.as_ref().map_or(String::new(), |s| format!(
                "; blocks a stage {} (--pp-split)",
                s.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ")
            )),
            pipe.schedule_flag(),
            pipe.micro_batches,
            f.batch / pipe.micro_batches.max(1)
        );
    }
    let how = match p.plan {
        ParallelPlan::Ddp => "DistributedDataParallel: every rank holds the whole model, its gradient buckets and its optimizer state",
        ParallelPlan::Fsdp => "FSDP2, fully_shard on every block and the root: parameters, gradients and optimizer state split by rows; rank 0 holds the largest shards",
        ParallelPlan::Tp => "tensor parallelism, transformers' plan for the model: attention and MLP projections split over the ranks, embeddings, norms and the LM head whole on every rank, every rank on the same batch",
        ParallelPlan::FsdpTp => "FSDP2 over groups of tensor-parallel ranks: the projections split within a group, then everything sharded by rows across the groups",
        ParallelPlan::Pp => "a pipeline",
    };
    format!(
        "One rank of {} ({how}), traced under a fake process group; each rank runs batch {}. Collectives move no bytes in the trace: their buffers are counted, their time is not.\n\n",
        p.world, f.batch
    )
}

/// DDP over NCCL's second step, while NCCL may still hold the first step's buckets; empty for
/// any other job.
fn ddp_rebuild(f: &TorchEstimateFile) -> String {
    let mut out = String::new();
    for (dtype, e) in &f.by_dtype {
        let Some(r) = e.ddp_rebuild else { continue };
        let _ = writeln!(
            out,
            "\nDDP's second step over NCCL ({dtype}): DDP rebuilds its gradient buckets then, while NCCL may still hold the first step's ({}) until its watchdog, polling every 100 ms, has seen their all-reduce end and a later collective lets them go. With steps shorter than that (measured with 35 ms steps on one H200) that step peaks at {} allocated, {} reserved; --fits judges this larger figure. Steps over 100 ms, or a collective after a pause, free them first.",
            bytes(r.bucket_bytes as f64),
            bytes(r.peak_bytes as f64),
            bytes(r.reserved_peak_bytes as f64)
        );
    }
    out
}

/// A CUDA rank's memory outside PyTorch's allocator, each line with its source, and the device
/// total per dtype; empty when the estimate has none.
fn outside_allocator(f: &TorchEstimateFile) -> String {
    let mut out = String::new();
    let Some(first) = f.by_dtype.values().next() else {
        return out;
    };
    if first.outside_allocator.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nOutside PyTorch's allocator (no allocated or reserved figure holds these; the card must hold them beside the reserved peak):"
    );
    let mut sources: Vec<&str> = Vec::new();
    for l in &first.outside_allocator {
        let _ = writeln!(
            out,
            "  {:<28} {:>10}  {}",
            l.what,
            bytes(l.bytes as f64),
            l.note
        );
        if !sources.contains(&l.source.as_str()) {
            sources.push(&l.source);
        }
    }
    let _ = writeln!(out, "  Source: {}", sources.join("; "));
    for (dtype, e) in &f.by_dtype {
        let _ = writeln!(
            out,
            "Device total ({dtype}): {} (reserved peak {} + {} outside the allocator)",
            bytes(e.device_total_bytes() as f64),
            bytes(e.judged_reserved_bytes() as f64),
            bytes((e.device_total_bytes() - e.judged_reserved_bytes()) as f64)
        );
    }
    out
}

/// Whether every dtype fits the budget (exit code 1 otherwise).
pub fn all_fit(f: &TorchEstimateFile) -> bool {
    match f.budget_bytes {
        None => true,
        Some(b) => f
            .by_dtype
            .values()
            .all(|e| e.out_of_memory.is_none() && e.device_total_bytes() <= b),
    }
}

/// A `--parallel` estimate's collectives: bytes per step by kind (exact, from the trace), and
/// with `--link` their time by the ring and tree formulas, set beside the predicted compute
/// step with and without overlap. Sets `e.communication_ms`.
pub fn communication(
    e: &mut crate::record::torch_estimate::TorchEstimate,
    p: crate::spec::Parallel,
    link: Option<crate::analysis::collective_time::Links>,
    link_text: Option<&str>,
    cores_full: bool,
) -> String {
    use crate::analysis::collective_time::step_times;
    if e.collectives.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nCollectives of one rank in one step ({} over {} ranks, from the trace; bytes are each collective's whole tensor, a rank sends (N−1)/N of it in a ring, twice for an all-reduce):",
        p.flag(),
        p.world
    );
    for (kind, c) in &e.collectives {
        let group = c.group_or(p.world);
        let n = group as f64;
        let factor = if kind == "all_reduce" { 2.0 } else { 1.0 } * (n - 1.0) / n;
        out += &format!(
            "\n  {kind:<15} {:>5} calls  {:>11}  over {group} ranks (sent per rank {})",
            c.calls,
            bytes(c.bytes as f64),
            bytes(c.bytes as f64 * factor)
        );
    }
    let Some(link) = link else {
        out += "\nTheir time: give the link between ranks with --link GB/s,µs (100,5 for 100 GB/s and 5 µs), or measure this machine's once with `memscope peaks --engine torch --collectives`.\n";
        return out;
    };
    let times = step_times(&e.collectives, p.world, &link);
    let total_ms: f64 = times.iter().map(|t| t.seconds * 1e3).sum();
    let each: Vec<String> = times
        .iter()
        .map(|t| format!("{} {:.3} ms ({})", t.kind, t.seconds * 1e3, t.formula))
        .collect();
    out += &format!(
        "\nTheir time over {}: {:.3} ms a step ({}).",
        link_text.unwrap_or(""),
        total_ms,
        each.join(", ")
    );
    let mut exposed_ms = None;
    if let Some(step) = e.predicted_ms.get("step").copied() {
        let phase_s = e
            .predicted_ms
            .iter()
            .map(|(k, v)| (k.clone(), v / 1e3))
            .collect();
        let (exposed, placed) =
            crate::analysis::overlap::exposed(p.plan, &e.collectives, &times, &phase_s, cores_full);
        let exposed = exposed * 1e3;
        out += &format!(
            " Placed beside the predicted compute ({}): {exposed:.2} ms of it exposed, a predicted step of {:.2} ms (bounds: {:.2} ms if it all hid behind compute, {:.2} ms if none did).",
            placed.join("; "),
            step + exposed,
            step.max(total_ms),
            step + total_ms,
        );
        exposed_ms = Some(exposed);
    }
    out += "\n";
    e.communication_ms = times
        .iter()
        .map(|t| (t.kind.clone(), t.seconds * 1e3))
        .chain([("total".to_string(), total_ms)])
        .chain(exposed_ms.map(|x| ("exposed".to_string(), x)))
        .collect();
    e.link = link_text.map(str::to_string);
    out
}

/// What transformers built from a config.json, and a mixture of experts' routing stated.
fn built_lines(out: &mut String, b: &crate::model::config::BuiltModel) {
    let _ = writeln!(
        out,
        "Built by transformers from the config.json: {} ({} layers, width {}, {} heads of {} with {} key/value heads, vocabulary {}).",
        b.class, b.n_layers, b.d_model, b.n_heads, b.head_dim, b.n_kv_heads, thousands(b.vocab_size as u64)
    );
    if let Some(x) = &b.experts {
        let _ = writeln!(
            out,
            "Mixture of experts: {} experts in each routed layer, each token sent to {}. transformers' {} experts run the tokens × {} rows as one grouped product, so no buffer and no FLOP count here depends on the routing: the figures hold for balanced and skewed routing alike (skew only lengthens the busiest expert's share of the product's time).",
            x.per_layer, x.per_token, x.implementation, x.per_token
        );
    }
    out.push('\n');
}
