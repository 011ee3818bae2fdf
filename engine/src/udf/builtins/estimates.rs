//! The device memory the built-ins reserve under memory sharing: their kernels' device bytes
//! per row, for `accelsql_udf_runtime::gpu::builtin_device_memory`.

/// Vector width the vector built-ins' device memory estimates assume (their arguments' lengths
/// are known only per batch): 1024 FLOATs. Wider vectors still run within the reservation, in
/// smaller chunks.
pub(super) const ESTIMATE_VECTOR_DIMS: u64 = 1024;

/// Device bytes per row of `haversine_km`: four DOUBLEs in, one out, a validity byte.
pub(super) const ROW_BYTES_HAVERSINE: u64 = 4 * 8 + 8 + 1;
/// Device bytes per row of `black_scholes_*`: five DOUBLEs in, one out, a validity byte.
pub(super) const ROW_BYTES_BLACK_SCHOLES: u64 = 5 * 8 + 8 + 1;
/// Device bytes per row of the two-vector functions: two vectors of FLOATs with their offsets,
/// a DOUBLE out, a validity byte.
pub(super) const ROW_BYTES_VECTOR_PAIR: u64 = 2 * (ESTIMATE_VECTOR_DIMS * 4 + 8) + 8 + 1;
/// Device bytes per row of `vector_topk`: a vector of FLOATs with its offset, a row id, a
/// score.
pub(super) const ROW_BYTES_TOPK: u64 = ESTIMATE_VECTOR_DIMS * 4 + 8 + 8 + 8;
