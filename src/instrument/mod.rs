//! The counting allocator and what it charges its figures to, at the lowest floor so that
//! kernels, models and the measurement loop can all set it: the global allocator that counts
//! every heap byte by phase and module (`alloc.rs`), the current module scope (`scope.rs`), and
//! per-op wall-time scopes (`op_timer.rs`).

pub mod alloc;
pub mod op_timer;
pub mod scope;
