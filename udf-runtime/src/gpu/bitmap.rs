//! Row validity between Arrow and the device: the device bitmap format, conversion both ways
//! (honouring offsets of sliced arrays), and the validity several operands have together.
//!
//! The device format is one bit per row in 32-bit words: row `r` is bit `r % 32` of word
//! `r / 32`, set when the row is valid. On a little-endian host (every host CUDA supports) those
//! words are, byte for byte, Arrow's LSB-first validity bitmap starting at bit 0, padded to whole
//! words; bits past the last row are 0. A kernel marks row `r` valid with
//! `atomicOr(&valid[r >> 5], 1u << (r & 31))` on a zeroed bitmap.

use arrow::array::Array;
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};

use crate::kernels::Operand;

/// Bytes of the device bitmap of `rows` rows (whole 32-bit words).
pub fn device_bitmap_bytes(rows: usize) -> usize {
    rows.div_ceil(32) * 4
}

/// Writes the device bitmap of rows `start .. start + len` of `nulls` into `out`, which must be
/// [`device_bitmap_bytes`]`(len)` long (bytes beyond that are left alone; if `out` is shorter,
/// only what fits is written).
pub fn write_device_bitmap(nulls: &NullBuffer, start: usize, len: usize, out: &mut [u8]) {
    let want = device_bitmap_bytes(len).min(out.len());
    let out = &mut out[..want];
    out.fill(0);
    if len == 0 || start.saturating_add(len) > nulls.len() {
        return;
    }
    // `sliced` re-bases the bits to offset 0 (a copy only when the start is not byte-aligned).
    let bits = nulls.inner().slice(start, len).sliced();
    let bytes = bits.as_slice();
    let n = bytes.len().min(len.div_ceil(8)).min(out.len());
    out[..n].copy_from_slice(&bytes[..n]);
    // Clear the bits past the last row (a byte-aligned slice shares the source's last byte).
    let tail = len % 8;
    if tail != 0 && n == len.div_ceil(8) {
        out[n - 1] &= (1u8 << tail) - 1;
    }
}

/// The device bitmap of rows `start .. start + len` of `nulls`, as bytes.
pub fn to_device_bitmap(nulls: &NullBuffer, start: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0; device_bitmap_bytes(len)];
    write_device_bitmap(nulls, start, len, &mut out);
    out
}

/// Reads `rows` rows of a device bitmap (as bytes) back into Arrow validity; `None` when `bytes`
/// is too short to hold them.
pub fn from_device_bitmap(bytes: &[u8], rows: usize) -> Option<NullBuffer> {
    let need = rows.div_ceil(8);
    if bytes.len() < need {
        return None;
    }
    let buffer = Buffer::from(bytes[..need].to_vec());
    Some(NullBuffer::new(BooleanBuffer::new(buffer, 0, rows)))
}

