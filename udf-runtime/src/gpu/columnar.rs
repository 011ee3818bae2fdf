//! The GPU implementation contract: [`GpuColumnarKernel`] (device columns in, one column out)
//! and the device-side types it works on — [`DeviceArray`], [`DeviceOperand`], [`DeviceColumn`].
//!
//! This is RAPIDS' `evaluateColumnar`, improved: scalar arguments arrive as scalars (uploaded once
//! per run, never replicated into columns), intermediates are freed by ownership (a `CudaSlice`
//! frees its memory, stream-ordered, when dropped), the runtime splits batches that do not fit
//! and retries them smaller, and an output of the wrong type or length is an error rather than
//! undefined behaviour. [`super::GpuDevice::run_columnar`] drives a kernel over a batch.

use std::sync::Arc;

use arrow::datatypes::DataType;
use cudarc::driver::{CudaSlice, CudaStream};

use super::GpuDevice;
use super::bitmap::device_bitmap_bytes;
use crate::{Result, RuntimeError};

/// A fixed-width element type a device buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// `float` (Arrow `Float32`).
    F32,
    /// `double` (Arrow `Float64`).
    F64,
    /// `int` (Arrow `Int32`).
    I32,
    /// `long long` (Arrow `Int64`).
    I64,
}

impl ElementType {
    /// The element type of Arrow type `data_type`, if it is one of ours.
    pub fn of(data_type: &DataType) -> Option<Self> {
        match data_type {
            DataType::Float32 => Some(Self::F32),
            DataType::Float64 => Some(Self::F64),
            DataType::Int32 => Some(Self::I32),
            DataType::Int64 => Some(Self::I64),
            _ => None,
        }
    }

    /// The Arrow type.
    pub fn data_type(self) -> DataType {
        match self {
            Self::F32 => DataType::Float32,
            Self::F64 => DataType::Float64,
            Self::I32 => DataType::Int32,
            Self::I64 => DataType::Int64,
        }
    }

    /// Bytes per element.
    pub fn width(self) -> usize {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::F64 | Self::I64 => 8,
        }
    }

    /// Short name, used in kernel names: `f32`, `f64`, `i32`, `i64`.
    pub fn short_name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::I32 => "i32",
            Self::I64 => "i64",
        }
    }
}

/// One operand's rows on the device: a primitive column, or a list column flattened into its
/// elements.
///
/// Buffers are untyped device bytes; pass them to a kernel as pointers to
/// [`DeviceArray::element_type`] (`float*`, `double*`, …):
/// - `values`: the elements of these rows back to back, starting with row 0's (one per row for a
///   primitive column);
/// - for a list whose rows all have the same length ([`DeviceArray::list_size`] is `Some(d)`,
///   always so for `FixedSizeList` and for scalars), row `r` is elements `r·d .. (r+1)·d`;
/// - otherwise [`DeviceArray::offsets`] holds `rows + 1` `long long` offsets into `values`
///   (starting at 0): row `r` is elements `offsets[r] .. offsets[r+1]`;
/// - [`DeviceArray::validity`]: the row bitmap (see [`super::bitmap`]) when the kernel handles
///   NULLs itself ([`GpuColumnarKernel::propagates_nulls`] is false) and the operand has NULLs;
///   `None` means every row is valid, or that the runtime handles NULLs.
///
/// Element-level NULLs inside lists are not uploaded: a kernel that must see them folds them into
/// the row validity before the run (as `vector_similarity` does).
#[derive(Debug)]
pub struct DeviceArray {
    pub(crate) data_type: DataType,
    pub(crate) element: ElementType,
    pub(crate) rows: usize,
    pub(crate) list_size: Option<usize>,
    pub(crate) values: CudaSlice<u8>,
    pub(crate) offsets: Option<CudaSlice<u8>>,
    pub(crate) validity: Option<CudaSlice<u8>>,
}

impl DeviceArray {
    /// The operand's Arrow type, e.g. `FixedSizeList(Float32, 768)`.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The type of the elements in [`DeviceArray::values`].
    pub fn element_type(&self) -> ElementType {
        self.element
    }

    /// Rows held: the chunk's rows for a column, 1 for a scalar.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Elements per row when every row has the same number (primitive columns: `None`).
    pub fn list_size(&self) -> Option<usize> {
        self.list_size
    }

    /// Whether this is a list operand.
    pub fn is_list(&self) -> bool {
        self.list_size.is_some() || self.offsets.is_some()
    }

    /// The element values (at least one byte long, even when there are no elements).
    pub fn values(&self) -> &CudaSlice<u8> {
        &self.values
    }

    /// `rows + 1` `long long` list offsets, for lists of varying lengths.
    pub fn offsets(&self) -> Option<&CudaSlice<u8>> {
        self.offsets.as_ref()
    }

    /// The row validity bitmap, when uploaded (see the type's documentation).
    pub fn validity(&self) -> Option<&CudaSlice<u8>> {
        self.validity.as_ref()
    }
}

