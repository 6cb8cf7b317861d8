//! `--nproc N --parallel PLAN` (estimate, bench, sweep, fit, on `--engine torch`): every flag
//! combination memscope cannot honour is refused naming the flag, before any Python starts. (The
//! prediction, traced under PyTorch's fake process group, and the runs under torchrun are
//! checked in `python/tests/test_parallel.py`.)

mod support;
use support::fails_with;

const TORCH: &[&str] = &["estimate", "--engine", "torch", "--model", "tiny-gpt2"];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    TORCH.iter().chain(extra).copied().collect()
}

#[test]
fn a_job_needs_both_its_ranks_and_its_plan() {
    fails_with(
        &with(&["--nproc", "4"]),
        &["--nproc 4: say how the ranks share the model: --parallel ddp, fsdp, tp:T, fsdp+tp:T or pp:P"],
    );
    fails_with(
        &with(&["--parallel", "fsdp"]),
        &["--parallel fsdp: give the job's number of ranks with --nproc N"],
    );
    fails_with(
        &with(&["--parallel", "ddp", "--nproc", "0"]),
        &["--nproc 0: a job has at least 1 rank"],
    );
    // A bound, said before a trace that would run for many minutes without a word.
    for plan in ["fsdp", "fsdp+tp:2"] {
        fails_with(
            &with(&["--parallel", plan, "--nproc", "100000"]),
            &["--nproc 100000: at most 16384 ranks"],
        );
    }
}

#[test]
fn plans_and_degrees_that_cannot_run_are_named() {
    fails_with(
        &with(&["--parallel", "tp:2", "--nproc", "4"]),
        &["--parallel tp:2: tensor parallelism alone puts every rank in one group; use --nproc 2, or --parallel fsdp+tp:2 to shard 4 ranks as groups of 2"],
    );
    fails_with(
        &with(&["--parallel", "fsdp+tp:3", "--nproc", "4"]),
        &["--parallel fsdp+tp:3: --nproc 4 ranks do not split into groups of 3"],
    );
    fails_with(
        &with(&["--parallel", "tp:two", "--nproc", "2"]),
        &["--parallel tp:two: the degree after ':' is a whole number of ranks"],
    );
    fails_with(
        &with(&["--parallel", "zero3", "--nproc", "2"]),
        &["--parallel zero3: use ddp, fsdp, tp:T (tensor parallelism over T ranks), fsdp+tp:T (FSDP2 over groups of T tensor-parallel ranks) or pp:P"],
    );
}

