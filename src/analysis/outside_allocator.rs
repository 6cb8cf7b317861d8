//! Device memory a CUDA rank holds outside PyTorch's caching allocator, which no PyTorch figure
//! (allocated, reserved) includes: the CUDA context the driver makes for the process, the kernels
//! loaded as they are first used, and NCCL's buffers once the process group has run a
//! collective. memscope cannot trace them; these are measured figures, each with its source
//! (`scripts/measure_parallel.py`: cudaMemGetInfo's used bytes less PyTorch's reserved bytes;
//! docs/parallel.md), added to a `--parallel` estimate on CUDA as lines of their own.

pub use crate::record::torch_estimate::OutsideLine;

const MIB: f64 = 1048576.0;

/// The run these figures were measured in.
const MEASURED_ON: &str = "measured on one NVIDIA H200 (driver 580.159.04, PyTorch 2.11.0+cu130, NCCL, one communicator) by scripts/measure_parallel.py; docs/parallel.md";

/// The CUDA context alone: what any CUDA process holds once CUDA is set up.
pub fn cuda_context() -> OutsideLine {
    OutsideLine {
        what: "CUDA context".into(),
        bytes: (618.8 * MIB) as u64,
        note: "after CUDA's set-up".into(),
        source: MEASURED_ON.into(),
    }
}

/// NCCL communicators a rank of `p` holds: one per process group it runs collectives on. The
/// default group over every rank (the one a one-dimensional mesh, DDP and a pipeline's sends use,
/// and that memscope's ranks agree on a stop over between steps); a 2-D mesh adds its two
/// sub-groups (FSDP2's over the data-parallel ranks, the tensor-parallel group's).
pub fn communicators(p: &crate::spec::Parallel) -> usize {
    match p.plan {
        crate::spec::ParallelPlan::FsdpTp => 3,
        _ => 1,
    }
}

/// A CUDA rank of a job under `p`: the context, the kernels its steps load, NCCL's buffers for
/// each communicator it holds.
pub fn cuda_rank(p: &crate::spec::Parallel) -> Vec<OutsideLine> {
    let n = communicators(p);
    let each = 558.0 * MIB;
    let groups = if n == 1 {
        "1 communicator: the default group over every rank".to_string()
    } else {
        format!("{n} communicators: the default group, the data-parallel and the tensor-parallel groups of the 2-D mesh; each counted at the one measured")
    };
    vec![
        cuda_context(),
        OutsideLine {
            what: "NCCL buffers".into(),
            bytes: (each * n as f64) as u64,
            note: format!("{groups}; the growth over a process group's first all-reduce, world size 1 (more peers take more)"),
            source: MEASURED_ON.into(),
        },
        OutsideLine {
            what: "kernels loaded on first use".into(),
            bytes: (132.0 * MIB) as u64,
            note: "the growth over four training steps".into(),
            source: MEASURED_ON.into(),
        },
    ]
}
