//! Helpers the built-in GPU implementations share: launch shapes, the DOUBLE-argument check of
//! the scalar built-ins, and the Float64 result.

use arrow::array::{ArrayRef, AsArray, Float64Array};
use arrow::datatypes::{DataType, Float64Type};
use cudarc::driver::LaunchConfig;

use super::{DeviceOperand, GpuDevice};
use crate::Result;
use crate::kernels::{Operand, check_rows, invalid_argument};

/// Threads per block of the built-in kernels, and of [`thread_per_row`] launches.
pub const BLOCK_THREADS: u32 = 256;

/// A launch of one thread per row: enough blocks of [`BLOCK_THREADS`] threads for `rows` rows
/// (at least one block, so a kernel must skip rows at or past `rows`), or a
/// [`crate::RuntimeError::Gpu`] when `rows` needs more blocks than a grid can have.
pub fn thread_per_row(device: &GpuDevice, rows: usize) -> Result<LaunchConfig> {
    blocks_for(device, rows, BLOCK_THREADS as usize)
}

/// A launch of one 32-thread warp per row (`rows` ≥ 1).
pub(crate) fn warp_per_row(device: &GpuDevice, rows: usize) -> Result<LaunchConfig> {
    blocks_for(device, rows, BLOCK_THREADS as usize / 32)
}

/// Enough blocks of [`BLOCK_THREADS`] threads for `rows` rows at `rows_per_block` per block.
fn blocks_for(device: &GpuDevice, rows: usize, rows_per_block: usize) -> Result<LaunchConfig> {
    let blocks = grid_blocks(rows, rows_per_block)
        .ok_or_else(|| device.fail(format!("a chunk of {rows} rows needs too many blocks")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Blocks for `rows` rows at `rows_per_block` per block: at least 1 (a grid of 0 blocks is
/// `CUDA_ERROR_INVALID_VALUE`; the kernels skip rows past the end), and `None` beyond the
/// 2^31 − 1 blocks a grid may have in x (chunks are far smaller).
pub(crate) fn grid_blocks(rows: usize, rows_per_block: usize) -> Option<u32> {
    let blocks = rows.div_ceil(rows_per_block.max(1)).max(1);
    u32::try_from(blocks).ok().filter(|&b| b <= i32::MAX as u32)
}

/// Checks the DOUBLE arguments of a scalar built-in the way its CPU kernel does (each in order:
/// DOUBLE, then fits the batch), so both report the same error.
pub(crate) fn check_doubles(function: &str, rows: usize, args: &[Operand]) -> Result<()> {
    for (i, arg) in args.iter().enumerate() {
        if *arg.array().data_type() != DataType::Float64 {
            return Err(invalid_argument(
                function,
                format!(
                    "argument {} is {}, expected DOUBLE",
                    i + 1,
                    arg.array().data_type()
                ),
            ));
        }
        check_rows(function, i + 1, arg, rows)?;
    }
    Ok(())
}

/// The run's output as the Float64 array it must be.
pub(crate) fn float64(device: &GpuDevice, function: &str, out: ArrayRef) -> Result<Float64Array> {
    out.as_primitive_opt::<Float64Type>()
        .cloned()
        .ok_or_else(|| {
            device.fail(format!(
                "{function} returned {}, not DOUBLE",
                out.data_type()
            ))
        })
}

/// A kernel's `N` arguments, or the error that `function` got another number of them.
pub(crate) fn arguments<'o, 'a, const N: usize>(
    device: &GpuDevice,
    function: &str,
    args: &'o [DeviceOperand<'a>],
) -> Result<&'o [DeviceOperand<'a>; N]> {
    args.try_into().map_err(|_| {
        device.fail(format!(
            "{function} takes {N} arguments, got {}",
            args.len()
        ))
    })
}

/// `rows` as the `long long` a kernel takes.
pub(crate) fn rows_arg(device: &GpuDevice, rows: usize) -> Result<i64> {
    i64::try_from(rows)
        .map_err(|_| device.fail(format!("{rows} rows do not fit a kernel argument")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_are_never_empty_and_never_too_large() {
        assert_eq!(grid_blocks(0, 256), Some(1));
        assert_eq!(grid_blocks(1, 256), Some(1));
        assert_eq!(grid_blocks(256, 256), Some(1));
        assert_eq!(grid_blocks(257, 256), Some(2));
        // One warp per row, 8 rows per 256-thread block.
        assert_eq!(grid_blocks(4097, BLOCK_THREADS as usize / 32), Some(513));
        assert_eq!(grid_blocks(5, 0), Some(5));
        let most = i32::MAX as usize;
        assert_eq!(grid_blocks(most, 1), Some(i32::MAX as u32));
        assert_eq!(grid_blocks(most + 1, 1), None);
        assert_eq!(grid_blocks(usize::MAX, 1), None);
    }
}
