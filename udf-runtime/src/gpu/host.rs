//! The host side of a GPU run, without CUDA: how each Arrow operand is laid out for the device
//! ([`HostOperand`]), where a chunk's buffers lie in its staging buffer and how they are filled
//! ([`ChunkLayout`]), and how chunk outputs are joined into one Arrow array ([`OutputAssembler`]).

use std::ops::Range;
use std::sync::OnceLock;

use arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, BooleanBufferBuilder, make_array, new_null_array,
};
use arrow::buffer::{Buffer, MutableBuffer, NullBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type};

use super::bitmap::{device_bitmap_bytes, write_device_bitmap};
use super::columnar::ElementType;
use crate::kernels::{Operand, check_rows, invalid_argument};
use crate::{Result, RuntimeError};

/// Staging regions start at multiples of this many bytes (device allocations are at least this
/// aligned too).
pub(crate) const REGION_ALIGN: usize = 256;

/// List offsets of one operand, 32- or 64-bit.
#[derive(Debug, Clone)]
pub(crate) enum Offsets {
    I32(ScalarBuffer<i32>),
    I64(ScalarBuffer<i64>),
}

impl Offsets {
    fn get(&self, i: usize) -> Option<i64> {
        match self {
            Self::I32(o) => o.get(i).map(|&v| i64::from(v)),
            Self::I64(o) => o.get(i).copied(),
        }
    }
}

/// Where row `r`'s elements lie in [`HostOperand::values`].
#[derive(Debug, Clone)]
pub(crate) enum Layout {
    /// `DataType::Null`, or a NULL scalar: every row is NULL, nothing is uploaded.
    AllNull,
    /// One element per row.
    Primitive,
    /// `size` elements per row, row `r` at `r·size`.
    Fixed(usize),
    /// Row `r` at `offsets[r] .. offsets[r+1]`.
    Offsets(Offsets),
}

/// One operand of a run, as the device will see it.
#[derive(Debug, Clone)]
pub(crate) struct HostOperand {
    pub(crate) scalar: bool,
    pub(crate) data_type: DataType,
    pub(crate) element: ElementType,
    pub(crate) layout: Layout,
    /// The element values; element 0 is where [`Layout`] counts from.
    pub(crate) values: Buffer,
    /// Row validity (of the operand's array), when it has NULLs.
    pub(crate) nulls: Option<NullBuffer>,
}

/// The fixed-width element buffer of `array` (sliced to its offset), if it is one of ours.
fn element_values(array: &ArrayRef) -> Option<(ElementType, Buffer)> {
    let element = ElementType::of(array.data_type())?;
    let values = match element {
        ElementType::F32 => array
            .as_primitive_opt::<Float32Type>()?
            .values()
            .inner()
            .clone(),
        ElementType::F64 => array
            .as_primitive_opt::<Float64Type>()?
            .values()
            .inner()
            .clone(),
        ElementType::I32 => array
            .as_primitive_opt::<Int32Type>()?
            .values()
            .inner()
            .clone(),
        ElementType::I64 => array
            .as_primitive_opt::<Int64Type>()?
            .values()
            .inner()
            .clone(),
    };
    Some((element, values))
}

