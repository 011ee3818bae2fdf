//! Similarity of embedding vectors — `cosine_similarity`, `dot_product`, `l2_distance` — and the
//! per-group top-k selection of `vector_topk`.
//!
//! A vector is one value of a `List`, `LargeList` or `FixedSizeList` array of `Float32` or
//! `Float64`; the two arguments may be of different kinds (a `FixedSizeList<Float32>` column
//! against a `List<Float64>` query). Sums are taken in `f64` (`f32` elements are widened first),
//! over eight interleaved partial sums, in explicit AVX2 instructions on x86-64 CPUs that have
//! them and in portable code elsewhere (both give the same bits: same order, no fused
//! multiply-add); the summation order is therefore not left to right, and another
//! implementation (the GPU's) agrees to rounding, not bit for bit. Columns of fixed-size
//! vectors without NULLs skip the per-row checks.
//!
//! Semantics, row by row, in this order:
//! 1. a NULL vector on either side gives NULL;
//! 2. vectors of different lengths are an error ([`crate::RuntimeError::InvalidArgument`], code
//!    22U20, naming the row and both lengths), as in DataFusion's `cosine_distance`;
//! 3. a NULL element in either vector gives NULL;
//! 4. `dot_product` = `Σ aᵢ·bᵢ`; `l2_distance` = `√Σ (aᵢ − bᵢ)²`; `cosine_similarity` =
//!    `dot / (√Σ aᵢ² · √Σ bᵢ²)`, NULL when either norm is 0 (no direction), not clamped to
//!    [−1, 1]. NaN and infinite elements propagate as IEEE arithmetic says.
//!
//! Empty vectors: `dot_product([], [])` = 0 and `l2_distance([], [])` = 0 (empty sums, as
//! DataFusion's `inner_product` and `array_distance` give), `cosine_similarity([], [])` is NULL
//! (zero norm, as DataFusion's `cosine_distance` gives).
//!
//! The files: `similarity.rs` (the three operations, row by row), `view.rs` (an argument's
//! vectors viewed without copying), `element.rs` (FLOAT and DOUBLE elements), `sums.rs` (the
//! sums, portable and AVX2), `select.rs` (the top-k selection), `group.rs` (`vector_topk`'s name
//! and a group's arguments, checked) and `topk.rs` (`vector_topk` itself).

mod element;
mod group;
mod select;
mod similarity;
mod sums;
#[cfg(test)]
mod test_support;
mod topk;
mod view;

pub use group::{TopKChunk, TopKGroup, VECTOR_TOPK, top_k_group, top_k_group_chunks};
pub use select::top_k;
pub use similarity::{VectorOp, vector_similarity};
pub use topk::{vector_topk, vector_topk_chunks};
pub(crate) use view::Vectors;