/// The rows of a batch of `rows` rows that are valid in every operand: the AND of the columns'
/// validity, and all-NULL when a scalar is NULL. `None` when every row is valid.
///
/// Operands must fit the batch (columns of `rows` values, one-value scalars); the rows of a
/// column that is too short count as NULL.
pub fn combined_validity(args: &[Operand], rows: usize) -> Option<NullBuffer> {
    let mut combined: Option<NullBuffer> = None;
    for arg in args {
        let nulls = match arg {
            Operand::Scalar(a) => {
                if a.is_empty() || a.is_null(0) {
                    return Some(NullBuffer::new_null(rows));
                }
                continue;
            }
            Operand::Column(a) if a.len() < rows => return Some(NullBuffer::new_null(rows)),
            Operand::Column(a) => match a.logical_nulls() {
                Some(n) if n.null_count() > 0 => n.slice(0, rows),
                _ => continue,
            },
        };
        combined = NullBuffer::union(combined.as_ref(), Some(&nulls));
    }
    combined.filter(|n| n.null_count() > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array, Int32Array};

    use super::*;

    fn validity(pattern: &[bool]) -> NullBuffer {
        NullBuffer::from(pattern.to_vec())
    }

    fn bits_of(bytes: &[u8], rows: usize) -> Vec<bool> {
        (0..rows)
            .map(|r| bytes[r / 8] >> (r % 8) & 1 == 1)
            .collect()
    }

    #[test]
    fn device_bitmaps_are_whole_words_with_clear_tails() {
        assert_eq!(device_bitmap_bytes(0), 0);
        assert_eq!(device_bitmap_bytes(1), 4);
        assert_eq!(device_bitmap_bytes(32), 4);
        assert_eq!(device_bitmap_bytes(33), 8);
        let all = NullBuffer::new_valid(40);
        let out = to_device_bitmap(&all, 0, 13);
        assert_eq!(out, vec![0xff, 0x1f, 0, 0]);
    }

    #[test]
    fn every_offset_and_length_round_trips() {
        // An irregular pattern, so that a shift by any offset shows.
        let pattern: Vec<bool> = (0..200).map(|i| (i * 7 + i / 3) % 5 != 0).collect();
        let nulls = validity(&pattern);
        for start in 0..70 {
            for len in [0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 130] {
                if start + len > pattern.len() {
                    continue;
                }
                let bytes = to_device_bitmap(&nulls, start, len);
                assert_eq!(bytes.len(), device_bitmap_bytes(len));
                assert_eq!(bits_of(&bytes, len), pattern[start..start + len]);
                // Bits past the last row are clear.
                for r in len..bytes.len() * 8 {
                    assert_eq!(
                        bytes[r / 8] >> (r % 8) & 1,
                        0,
                        "start {start} len {len} bit {r}"
                    );
                }
                let back = from_device_bitmap(&bytes, len).unwrap();
                let got: Vec<bool> = (0..len).map(|r| back.is_valid(r)).collect();
                assert_eq!(got, pattern[start..start + len]);
            }
        }
    }

    #[test]
    fn sliced_arrays_keep_their_offsets() {
        let values: Vec<Option<f64>> = (0..50).map(|i| (i % 3 != 0).then_some(i as f64)).collect();
        let array = Float64Array::from(values.clone()).slice(5, 30);
        let nulls = array.nulls().unwrap();
        let bytes = to_device_bitmap(nulls, 0, array.len());
        let expected: Vec<bool> = values[5..35].iter().map(Option::is_some).collect();
        assert_eq!(bits_of(&bytes, 30), expected);
        // A sub-range of the slice: offsets add up.
        let bytes = to_device_bitmap(nulls, 3, 20);
        assert_eq!(bits_of(&bytes, 20), expected[3..23]);
    }

    #[test]
    fn short_inputs_never_panic() {
        let nulls = validity(&[true, false, true]);
        // Asking past the end gives all-NULL (zero bits), a short `out` is filled as far as it goes.
        assert_eq!(to_device_bitmap(&nulls, 2, 5), vec![0, 0, 0, 0]);
        let mut short = [0xaa_u8; 2];
        write_device_bitmap(&nulls, 0, 3, &mut short);
        assert_eq!(short, [0b101, 0]);
        assert!(from_device_bitmap(&[0xff], 9).is_none());
        assert_eq!(from_device_bitmap(&[], 0).unwrap().len(), 0);
    }

    fn column(values: Vec<Option<i32>>) -> Operand {
        Operand::Column(Arc::new(Int32Array::from(values)) as ArrayRef)
    }

    fn scalar(value: Option<i32>) -> Operand {
        Operand::Scalar(Arc::new(Int32Array::from(vec![value])) as ArrayRef)
    }

    #[test]
    fn operands_combine_columns_and_scalars() {
        let a = column(vec![Some(1), None, Some(3), Some(4)]);
        let b = column(vec![Some(1), Some(2), None, Some(4)]);
        let c = column(vec![Some(1), Some(2), Some(3), Some(4)]);
        let combined = combined_validity(&[a.clone(), b, c.clone(), scalar(Some(9))], 4).unwrap();
        let got: Vec<bool> = (0..4).map(|r| combined.is_valid(r)).collect();
        assert_eq!(got, [true, false, false, true]);
        // No NULLs at all: None.
        assert!(combined_validity(&[c.clone(), scalar(Some(1))], 4).is_none());
        // A NULL scalar: every row NULL.
        let all_null = combined_validity(&[c.clone(), scalar(None)], 4).unwrap();
        assert_eq!(all_null.null_count(), 4);
        // A sliced column with NULLs: its offset is honoured.
        let sliced = Int32Array::from(vec![None, Some(1), None, Some(2), Some(3)]).slice(1, 4);
        let combined = combined_validity(&[Operand::Column(Arc::new(sliced)), c], 4).unwrap();
        let got: Vec<bool> = (0..4).map(|r| combined.is_valid(r)).collect();
        assert_eq!(got, [true, false, true, true]);
        // Through the device format and back.
        let bytes = to_device_bitmap(&combined, 0, 4);
        assert_eq!(bytes, vec![0b1101, 0, 0, 0]);
        // A column shorter than the batch never panics.
        assert_eq!(combined_validity(&[a], 9).unwrap().null_count(), 9);
    }
}