#[test]
fn a_pipeline_that_cannot_run_is_named_by_its_flag() {
    // tiny-gpt2: 4 blocks; batch 8 unless said.
    let pp = |extra: &[&'static str]| {
        let mut a = with(&["--batch", "8", "--seq", "64"]);
        a.extend_from_slice(extra);
        a
    };
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "4"]),
        &[
            "--parallel pp:2: the pipeline's 2 ranks are the whole job",
            "use --nproc 2",
        ],
    );
    fails_with(
        &pp(&["--parallel", "pp:8", "--nproc", "8"]),
        &["--parallel pp:8: 8 stages (8 ranks × 1 a rank) for 4 blocks"],
    );
    fails_with(
        &pp(&[
            "--parallel",
            "pp:2",
            "--nproc",
            "2",
            "--pp-schedule",
            "interleaved-1f1b:4",
            "--micro-batches",
            "8",
        ]),
        &["--parallel pp:2: 8 stages (2 ranks × 4 a rank) for 4 blocks"],
    );
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "2", "--micro-batches", "3"]),
        &[
            "--micro-batches 3: the batch of 8 splits into micro-batches of equal size",
            "divides --batch 8",
        ],
    );
    fails_with(
        &pp(&[
            "--parallel",
            "pp:2",
            "--nproc",
            "2",
            "--pp-schedule",
            "zero-bubble",
        ]),
        &["--pp-schedule zero-bubble: use gpipe, 1f1b, interleaved-1f1b[:V], interleaved-zero-bubble[:V]"],
    );
    fails_with(
        &pp(&[
            "--parallel",
            "pp:2",
            "--nproc",
            "2",
            "--pp-schedule",
            "interleaved-1f1b:1",
        ]),
        &["--pp-schedule interleaved-1f1b:1: use gpipe, 1f1b, interleaved-1f1b[:V], interleaved-zero-bubble[:V] (V ≥ 2"],
    );
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "2", "--grad-accum", "2"]),
        &["--grad-accum 2: a pipeline's schedule accumulates over its own micro-batches; give them with --micro-batches M"],
    );
    fails_with(
        &pp(&["--pp-schedule", "gpipe"]),
        &["--pp-schedule gpipe: a schedule runs a pipeline-parallel job; add --nproc P --parallel pp:P"],
    );
    fails_with(
        &pp(&["--micro-batches", "2", "--parallel", "fsdp", "--nproc", "2"]),
        &["--micro-batches 2: micro-batches are a pipeline's; add --nproc P --parallel pp:P (for gradient accumulation use --grad-accum)"],
    );
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "2", "--pp-split", "3,1,1"]),
        &["--pp-split 3,1,1: 3 stages given; the job has 2 (2 ranks × 1 a rank): give one number a stage"],
    );
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "2", "--pp-split", "2,1"]),
        &["--pp-split 2,1: the stages hold 3 blocks; tiny-gpt2 has 4: give numbers that sum to 4"],
    );
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "2", "--pp-split", "4,0"]),
        &["--pp-split 4,0: give the blocks of each stage in order as whole numbers of at least 1"],
    );
    fails_with(
        &pp(&["--parallel", "pp:2", "--nproc", "2", "--micro-batches", "2,x"]),
        &["--micro-batches 2,x: give a whole number of micro-batches, or a comma list of them to `estimate`, `fit` or `sweep` (4,8,16)"],
    );
    let mut bench = pp(&[
        "--parallel",
        "pp:2",
        "--nproc",
        "2",
        "--micro-batches",
        "2,4",
    ]);
    bench[0] = "bench";
    fails_with(
        &bench,
        &["--micro-batches 2,4: a list sets a pipeline's micro-batch counts side by side in `estimate --engine torch --parallel pp:P`, `fit` and `sweep`; give one count here"],
    );
    let mut sweep = pp(&[
        "--parallel",
        "ddp",
        "--nproc",
        "2",
        "--micro-batches",
        "2,4",
    ]);
    sweep[0] = "sweep";
    fails_with(
        &sweep,
        &["--micro-batches 2,4: micro-batch counts are a pipeline's; add a pipeline plan (--nproc P --parallel pp:P, or pp:P in a list of plans)"],
    );
    fails_with(
        &pp(&["--pp-split", "3,1"]),
        &["--pp-split 3,1: a split is a pipeline's stages; add --nproc P --parallel pp:P"],
    );
    fails_with(
        &["estimate", "--model", "tiny-gpt2", "--pp-split", "3,1"],
        &["--pp-split 3,1: it is a PyTorch feature; add --engine torch"],
    );
    fails_with(
        &["estimate", "--model", "tiny-gpt2", "--micro-batches", "2"],
        &["--micro-batches 2: a pipeline's micro-batches are PyTorch's; add --engine torch"],
    );
}

#[test]
fn interleaved_rounds_must_divide_the_micro_batches() {
    // 2 ranks, 5 micro-batches: PyTorch makes max(1, 5 / 2) = 2 rounds, which 5 does not fill.
    let mut uneven = with(&[
        "--batch",
        "10",
        "--seq",
        "64",
        "--nproc",
        "2",
        "--parallel",
        "pp:2",
    ]);
    uneven.extend_from_slice(&["--pp-schedule", "interleaved-1f1b", "--micro-batches", "5"]);
    fails_with(
        &uneven,
        &["--micro-batches 5: PyTorch's interleaved 1F1B runs its micro-batches in 2 equal rounds"],
    );
    let last = uneven.len() - 3;
    uneven[last] = "interleaved-zero-bubble";
    fails_with(
        &uneven,
        &["--micro-batches 5: PyTorch's interleaved zero-bubble schedule runs its micro-batches in 2 equal rounds"],
    );
    // PyTorch's selective checkpointing allows one backward over a region; zero-bubble runs two.
    let mut selective = uneven.clone();
    selective[last] = "zbv-zero-bubble";
    selective.extend_from_slice(&["--checkpoint", "--checkpoint-policy", "ops"]);
    fails_with(
        &selective,
        &["--pp-schedule zbv-zero-bubble: a zero-bubble schedule runs each backward in two halves, and PyTorch's selective checkpointing (--checkpoint-policy ops) allows one backward"],
    );
    // ZBV holds exactly two stages a rank.
    uneven[last] = "zbv-zero-bubble:3";
    fails_with(
        &uneven,
        &["--pp-schedule zbv-zero-bubble:3: use gpipe, 1f1b, interleaved-1f1b[:V], interleaved-zero-bubble[:V] (V ≥ 2 stages a rank, 2 if not given) or zbv-zero-bubble (2 stages a rank)"],
    );
}

