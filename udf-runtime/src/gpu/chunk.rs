//! How a batch is split into chunks that fit in device memory: the chunk planner (pure
//! functions, tested on every machine) and the per-thread maximum-chunk-size override.

use std::cell::Cell;
use std::ops::Range;

/// Fraction of the free device memory a run may use for its chunks in flight (the rest is left
/// to the kernels' own needs, other processes and fragmentation).
pub const FREE_MEMORY_FRACTION: f64 = 0.5;

/// Largest chunk, in bytes of device memory (inputs and output), whatever the free memory: large
/// enough that copies run at full bus speed and the per-chunk overheads (thread start-up for the
/// staging copy, allocations, launches) stay small beside the copy, small enough that pinned
/// staging ([`super::STREAMS`] buffers of this size) stays modest.
pub const MAX_CHUNK_BYTES: usize = 128 << 20;

/// Device memory the CUDA context and a run's modules take, as [`builtin_device_memory`]
/// counts them.
pub const CONTEXT_ALLOWANCE: u64 = 256 << 20;

/// The batch size the built-ins' estimates assume: DataFusion's default
/// (`datafusion.execution.batch_size`).
pub const ESTIMATE_BATCH_ROWS: u64 = 8192;

/// The device memory one instance of a built-in GPU function reserves under memory sharing,
/// for rows of `row_bytes` bytes of device buffers (inputs, output, validity): a batch of
/// [`ESTIMATE_BATCH_ROWS`] rows in each of [`super::STREAMS`] chunks in flight (at most
/// [`MAX_CHUNK_BYTES`] each), over the [`FREE_MEMORY_FRACTION`] of free memory a run gives its
/// chunks, plus [`CONTEXT_ALLOWANCE`]. A larger batch still runs within it, in more chunks:
/// runs size their chunks from the reservation.
pub const fn builtin_device_memory(row_bytes: u64) -> u64 {
    let per_chunk = row_bytes.saturating_mul(ESTIMATE_BATCH_ROWS);
    let per_chunk = if per_chunk > MAX_CHUNK_BYTES as u64 {
        MAX_CHUNK_BYTES as u64
    } else {
        per_chunk
    };
    // FREE_MEMORY_FRACTION is 0.5: the chunks in flight may use half of what a run sees free.
    per_chunk * super::STREAMS as u64 * 2 + CONTEXT_ALLOWANCE
}

/// Chunks hold a multiple of this many rows (except the last, or when a row does not fit), so
/// that the validity words of consecutive chunks line up.
pub const CHUNK_ROW_ALIGN: usize = 1024;

/// The device bytes one chunk may use.
///
/// `free` is the device's free memory, `fixed` what the run holds for its whole length (scalars),
/// `in_flight` how many chunks are on the device at once (one per stream); the result is at most
/// [`MAX_CHUNK_BYTES`] and at most `limit` when one is given (the test and tuning override, see
/// [`with_max_chunk_bytes`]). Never 0.
pub fn chunk_budget(free: usize, fixed: usize, in_flight: usize, limit: Option<usize>) -> usize {
    let usable = ((free as f64) * FREE_MEMORY_FRACTION) as usize;
    let per_chunk = usable.saturating_sub(fixed) / in_flight.max(1);
    let mut budget = per_chunk.min(MAX_CHUNK_BYTES);
    if let Some(limit) = limit {
        budget = budget.min(limit);
    }
    budget.max(1)
}

/// Rows per chunk for rows of `bytes_per_row` bytes within `budget` bytes: as many as fit,
/// rounded down to a multiple of `align` when at least `align` fit, and at least 1 (a row that
/// does not fit alone is tried anyway; the device then says whether it fits).
pub fn rows_per_chunk(bytes_per_row: usize, budget: usize, align: usize) -> usize {
    let fit = budget / bytes_per_row.max(1);
    let align = align.max(1);
    let rows = if fit >= align { fit - fit % align } else { fit };
    rows.max(1)
}

/// The chunks of a batch of `rows` rows, `per_chunk` rows each (the last may be shorter); no
/// chunk for an empty batch.
pub fn chunk_ranges(rows: usize, per_chunk: usize) -> impl Iterator<Item = Range<usize>> {
    let per_chunk = per_chunk.max(1);
    (0..rows.div_ceil(per_chunk)).map(move |i| {
        let start = i * per_chunk;
        start..(start + per_chunk).min(rows)
    })
}