impl HostOperand {
    /// Lays out argument `position` (1-based) of `function` for a batch of `rows` rows.
    ///
    /// Accepted: Float32/Float64/Int32/Int64 columns, and `List`, `LargeList` or `FixedSizeList`
    /// of those (plus `DataType::Null` and NULL scalars, which are all-NULL). A `List` whose rows
    /// all have the same length is laid out like a `FixedSizeList`.
    pub(crate) fn new(
        function: &str,
        position: usize,
        operand: &Operand,
        rows: usize,
    ) -> Result<Self> {
        check_rows(function, position, operand, rows)?;
        let array = operand.array();
        let scalar = matches!(operand, Operand::Scalar(_));
        let unsupported = || {
            invalid_argument(
                function,
                format!(
                    "argument {position} is {}, which cannot go to the GPU (FLOAT, DOUBLE, INT, \
                     BIGINT or arrays of them can)",
                    array.data_type()
                ),
            )
        };
        let all_null = Self {
            scalar,
            data_type: array.data_type().clone(),
            element: ElementType::F64,
            layout: Layout::AllNull,
            values: Buffer::from_vec(Vec::<u8>::new()),
            nulls: None,
        };
        if *array.data_type() == DataType::Null || (scalar && array.is_null(0)) {
            return Ok(all_null);
        }
        let nulls = array.nulls().filter(|n| n.null_count() > 0).cloned();
        let (layout, child) = match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                let offsets = Offsets::I32(list.offsets().inner().clone());
                (Layout::Offsets(offsets), list.values())
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                let offsets = Offsets::I64(list.offsets().inner().clone());
                (Layout::Offsets(offsets), list.values())
            }
            DataType::FixedSizeList(_, size) => {
                let list = array.as_fixed_size_list();
                let size = usize::try_from(*size).map_err(|_| unsupported())?;
                (Layout::Fixed(size), list.values())
            }
            _ => {
                let (element, values) = element_values(array).ok_or_else(unsupported)?;
                return Ok(Self {
                    scalar,
                    data_type: array.data_type().clone(),
                    element,
                    layout: Layout::Primitive,
                    values,
                    nulls,
                });
            }
        };
        let (element, values) = element_values(child).ok_or_else(unsupported)?;
        let mut operand = Self {
            scalar,
            data_type: array.data_type().clone(),
            element,
            layout,
            values,
            nulls,
        };
        operand.make_uniform_lists_fixed(array.len(), function)?;
        Ok(operand)
    }

    /// Whether every row is NULL without looking at the data (see [`Layout::AllNull`]).
    pub(crate) fn all_null(&self) -> bool {
        matches!(self.layout, Layout::AllNull)
    }

    /// A `List` whose `len` rows all have the same length `d` becomes `Fixed(d)`, its values
    /// re-based at the first row (no offsets to upload).
    fn make_uniform_lists_fixed(&mut self, len: usize, function: &str) -> Result<()> {
        let Layout::Offsets(offsets) = &self.layout else {
            return Ok(());
        };
        let malformed = || invalid_argument(function, "a list's offsets lie outside its values");
        let first = offsets.get(0).ok_or_else(malformed)?;
        let size = match (len, offsets.get(1)) {
            (0, _) => 0,
            (_, Some(second)) => second - first,
            (_, None) => return Err(malformed()),
        };
        let uniform =
            size >= 0 && (1..=len).all(|i| offsets.get(i) == Some(first + size * i as i64));
        if !uniform {
            return Ok(());
        }
        let width = self.element.width();
        let start = usize::try_from(first).map_err(|_| malformed())? * width;
        let bytes = usize::try_from(size).map_err(|_| malformed())? * len * width;
        if start.saturating_add(bytes) > self.values.len() {
            return Err(malformed());
        }
        self.values = self.values.slice_with_length(start, bytes);
        self.layout = Layout::Fixed(usize::try_from(size).map_err(|_| malformed())?);
        Ok(())
    }

    /// The elements (indices into `values`) of rows `rows`.
    pub(crate) fn element_range(
        &self,
        rows: &Range<usize>,
        function: &str,
    ) -> Result<Range<usize>> {
        let range = match &self.layout {
            Layout::AllNull => 0..0,
            Layout::Primitive => rows.clone(),
            Layout::Fixed(size) => rows.start * size..rows.end * size,
            Layout::Offsets(offsets) => {
                let at = |i| {
                    offsets
                        .get(i)
                        .and_then(|o| usize::try_from(o).ok())
                        .ok_or_else(|| invalid_argument(function, "a list's offsets are malformed"))
                };
                at(rows.start)?..at(rows.end)?
            }
        };
        let width = self.element.width();
        if range.start > range.end || range.end.saturating_mul(width) > self.values.len() {
            return Err(invalid_argument(
                function,
                "an argument's values end before its rows do (a malformed array)",
            ));
        }
        Ok(range)
    }

    /// Average device bytes per row of rows `0..rows` (values, offsets, validity).
    pub(crate) fn bytes_per_row(&self, rows: usize, with_validity: bool) -> usize {
        if self.scalar || rows == 0 {
            return 0;
        }
        let width = self.element.width();
        let values = match &self.layout {
            Layout::AllNull => 0,
            Layout::Primitive => width,
            Layout::Fixed(size) => size * width,
            Layout::Offsets(o) => {
                let (first, last) = (o.get(0).unwrap_or(0), o.get(rows).unwrap_or(0));
                usize::try_from(last - first).unwrap_or(0).div_ceil(rows) * width + 8
            }
        };
        values + usize::from(with_validity && self.nulls.is_some())
    }

    /// Whether row `r`'s values need offsets on the device.
    fn has_offsets(&self) -> bool {
        matches!(self.layout, Layout::Offsets(_))
    }

    /// Elements per row when fixed.
    pub(crate) fn list_size(&self) -> Option<usize> {
        match self.layout {
            Layout::Fixed(size) => Some(size),
            _ => None,
        }
    }
}

