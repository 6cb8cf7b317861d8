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

/// A CUDA rank of a data-parallel job: the context, the kernels its steps load, NCCL's buffers.
pub fn cuda_rank() -> Vec<OutsideLine> {
    vec![
        cuda_context(),
        OutsideLine {
            what: "NCCL buffers".into(),
            bytes: (558.0 * MIB) as u64,
            note: "the growth over the process group's first all-reduce (world size 1; more peers and communicators take more)".into(),
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
