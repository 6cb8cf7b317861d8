//! What a model's parameters are for (train, whole-sequence forwards, generation), which decides
//! how the store holds them. Plain data: the Spec names it without the engine.

/// What a store's parameters are for, which decides how they are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Training: trainable `Var`s, row-major.
    Train,
    /// Whole-sequence forwards (`--mode infer`): detached tensors, weights read only through
    /// the linear kernel laid out for its products (`store::ParamSpec::placement`).
    Forward,
    /// Generation: detached tensors, row-major. A decode step's products have one row per
    /// sequence, and gemm reads an (O, I) weight's rows for them faster than its transpose
    /// (cs336-small decode 18 ms per token, 22–26 ms transposed, on the AVX-512 machine).
    Decode,
}

impl Purpose {
    pub fn trainable(self) -> bool {
        self == Purpose::Train
    }
}