/// A byte range in a staging buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Region {
    pub(crate) fn range(self) -> Range<usize> {
        self.offset..self.offset + self.len
    }
}

/// Where one column operand's buffers lie in a chunk's staging buffer.
#[derive(Debug, Clone)]
pub(crate) struct ColumnRegions {
    pub(crate) elements: Range<usize>,
    pub(crate) values: Region,
    pub(crate) offsets: Option<Region>,
    pub(crate) validity: Option<Region>,
}

/// The staging buffer of one chunk: each column operand's buffers, then the output's.
#[derive(Debug, Clone)]
pub(crate) struct ChunkLayout {
    pub(crate) rows: Range<usize>,
    /// One per operand; `None` for scalars (uploaded once per run) and all-NULL operands.
    pub(crate) columns: Vec<Option<ColumnRegions>>,
    pub(crate) out_values: Region,
    pub(crate) out_validity: Region,
    pub(crate) total: usize,
}

impl ChunkLayout {
    /// The layout of rows `rows` of `operands` (scalars included when `scalars` is true: the
    /// one-off upload of a run's scalars, with `rows` = `0..1`), with room for `out_width`-byte
    /// output values and an output bitmap; operands' validity is included when `with_validity`.
    pub(crate) fn new(
        function: &str,
        operands: &[HostOperand],
        rows: Range<usize>,
        scalars: bool,
        with_validity: bool,
        out_width: usize,
    ) -> Result<Self> {
        let mut total: usize = 0;
        let mut region = |len: usize| {
            let offset = total.next_multiple_of(REGION_ALIGN);
            total = offset + len;
            Region { offset, len }
        };
        let n = rows.len();
        let mut columns = Vec::with_capacity(operands.len());
        for op in operands {
            if op.scalar != scalars || op.all_null() {
                columns.push(None);
                continue;
            }
            let elements = op.element_range(&rows, function)?;
            let values = region(elements.len() * op.element.width());
            let offsets = op.has_offsets().then(|| region((n + 1) * 8));
            let validity =
                (with_validity && op.nulls.is_some()).then(|| region(device_bitmap_bytes(n)));
            columns.push(Some(ColumnRegions {
                elements,
                values,
                offsets,
                validity,
            }));
        }
        let out_values = region(n * out_width);
        let out_validity = region(device_bitmap_bytes(n));
        Ok(Self {
            rows,
            columns,
            out_values,
            out_validity,
            total,
        })
    }

    /// Writes the inputs of the chunk into `buf` (at least [`ChunkLayout::total`] bytes long).
    pub(crate) fn fill(&self, operands: &[HostOperand], buf: &mut [u8]) {
        for (op, regions) in operands.iter().zip(&self.columns) {
            let Some(regions) = regions else { continue };
            let width = op.element.width();
            let bytes = regions.elements.start * width..regions.elements.end * width;
            if let (Some(dst), Some(src)) =
                (buf.get_mut(regions.values.range()), op.values.get(bytes))
            {
                copy_parallel(dst, src);
            }
            if let (Some(region), Layout::Offsets(offsets)) = (regions.offsets, &op.layout) {
                let base = offsets.get(self.rows.start).unwrap_or(0);
                if let Some(dst) = buf.get_mut(region.range()) {
                    for (i, out) in dst.chunks_exact_mut(8).enumerate() {
                        let o = offsets.get(self.rows.start + i).unwrap_or(base) - base;
                        out.copy_from_slice(&o.to_le_bytes());
                    }
                }
            }
            if let (Some(region), Some(nulls)) = (regions.validity, &op.nulls)
                && let Some(dst) = buf.get_mut(region.range())
            {
                write_device_bitmap(nulls, self.rows.start, self.rows.len(), dst);
            }
        }
    }
}

/// Threads available for host copies (cached).
fn copy_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .min(16)
    })
}