#[test]
fn a_tensor_parallel_degree_must_divide_the_heads() {
    // tiny-llama: 4 attention heads, 2 key/value heads (grouped-query attention).
    fails_with(
        &[
            "estimate", "--engine", "torch", "--model", "tiny-llama", "--nproc", "4", "--parallel",
            "tp:4",
        ],
        &["--parallel tp:4: tiny-llama has 4 attention heads and 2 key/value heads, and a tensor-parallel rank holds whole heads; use a degree that divides both (1, 2)"],
    );
    fails_with(
        &[
            "estimate",
            "--engine",
            "torch",
            "--model",
            "cs336-small",
            "--nproc",
            "10",
            "--parallel",
            "fsdp+tp:5",
        ],
        &["--parallel fsdp+tp:5: cs336-small has 12 attention heads and 12 key/value heads"],
    );
}

#[test]
fn a_parallel_job_is_a_torch_training_job() {
    fails_with(
        &[
            "estimate",
            "--model",
            "tiny-gpt2",
            "--parallel",
            "ddp",
            "--nproc",
            "2",
        ],
        &["--parallel ddp: a data-parallel job runs on PyTorch; add --engine torch"],
    );
    fails_with(
        &with(&["--parallel", "fsdp", "--nproc", "2", "--mode", "infer"]),
        &["--parallel fsdp: a data-parallel job trains; use --mode train"],
    );
}

#[test]
fn commands_of_one_process_refuse_a_job() {
    for cmd in ["leak", "roofline", "profile"] {
        fails_with(
            &[cmd, "--engine", "torch", "--model", "tiny-gpt2", "--parallel", "ddp", "--nproc", "2"],
            &[&format!("--parallel ddp: {cmd} runs one process; a data-parallel job runs under bench, sweep, fit or estimate")],
        );
    }
    fails_with(
        &[
            "optimize",
            "--engine",
            "torch",
            "--model",
            "tiny-gpt2",
            "--nproc",
            "2",
        ],
        &["--nproc 2: optimize runs one process"],
    );
    fails_with(
        &[
            "bench",
            "--model",
            "tiny-gpt2",
            "--parallel",
            "fsdp",
            "--nproc",
            "2",
        ],
        &["--parallel fsdp: a data-parallel job runs on PyTorch; add --engine torch"],
    );
    fails_with(
        &[
            "bench",
            "--engine",
            "torch",
            "--model",
            "tiny-gpt2",
            "--parallel",
            "ddp",
            "--nproc",
            "2",
            "--mode",
            "infer",
        ],
        &["--parallel ddp: a data-parallel job trains; use --mode train"],
    );
}

#[test]
fn a_budget_below_the_cuda_context_is_refused_by_flag() {
    fails_with(
        &with(&[
            "--device",
            "cuda",
            "--parallel",
            "fsdp",
            "--nproc",
            "8",
            "--fits",
            "500MiB",
        ]),
        &["--fits 500 MiB: smaller than the CUDA context alone (619 MiB after CUDA's set-up"],
    );
}

#[test]
fn a_link_is_two_numbers_for_a_parallel_job() {
    fails_with(
        &with(&["--parallel", "ddp", "--nproc", "2", "--link", "fast"]),
        &["--link fast: give the link's bandwidth in GB/s and latency in µs, as 100,5"],
    );
    fails_with(
        &with(&["--link", "100,5"]),
        &["--link 100,5: the link carries a data-parallel job's collectives; add --nproc N --parallel ddp|fsdp|tp:T|fsdp+tp:T"],
    );
}

#[test]
fn on_slurm_only_a_cpu_job_s_ranks_hold_memory_limit_themselves() {
    // A CPU job's ranks hold --memory-limit themselves (the counting allocator) on Slurm too; a
    // CUDA job on Slurm takes its budget from --mem and --gres, as any task does.
    fails_with(
        &[
            "sweep",
            "--engine",
            "torch",
            "--device",
            "cuda",
            "--model",
            "tiny-gpt2",
            "--nproc",
            "2",
            "--parallel",
            "ddp",
            "--slurm",
            "--work-dir",
            "w",
            "--memory-limit",
            "1GiB",
        ],
        &["--memory-limit is for local sweeps; with --slurm give each task --mem"],
    );
}

