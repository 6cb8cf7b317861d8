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
        &["--nproc 4: say how the ranks share the model: --parallel ddp or --parallel fsdp"],
    );
    fails_with(
        &with(&["--parallel", "fsdp"]),
        &["--parallel fsdp: give the job's number of ranks with --nproc N"],
    );
    fails_with(
        &with(&["--parallel", "ddp", "--nproc", "0"]),
        &["--nproc 0: a job has at least 1 rank"],
    );
}

#[test]
fn plans_that_are_not_predicted_are_named() {
    fails_with(
        &with(&["--parallel", "tp:2", "--nproc", "2"]),
        &["--parallel tp:2: tensor parallelism is not supported yet"],
    );
    fails_with(
        &with(&["--parallel", "fsdp+tp:2", "--nproc", "4"]),
        &["--parallel fsdp+tp:2: tensor parallelism is not supported yet"],
    );
    fails_with(
        &with(&["--parallel", "zero3", "--nproc", "2"]),
        &["--parallel zero3: use ddp or fsdp"],
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
        &["--link 100,5: the link carries a data-parallel job's collectives; add --nproc N --parallel ddp|fsdp"],
    );
}

#[test]
fn a_job_on_slurm_is_refused_until_it_is_built() {
    fails_with(
        &[
            "sweep", "--engine", "torch", "--model", "tiny-gpt2", "--nproc", "2", "--parallel",
            "ddp", "--slurm",
        ],
        &["--nproc 2 with --slurm: a data-parallel job on Slurm (srun and torchrun across nodes) is not supported yet"],
    );
}