/// `dst.copy_from_slice(src)` for the common prefix, split over threads when large (a staging
/// copy must keep up with the bus; one core does not).
pub(crate) fn copy_parallel(dst: &mut [u8], src: &[u8]) {
    const PIECE: usize = 2 << 20;
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let threads = copy_threads().min(n / PIECE);
    if threads <= 1 {
        dst.copy_from_slice(src);
        return;
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|scope| {
        for (d, s) in dst.chunks_mut(per).zip(src.chunks(per)) {
            scope.spawn(move || d.copy_from_slice(s));
        }
    });
}

/// Joins chunk outputs, in order, into one Arrow array.
#[derive(Debug)]
pub(crate) struct OutputAssembler {
    element: ElementType,
    rows: usize,
    values: MutableBuffer,
    /// Kernel-made validity, started at the first chunk that has any.
    valid: Option<BooleanBufferBuilder>,
    done: usize,
}

impl OutputAssembler {
    /// An assembler for `rows` rows of `element`.
    pub(crate) fn new(element: ElementType, rows: usize) -> Self {
        Self {
            element,
            rows,
            values: MutableBuffer::with_capacity(rows * element.width()),
            valid: None,
            done: 0,
        }
    }

    /// Appends a chunk of `rows` rows: `values` holds at least `rows` elements, `validity` (the
    /// device bitmap, if the kernel made one) at least `rows` bits.
    pub(crate) fn append(
        &mut self,
        rows: usize,
        values: &[u8],
        validity: Option<&[u8]>,
    ) -> Result<()> {
        let bytes = rows * self.element.width();
        let short = || RuntimeError::Gpu {
            device: String::new(),
            message: format!("a chunk of {rows} rows came back short"),
        };
        let values = values.get(..bytes).ok_or_else(short)?;
        if self.done + rows > self.rows {
            return Err(short());
        }
        self.values.extend_from_slice(values);
        if let Some(bits) = validity {
            if bits.len() < rows.div_ceil(8) {
                return Err(short());
            }
            let done = self.done;
            let valid = self.valid.get_or_insert_with(|| {
                let mut b = BooleanBufferBuilder::new(self.rows);
                b.append_n(done, true);
                b
            });
            valid.append_packed_range(0..rows, bits);
        } else if let Some(valid) = &mut self.valid {
            valid.append_n(rows, true);
        }
        self.done += rows;
        Ok(())
    }

    /// The array, with `input_nulls` (the arguments' combined validity, when the runtime handles
    /// NULLs) ANDed into the kernel's validity.
    pub(crate) fn finish(mut self, input_nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        if self.done != self.rows {
            return Err(RuntimeError::Gpu {
                device: String::new(),
                message: format!("{} of {} rows came back", self.done, self.rows),
            });
        }
        let kernel_nulls = self.valid.as_mut().map(|b| NullBuffer::new(b.finish()));
        let nulls = NullBuffer::union(input_nulls.as_ref(), kernel_nulls.as_ref())
            .filter(|n| n.null_count() > 0);
        let data = ArrayData::builder(self.element.data_type())
            .len(self.rows)
            .add_buffer(self.values.into())
            .nulls(nulls)
            .build()
            .map_err(|e| RuntimeError::Gpu {
                device: String::new(),
                message: format!("the output does not form an Arrow array: {e}"),
            })?;
        Ok(make_array(data))
    }
}