/// One argument of a kernel call on the device.
#[derive(Debug, Clone, Copy)]
pub enum DeviceOperand<'a> {
    /// One value per row of the chunk.
    Column(&'a DeviceArray),
    /// One value for every row (uploaded once per run and shared by its chunks).
    Scalar(&'a DeviceArray),
}

impl<'a> DeviceOperand<'a> {
    /// The array.
    pub fn array(&self) -> &'a DeviceArray {
        match self {
            Self::Column(a) | Self::Scalar(a) => a,
        }
    }

    /// Whether this is a scalar.
    pub fn is_scalar(&self) -> bool {
        matches!(self, Self::Scalar(_))
    }

    /// `1` for a scalar, `0` for a column: the `int` flag the built-in kernels take after each
    /// operand's pointer (row `r` reads index `is_scalar ? 0 : r`).
    pub fn scalar_flag(&self) -> i32 {
        i32::from(self.is_scalar())
    }
}

/// A kernel's output for one chunk: `rows` values of one element type and, optionally, a row
/// validity bitmap (see [`super::bitmap`]) for rows the kernel itself makes NULL.
#[derive(Debug)]
pub struct DeviceColumn {
    element: ElementType,
    rows: usize,
    values: CudaSlice<u8>,
    validity: Option<CudaSlice<u8>>,
}

impl DeviceColumn {
    /// Allocates an output of `rows` values of `element` on `stream` (values uninitialised: the
    /// kernel must write every row), with a zeroed validity bitmap when `with_validity` (the
    /// kernel sets the bits of valid rows).
    pub fn alloc(
        device: &GpuDevice,
        stream: &Arc<CudaStream>,
        element: ElementType,
        rows: usize,
        with_validity: bool,
    ) -> Result<Self> {
        let bytes = rows.saturating_mul(element.width()).max(1);
        // SAFETY: the memory is uninitialised; it is device memory that only kernels write and
        // only the runtime reads back, after the kernel wrote every row (the contract above).
        let values = unsafe { stream.alloc::<u8>(bytes) }
            .map_err(|e| device.error("allocating the output", e))?;
        let validity = if with_validity {
            let words = device_bitmap_bytes(rows).max(4);
            Some(
                stream
                    .alloc_zeros::<u8>(words)
                    .map_err(|e| device.error("allocating the output validity", e))?,
            )
        } else {
            None
        };
        Ok(Self {
            element,
            rows,
            values,
            validity,
        })
    }

    /// An output made of buffers the kernel allocated itself: `values` holds `rows` elements,
    /// `validity` (if any) [`device_bitmap_bytes`]`(rows)` bytes. The runtime checks both.
    pub fn from_parts(
        element: ElementType,
        rows: usize,
        values: CudaSlice<u8>,
        validity: Option<CudaSlice<u8>>,
    ) -> Self {
        Self {
            element,
            rows,
            values,
            validity,
        }
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element
    }

    /// Rows this output claims to hold.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The values (pass as the kernel's output pointer).
    pub fn values(&self) -> &CudaSlice<u8> {
        &self.values
    }

    /// The values, mutably (pass as the kernel's output pointer).
    pub fn values_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.values
    }

    /// The validity bitmap, if the output has one.
    pub fn validity(&self) -> Option<&CudaSlice<u8>> {
        self.validity.as_ref()
    }

    /// The validity bitmap, mutably.
    pub fn validity_mut(&mut self) -> Option<&mut CudaSlice<u8>> {
        self.validity.as_mut()
    }

    /// Values and validity, both mutably (for a kernel that writes both).
    pub fn buffers_mut(&mut self) -> (&mut CudaSlice<u8>, Option<&mut CudaSlice<u8>>) {
        (&mut self.values, self.validity.as_mut())
    }
}

/// A GPU implementation of a columnar function: the optional GPU side of a Rust UDF, beside its
/// mandatory CPU implementation.
///
/// [`GpuDevice::run_columnar`] calls [`GpuColumnarKernel::evaluate_columnar`] once per chunk of
/// the batch, with the chunk's columns and the run's scalars already on the device, on one of
/// the device's streams; the kernel enqueues its work on that stream (never synchronizing it, so
/// the runtime can overlap this chunk's copies with another's compute) and returns the output
/// column, which the runtime checks, copies back and joins with the other chunks' outputs.
///
/// A kernel must be deterministic per row and must not depend on how the batch is chunked.
pub trait GpuColumnarKernel: Send + Sync {
    /// The function's name, for error messages (e.g. `cosine_similarity`).
    fn name(&self) -> &str;

    /// The type of the output column (Float32, Float64, Int32 or Int64).
    fn output_type(&self) -> DataType;