#[test]
fn a_job_across_nodes_is_a_slurm_sweep_whose_nodes_split_its_ranks() {
    let sweep = |extra: &[&'static str]| -> Vec<&'static str> {
        [
            "sweep",
            "--engine",
            "torch",
            "--model",
            "tiny-gpt2",
            "--yes",
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect()
    };
    let slurm = ["--slurm", "--work-dir", "w", "--nodes"];
    fails_with(
        &sweep(&["--nproc", "2", "--parallel", "ddp", "--nodes", "2"]),
        &["--nodes", "--slurm"],
    );
    fails_with(
        &sweep(&[&slurm[..], &["2"]].concat()),
        &["--nodes 2: a job across nodes is a data-parallel job; give it --engine torch --nproc N --parallel PLAN"],
    );
    fails_with(
        &sweep(&[&slurm[..], &["2", "--nproc", "3", "--parallel", "ddp"]].concat()),
        &["--nodes 2: --nproc 3 ranks do not split evenly over 2 nodes; use a --nproc that 2 divides"],
    );
    fails_with(
        &sweep(&[&slurm[..], &["0", "--nproc", "2", "--parallel", "ddp"]].concat()),
        &["--nodes 0: a job runs on at least 1 node"],
    );
}

/// `peaks --engine torch` and `extra`.
fn torch_peaks(extra: &[&'static str]) -> Vec<&'static str> {
    ["peaks", "--engine", "torch"]
        .iter()
        .chain(extra)
        .copied()
        .collect()
}

#[test]
fn the_link_is_measured_between_torch_ranks_only() {
    fails_with(
        &["peaks", "--collectives"],
        &["--collectives: the link is measured with PyTorch's collectives under torchrun; add --engine torch"],
    );
    fails_with(
        &torch_peaks(&["--collectives", "--nproc", "1"]),
        &["--nproc 1: a link needs two ranks at least; use --nproc 2"],
    );
    fails_with(
        &torch_peaks(&["--collectives", "--nproc", "2", "--parallel", "ddp"]),
        &["--parallel ddp: peaks --collectives times one all-reduce between --nproc ranks"],
    );
    fails_with(
        &torch_peaks(&["--nproc", "2"]),
        &["--nproc 2: peaks times one process; --nproc sets the ranks of `peaks --engine torch --collectives`"],
    );
    fails_with(
        &torch_peaks(&["--collectives", "--batch", "8"]),
        &["the argument '--collectives' cannot be used with '--batch <BATCH>'"],
    );
    fails_with(
        &torch_peaks(&["--collectives", "--nproc", "4096"]),
        &["--nproc 4096: this machine lets memscope use"],
    );
}

#[test]
fn compile_is_refused_for_a_job_it_would_run_without_its_plan() {
    // The engine compiles one process's model: a DDP job compiled so ran without DDP.
    for cmd in ["estimate", "bench"] {
        fails_with(
            &[
                cmd,
                "--engine",
                "torch",
                "--model",
                "tiny-gpt2",
                "--nproc",
                "2",
                "--parallel",
                "ddp",
                "--fusion",
                "compile",
            ],
            &[
                "--fusion compile with --parallel ddp",
                "drop --fusion compile",
            ],
        );
    }
}

#[test]
fn a_comparison_of_plans_is_one_dtype_on_pytorch_without_a_link() {
    fails_with(
        &with(&[
            "--nproc",
            "2",
            "--parallel",
            "fsdp,pp:2",
            "--dtype",
            "f32,bf16",
        ]),
        &["--dtype f32,bf16: plans are compared in one dtype; give one with --parallel fsdp,pp:2"],
    );
    fails_with(
        &with(&["--nproc", "2", "--parallel", "fsdp,pp:2", "--link", "100,5"]),
        &["--link 100,5: a comparison of plans judges memory"],
    );
    fails_with(
        &[
            "estimate",
            "--model",
            "tiny-gpt2",
            "--nproc",
            "2",
            "--parallel",
            "fsdp,pp:2",
        ],
        &["--parallel fsdp,pp:2: a job's plans are compared on PyTorch; add --engine torch"],
    );
    fails_with(
        &with(&["--nproc", "2", "--parallel", "fsdp,,pp:2"]),
        &["--parallel fsdp,,pp:2: an empty plan in the list"],
    );
}

#[test]
fn fit_over_plans_and_fit_s_prediction_need_the_torch_engine() {
    let fit = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut a = vec!["fit", "--model", "tiny-gpt2", "--memory-limit", "1GiB"];
        a.extend_from_slice(extra);
        a
    };
    fails_with(
        &fit(&["--nproc", "2", "--parallel", "ddp,fsdp"]),
        &["--parallel ddp,fsdp: a job's plans run on PyTorch under torchrun; add --engine torch"],
    );
    fails_with(
        &fit(&["--predict"]),
        &["--predict: the torch estimator's trace predicts each size; add --engine torch"],
    );
    fails_with(
        &fit(&["--engine", "torch", "--predict", "--timeout", "30s"]),
        &["--timeout 30s: --predict runs nothing"],
    );
}