/// The all-NULL output of `rows` rows of `element`.
pub(crate) fn all_null_output(element: ElementType, rows: usize) -> ArrayRef {
    new_null_array(&element.data_type(), rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use arrow::array::{
        FixedSizeListArray, Float32Array, Float64Array, LargeListArray, ListArray, NullArray,
    };
    use arrow::datatypes::Field;

    use super::*;
    use crate::gpu::bitmap::from_device_bitmap;

    fn f32_of(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn i64_of(bytes: &[u8]) -> Vec<i64> {
        bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn stage(ops: &[HostOperand], rows: Range<usize>, validity: bool) -> (ChunkLayout, Vec<u8>) {
        let layout = ChunkLayout::new("f", ops, rows, false, validity, 8).unwrap();
        let mut buf = vec![0xee; layout.total];
        layout.fill(ops, &mut buf);
        (layout, buf)
    }

    #[test]
    fn primitive_columns_stage_their_sliced_rows() {
        let array = Float64Array::from(vec![
            Some(0.0),
            Some(1.0),
            None,
            Some(3.0),
            Some(4.0),
            Some(5.0),
        ])
        .slice(1, 5);
        let op = HostOperand::new("f", 1, &Operand::Column(Arc::new(array)), 5).unwrap();
        assert!(matches!(op.layout, Layout::Primitive));
        assert_eq!(op.bytes_per_row(5, true), 9);
        let (layout, buf) = stage(std::slice::from_ref(&op), 1..4, true);
        let regions = layout.columns[0].as_ref().unwrap();
        assert_eq!(regions.elements, 1..4);
        let values: Vec<f64> = buf[regions.values.range()]
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, vec![0.0, 3.0, 4.0]); // the NULL slot holds whatever Arrow has (0)
        let validity = from_device_bitmap(&buf[regions.validity.unwrap().range()], 3).unwrap();
        assert_eq!(
            (0..3).map(|r| validity.is_valid(r)).collect::<Vec<_>>(),
            [false, true, true]
        );
        // Regions are aligned and the output comes last.
        assert_eq!(layout.out_values.offset % REGION_ALIGN, 0);
        assert_eq!(layout.out_values.len, 24);
        assert_eq!(layout.out_validity.len, 4);
        assert!(layout.total >= layout.out_validity.offset + 4);
        // Without validity upload, no region for it.
        let (layout, _) = stage(&[op], 0..5, false);
        assert!(layout.columns[0].as_ref().unwrap().validity.is_none());
    }

    #[test]
    fn fixed_size_lists_stage_whole_rows_and_honour_slices() {
        let rows: Vec<Option<Vec<Option<f32>>>> = (0..6)
            .map(|r| Some((0..3).map(|e| Some((r * 10 + e) as f32)).collect()))
            .collect();
        let array =
            FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(rows, 3).slice(2, 4);
        let op = HostOperand::new("f", 1, &Operand::Column(Arc::new(array)), 4).unwrap();
        assert_eq!(op.list_size(), Some(3));
        assert_eq!(op.bytes_per_row(4, true), 12);
        let (layout, buf) = stage(&[op], 1..3, true);
        let regions = layout.columns[0].as_ref().unwrap();
        assert!(regions.offsets.is_none());
        assert_eq!(
            f32_of(&buf[regions.values.range()]),
            vec![30.0, 31.0, 32.0, 40.0, 41.0, 42.0]
        );
    }

    #[test]
    fn ragged_lists_stage_rebased_offsets() {
        let array = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
            Some(vec![Some(1.0)]),
            Some(vec![Some(2.0), Some(3.0)]),
            None,
            Some(vec![]),
            Some(vec![Some(4.0), Some(5.0), Some(6.0)]),
        ])
        .slice(1, 4);
        let op = HostOperand::new("f", 1, &Operand::Column(Arc::new(array)), 4).unwrap();
        assert!(matches!(op.layout, Layout::Offsets(_)));
        let (layout, buf) = stage(&[op], 1..4, true);
        let regions = layout.columns[0].as_ref().unwrap();
        assert_eq!(
            i64_of(&buf[regions.offsets.unwrap().range()]),
            vec![0, 0, 0, 3]
        );
        assert_eq!(f32_of(&buf[regions.values.range()]), vec![4.0, 5.0, 6.0]);
        let validity = from_device_bitmap(&buf[regions.validity.unwrap().range()], 3).unwrap();
        assert_eq!(
            (0..3).map(|r| validity.is_valid(r)).collect::<Vec<_>>(),
            [false, true, true]
        );
    }

    #[test]
    fn uniform_lists_and_list_scalars_become_fixed() {
        let uniform = LargeListArray::from_iter_primitive::<Float64Type, _, _>(vec![
            Some(vec![Some(0.0), Some(0.5)]),
            Some(vec![Some(1.0), Some(1.5)]),
            Some(vec![Some(2.0), Some(2.5)]),
        ])
        .slice(1, 2);
        let op = HostOperand::new("f", 1, &Operand::Column(Arc::new(uniform)), 2).unwrap();
        assert_eq!(op.list_size(), Some(2));
        let (layout, buf) = stage(&[op], 0..2, false);
        let values: Vec<f64> = buf[layout.columns[0].as_ref().unwrap().values.range()]
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, vec![1.0, 1.5, 2.0, 2.5]);
        // A scalar is one row, hence always uniform; it stages only in the scalar layout.
        let query = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
            Some(vec![Some(9.0)]),
            Some(vec![Some(7.0), Some(8.0)]),
        ])
        .slice(1, 1);
        let op = HostOperand::new("f", 2, &Operand::Scalar(Arc::new(query)), 100).unwrap();
        assert_eq!(op.list_size(), Some(2));
        assert_eq!(op.bytes_per_row(100, true), 0);
        let chunk =
            ChunkLayout::new("f", std::slice::from_ref(&op), 0..50, false, true, 8).unwrap();
        assert!(chunk.columns[0].is_none());
        let once = ChunkLayout::new("f", std::slice::from_ref(&op), 0..1, true, true, 8).unwrap();
        let mut buf = vec![0; once.total];
        once.fill(&[op], &mut buf);
        assert_eq!(
            f32_of(&buf[once.columns[0].as_ref().unwrap().values.range()]),
            vec![7.0, 8.0]
        );
    }

    #[test]
    fn null_typed_and_null_scalar_operands_are_all_null() {
        let nulls =
            HostOperand::new("f", 1, &Operand::Column(Arc::new(NullArray::new(3))), 3).unwrap();
        assert!(nulls.all_null());
        let scalar = Operand::Scalar(Arc::new(Float64Array::from(vec![None::<f64>])));
        assert!(HostOperand::new("f", 1, &scalar, 3).unwrap().all_null());
        let layout = ChunkLayout::new("f", &[nulls], 0..3, false, true, 8).unwrap();
        assert!(layout.columns[0].is_none());
    }

    #[test]
    fn unsupported_or_misfit_operands_are_invalid_arguments() {
        let strings = Operand::Column(Arc::new(arrow::array::StringArray::from(vec!["a"])));
        let e = HostOperand::new("f", 2, &strings, 1).unwrap_err();
        assert_eq!(e.code(), RuntimeError::INVALID_ARGUMENT);
        assert!(
            e.to_string()
                .contains("argument 2 is Utf8, which cannot go to the GPU"),
            "{e}"
        );
        let short = Operand::Column(Arc::new(Float32Array::from(vec![1.0f32])));
        let e = HostOperand::new("f", 1, &short, 2).unwrap_err();
        assert!(e.to_string().contains("argument 1 has 1 values"), "{e}");
        let list_of_strings = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Utf8, true)),
            arrow::buffer::OffsetBuffer::from_lengths([1]),
            Arc::new(arrow::array::StringArray::from(vec!["x"])),
            None,
        );
        let e =
            HostOperand::new("f", 1, &Operand::Column(Arc::new(list_of_strings)), 1).unwrap_err();
        assert_eq!(e.code(), RuntimeError::INVALID_ARGUMENT);
    }

    #[test]
    fn outputs_join_in_order_with_kernel_and_input_validity() {
        let mut out = OutputAssembler::new(ElementType::F64, 5);
        let bytes = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        out.append(2, &bytes(&[1.0, 2.0]), None).unwrap();
        // The second chunk's kernel made row 1 of it (row 3 overall) NULL.
        out.append(3, &bytes(&[3.0, 4.0, 5.0, 99.0]), Some(&[0b101, 0, 0, 0]))
            .unwrap();
        let input = NullBuffer::from(vec![true, false, true, true, true]);
        let array = out.finish(Some(input)).unwrap();
        let array = array.as_primitive::<Float64Type>();
        assert_eq!(array.len(), 5);
        assert_eq!(array.values().to_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
        let valid: Vec<bool> = (0..5).map(|r| array.is_valid(r)).collect();
        assert_eq!(valid, [true, false, true, false, true]);
    }

    #[test]
    fn outputs_must_have_exactly_the_rows() {
        let mut out = OutputAssembler::new(ElementType::F32, 3);
        assert!(out.append(2, &[0; 7], None).is_err()); // too few bytes
        out.append(2, &[0; 8], None).unwrap();
        assert!(out.append(2, &[0; 8], None).is_err()); // more rows than the batch
        assert!(out.finish(None).is_err()); // fewer rows than the batch
        let empty = OutputAssembler::new(ElementType::I64, 0)
            .finish(None)
            .unwrap();
        assert_eq!((empty.len(), empty.data_type()), (0, &DataType::Int64));
        assert_eq!(all_null_output(ElementType::F64, 4).null_count(), 4);
    }

    #[test]
    fn large_copies_are_split_but_exact() {
        let src: Vec<u8> = (0..9 << 20).map(|i: usize| (i * 31 % 251) as u8).collect();
        let mut dst = vec![0; src.len()];
        copy_parallel(&mut dst, &src);
        assert!(dst == src);
        let mut short = vec![0; 10];
        copy_parallel(&mut short, &src);
        assert_eq!(short, src[..10]);
    }
}