thread_local! {
    static MAX_CHUNK_BYTES_OVERRIDE: Cell<Option<usize>> = const { Cell::new(None) };
    static DEVICE_MEMORY_LIMIT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `f` with GPU chunks limited to `max_bytes` bytes on this thread (for tests that need a
/// batch split into many chunks, and for tuning). GPU runs started by `f` on this thread see the
/// limit; other threads do not. The previous limit is restored afterwards, even if `f` panics.
///
/// ```
/// use accelsql_udf_runtime::gpu::{current_max_chunk_bytes, with_max_chunk_bytes};
/// let inside = with_max_chunk_bytes(4096, current_max_chunk_bytes);
/// assert_eq!(inside, Some(4096));
/// assert_eq!(current_max_chunk_bytes(), None);
/// ```
pub fn with_max_chunk_bytes<R>(max_bytes: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            MAX_CHUNK_BYTES_OVERRIDE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(MAX_CHUNK_BYTES_OVERRIDE.with(|c| c.replace(Some(max_bytes))));
    f()
}

/// Runs `f` with GPU runs on this thread limited to `bytes` of device memory: a statement's
/// reservation per instance under memory sharing. A run's chunks are sized as if the device
/// had no more free memory than that, so a batch larger than the reservation runs in smaller
/// chunks (as it does when the device is short of memory), and a single row that needs more
/// fails as one that does not fit the device does. The previous limit is restored afterwards.
pub fn with_device_memory_limit<R>(bytes: u64, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEVICE_MEMORY_LIMIT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(DEVICE_MEMORY_LIMIT.with(|c| c.replace(Some(bytes))));
    f()
}

/// The device memory [`with_device_memory_limit`] allows GPU runs on this thread, if set.
pub fn current_device_memory_limit() -> Option<u64> {
    DEVICE_MEMORY_LIMIT.with(Cell::get)
}

/// The chunk limit [`with_max_chunk_bytes`] set on this thread, if any.
pub fn current_max_chunk_bytes() -> Option<usize> {
    MAX_CHUNK_BYTES_OVERRIDE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Checks every property of one plan.
    fn check_plan(rows: usize, bytes_per_row: usize, budget: usize, align: usize) {
        let per_chunk = rows_per_chunk(bytes_per_row, budget, align);
        assert!(per_chunk >= 1);
        // The byte budget holds unless a single row is over it.
        if bytes_per_row <= budget {
            assert!(
                per_chunk * bytes_per_row <= budget,
                "{rows} {bytes_per_row} {budget}"
            );
        } else {
            assert_eq!(per_chunk, 1);
        }
        // Aligned when at least one aligned group fits.
        if align > 0 && bytes_per_row.max(1) * align <= budget {
            assert_eq!(per_chunk % align, 0);
        }
        // The chunks cover every row exactly once, in order.
        let chunks: Vec<_> = chunk_ranges(rows, per_chunk).collect();
        let mut next = 0;
        for c in &chunks {
            assert_eq!(c.start, next);
            assert!(!c.is_empty() && c.len() <= per_chunk);
            next = c.end;
        }
        assert_eq!(next, rows);
        assert_eq!(chunks.len(), rows.div_ceil(per_chunk));
        // Only the last chunk may be short.
        for c in chunks.iter().rev().skip(1) {
            assert_eq!(c.len(), per_chunk);
        }
    }

    #[test]
    fn plans_cover_all_rows_within_the_budget() {
        // A small deterministic sweep (xorshift) over sizes, plus the edges.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound) as usize
        };
        for _ in 0..2000 {
            let rows = next(100_000);
            let bytes_per_row = next(10_000);
            let budget = next(1 << 24) + 1;
            let align = [1, 32, 1024, 0][next(4)];
            check_plan(rows, bytes_per_row, budget, align);
        }
        for rows in [0, 1, 7, 1023, 1024, 1025, 4097] {
            for (bytes_per_row, budget) in [(0, 1), (8, 8), (8, 7), (3081, 64 << 20), (1, 1)] {
                check_plan(rows, bytes_per_row, budget, CHUNK_ROW_ALIGN);
            }
        }
    }

    #[test]
    fn empty_batches_have_no_chunks() {
        assert_eq!(chunk_ranges(0, 10).count(), 0);
        assert_eq!(chunk_ranges(0, 0).count(), 0);
        assert_eq!(
            chunk_ranges(5, 0).collect::<Vec<_>>(),
            vec![0..1, 1..2, 2..3, 3..4, 4..5]
        );
    }

    #[test]
    fn a_builtins_estimate_lets_its_default_batch_run_in_full_chunks() {
        // Four DOUBLEs in, one out, a validity byte: 41 bytes a row.
        let reserved = builtin_device_memory(41);
        assert_eq!(reserved, CONTEXT_ALLOWANCE + 41 * 8192 * 3 * 2);
        let budget = chunk_budget((reserved - CONTEXT_ALLOWANCE) as usize, 0, 3, None);
        assert!(rows_per_chunk(41, budget, CHUNK_ROW_ALIGN) >= 8192);
        // Wide rows stop at the largest chunk.
        assert_eq!(
            builtin_device_memory(1 << 20),
            (MAX_CHUNK_BYTES as u64) * 6 + CONTEXT_ALLOWANCE
        );
    }

    #[test]
    fn budgets_respect_free_memory_streams_and_limits() {
        let gib = 1usize << 30;
        // Plenty of memory: the cap.
        assert_eq!(chunk_budget(80 * gib, 0, 3, None), MAX_CHUNK_BYTES);
        // Little memory: half of it, shared by the chunks in flight, after the fixed part.
        assert_eq!(chunk_budget(60 << 20, 0, 3, None), 10 << 20);
        assert_eq!(chunk_budget(60 << 20, 6 << 20, 3, None), 8 << 20);
        // An override lowers the budget, never raises it over the cap.
        assert_eq!(chunk_budget(80 * gib, 0, 3, Some(4096)), 4096);
        assert_eq!(
            chunk_budget(80 * gib, 0, 3, Some(usize::MAX)),
            MAX_CHUNK_BYTES
        );
        // Never zero, even with no memory at all or a zero override.
        assert_eq!(chunk_budget(0, 100, 0, None), 1);
        assert_eq!(chunk_budget(gib, 0, 2, Some(0)), 1);
    }

    #[test]
    fn the_override_is_scoped_to_the_thread_and_the_call() {
        assert_eq!(current_max_chunk_bytes(), None);
        with_max_chunk_bytes(100, || {
            assert_eq!(current_max_chunk_bytes(), Some(100));
            with_max_chunk_bytes(7, || assert_eq!(current_max_chunk_bytes(), Some(7)));
            assert_eq!(current_max_chunk_bytes(), Some(100));
            let other = std::thread::spawn(current_max_chunk_bytes).join().unwrap();
            assert_eq!(other, None);
        });
        assert_eq!(current_max_chunk_bytes(), None);
        let panicked = std::panic::catch_unwind(|| with_max_chunk_bytes(5, || panic!("boom")));
        assert!(panicked.is_err());
        assert_eq!(current_max_chunk_bytes(), None);
    }
}