    /// Whether a NULL in any argument makes the row NULL (SQL's usual rule; the default). The
    /// runtime then handles NULLs entirely: it does not upload validity, ANDs the arguments'
    /// validity into the output's, and answers a NULL scalar with an all-NULL column without
    /// running the kernel. When `false`, each operand's validity is uploaded and the kernel
    /// decides (its output validity is taken as is).
    fn propagates_nulls(&self) -> bool {
        true
    }

    /// Device bytes the kernel allocates per row beyond its output (scratch), so that chunks are
    /// sized to fit. Default 0.
    fn scratch_bytes_per_row(&self) -> usize {
        0
    }

    /// Computes `rows` rows from `args` (in call order), enqueued on `stream`.
    ///
    /// Errors from CUDA calls go through [`GpuDevice::error`], which turns out-of-memory into
    /// [`RuntimeError::GpuOutOfMemory`]: the runtime then retries with a smaller chunk.
    fn evaluate_columnar(
        &self,
        device: &GpuDevice,
        stream: &Arc<CudaStream>,
        rows: usize,
        args: &[DeviceOperand<'_>],
    ) -> Result<DeviceColumn>;
}

/// Checks a kernel's output for a chunk of `rows` rows against its declared `output_type`:
/// the element type, the row count and both buffers' sizes must match exactly.
pub fn check_output(
    kernel: &str,
    device: &str,
    output_type: &DataType,
    rows: usize,
    output: &DeviceColumn,
) -> Result<()> {
    check_output_shape(
        kernel,
        device,
        output_type,
        rows,
        output.element,
        output.rows,
        output.values.len(),
        output.validity.as_ref().map(|v| v.len()),
    )
}

/// [`check_output`] on the output's sizes (testable without a device).
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_output_shape(
    kernel: &str,
    device: &str,
    output_type: &DataType,
    rows: usize,
    element: ElementType,
    output_rows: usize,
    values_bytes: usize,
    validity_bytes: Option<usize>,
) -> Result<()> {
    let wrong = |message: String| {
        Err(RuntimeError::Gpu {
            device: device.to_string(),
            message: format!("the GPU implementation of {kernel} {message}"),
        })
    };
    if element.data_type() != *output_type {
        return wrong(format!(
            "returned {} values where it declares {output_type}",
            element.data_type()
        ));
    }
    if output_rows != rows {
        return wrong(format!("returned {output_rows} rows for a chunk of {rows}"));
    }
    let want = rows * element.width();
    // A zero-row output still owns one byte (CUDA allocations are never empty).
    if values_bytes != want && !(rows == 0 && values_bytes <= 1) {
        return wrong(format!(
            "returned {values_bytes} bytes of values for {rows} rows of {output_type} ({want} expected)"
        ));
    }
    if let Some(v) = validity_bytes {
        let want = device_bitmap_bytes(rows);
        if v != want && !(rows == 0 && v <= 4) {
            return wrong(format!(
                "returned a {v}-byte validity bitmap for {rows} rows ({want} expected)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn element_types_map_to_arrow() {
        for e in [
            ElementType::F32,
            ElementType::F64,
            ElementType::I32,
            ElementType::I64,
        ] {
            assert_eq!(ElementType::of(&e.data_type()), Some(e));
            assert_eq!(e.data_type().primitive_width(), Some(e.width()));
        }
        assert_eq!(ElementType::of(&DataType::Utf8), None);
        assert_eq!(ElementType::F32.short_name(), "f32");
    }

    #[test]
    fn outputs_of_the_wrong_type_or_length_are_errors() {
        let check = |element, out_rows, values, validity| {
            check_output_shape(
                "f",
                "0 (GPU-x)",
                &DataType::Float64,
                10,
                element,
                out_rows,
                values,
                validity,
            )
        };
        assert!(check(ElementType::F64, 10, 80, None).is_ok());
        assert!(check(ElementType::F64, 10, 80, Some(4)).is_ok());
        let e = check(ElementType::F32, 10, 40, None).unwrap_err();
        assert_eq!(e.code(), RuntimeError::GPU);
        assert!(
            e.to_string()
                .contains("returned Float32 values where it declares Float64"),
            "{e}"
        );
        let e = check(ElementType::F64, 9, 72, None).unwrap_err();
        assert!(
            e.to_string().contains("returned 9 rows for a chunk of 10"),
            "{e}"
        );
        let e = check(ElementType::F64, 10, 79, None).unwrap_err();
        assert!(
            e.to_string().contains("79 bytes of values for 10 rows"),
            "{e}"
        );
        let e = check(ElementType::F64, 10, 88, None).unwrap_err();
        assert!(e.to_string().contains("(80 expected)"), "{e}");
        let e = check(ElementType::F64, 10, 80, Some(8)).unwrap_err();
        assert!(
            e.to_string().contains("8-byte validity bitmap for 10 rows"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "[58U22] GPU error on device 0 (GPU-x): the GPU implementation of f returned a 8-byte \
             validity bitmap for 10 rows (4 expected)"
        );
    }
}
