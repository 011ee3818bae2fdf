//! `cosine_similarity`, `dot_product` and `l2_distance` on the GPU: the kernels in
//! `cuda/vectors.cu` and their Rust entry point, which checks and prepares the vectors on the
//! host exactly as the CPU kernel ([`crate::kernels::vectors`]) would see them.

use std::sync::Arc;

use accelsql_gpu_scheduler::DeviceInfo;
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBufferBuilder, FixedSizeListArray, Float64Array,
    LargeListArray, ListArray,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef};
use cudarc::driver::{CudaStream, PushKernelArg};

use super::launch::{arguments, float64, rows_arg, warp_per_row};
use super::{DeviceColumn, DeviceOperand, ElementType, GpuColumnarKernel, GpuDevice, KernelSource};
use crate::Result;
use crate::kernels::vectors::{VectorOp, Vectors};
use crate::kernels::{Operand, check_rows, invalid_argument};

/// The CUDA source of the vector kernels.
pub fn vectors_source() -> KernelSource {
    KernelSource::new("vectors", include_str!("cuda/vectors.cu")).with_option("--fmad=false")
}

/// `op` of vectors `a` and `b`, row by row, on `device`, with the semantics of the CPU kernel
/// [`crate::kernels::vectors::vector_similarity`]: NULL for a NULL vector, a NULL element or
/// (cosine) a zero norm; an error for vectors of different lengths (the same error, naming the
/// first such row); sums in `f64`. Only the order of the additions differs (a warp adds 32
/// strided partial sums), so values agree to rounding, about 1e-15 relative for well-conditioned
/// sums.
///
/// `a` and `b` are `List`, `LargeList` or `FixedSizeList` of FLOAT or DOUBLE (they may differ),
/// columns or scalars; `b` is usually the scalar query vector, uploaded once.
pub fn vector_similarity(
    device: &DeviceInfo,
    op: VectorOp,
    rows: usize,
    a: &Operand,
    b: &Operand,
) -> Result<Float64Array> {
    let function = op.name();
    check_rows(function, 1, a, rows)?;
    check_rows(function, 2, b, rows)?;
    let va = VectorArg::new(function, 1, a)?;
    let vb = VectorArg::new(function, 2, b)?;
    check_lengths(function, rows, &va, &vb)?;
    let gpu = GpuDevice::open(device)?;
    let args = [va.prepared(function)?, vb.prepared(function)?];
    let out = gpu.run_columnar(&Similarity(op), rows, &args)?;
    float64(&gpu, function, out)
}

/// One vector argument, viewed (without copying) for the host-side checks: the CPU kernel's
/// view, so types and layouts are read, and rejected, alike.
#[derive(Debug)]
struct VectorArg<'a> {
    operand: &'a Operand,
    scalar: bool,
    vectors: Vectors<'a>,
}

impl<'a> VectorArg<'a> {
    /// Checks the type of argument `position` as the CPU kernel does (same messages).
    fn new(function: &str, position: usize, operand: &'a Operand) -> Result<Self> {
        Ok(Self {
            operand,
            scalar: matches!(operand, Operand::Scalar(_)),
            vectors: Vectors::new(function, position, operand.array())?,
        })
    }

    /// The array index holding `row`'s vector.
    fn index(&self, row: usize) -> usize {
        if self.scalar { 0 } else { row }
    }

    /// The length every vector has, when that is known without looking at rows.
    fn uniform_len(&self) -> Option<usize> {
        self.vectors.fixed_len().or_else(|| {
            (self.scalar && self.vectors.values().is_some()).then(|| self.vectors.range(0).len())
        })
    }

    /// Whether vector `i` has a NULL element.
    fn has_null_element(&self, i: usize) -> bool {
        self.vectors.has_null_element(&self.vectors.range(i))
    }

    /// The operand as the device gets it: vectors with a NULL element made NULL rows, and a list
    /// of `Null` elements given DOUBLE elements (all of them NULL, so only its empty vectors,
    /// whose sums are empty, keep a value).
    fn prepared(&self, function: &str) -> Result<Operand> {
        let Some(list_values) = self.vectors.values() else {
            return Ok(self.operand.clone());
        };
        if !self.vectors.may_have_null_elements() {
            return Ok(self.operand.clone());
        }
        let array = self.operand.array();
        let mut valid = BooleanBufferBuilder::new(array.len());
        for i in 0..array.len() {
            valid.append(!self.vectors.is_null(i) && !self.has_null_element(i));
        }
        let nulls = NullBuffer::new(valid.finish());
        let values: ArrayRef = if *list_values.data_type() == DataType::Null {
            Arc::new(Float64Array::from(vec![0.0; list_values.len()]))
        } else {
            Arc::clone(list_values)
        };
        let rebuilt = rebuild(array, values, nulls)
            .map_err(|e| invalid_argument(function, format!("a malformed vector argument: {e}")))?;
        Ok(match self.operand {
            Operand::Column(_) => Operand::Column(rebuilt),
            Operand::Scalar(_) => Operand::Scalar(rebuilt),
        })
    }
}

/// The element field of a list whose elements become `values`.
fn element_field(field: &FieldRef, values: &ArrayRef) -> FieldRef {
    if field.data_type() == values.data_type() {
        Arc::clone(field)
    } else {
        Arc::new(Field::new(field.name(), values.data_type().clone(), true))
    }
}

/// `array` (a list) with elements `values` and row validity `nulls`.
fn rebuild(
    array: &ArrayRef,
    values: ArrayRef,
    nulls: NullBuffer,
) -> std::result::Result<ArrayRef, String> {
    let malformed = || "not the list its type says".to_string();
    Ok(match array.data_type() {
        DataType::List(field) => {
            let list = array.as_list_opt::<i32>().ok_or_else(malformed)?;
            let field = element_field(field, &values);
            Arc::new(
                ListArray::try_new(field, list.offsets().clone(), values, Some(nulls))
                    .map_err(|e| e.to_string())?,
            )
        }
        DataType::LargeList(field) => {
            let list = array.as_list_opt::<i64>().ok_or_else(malformed)?;
            let field = element_field(field, &values);
            Arc::new(
                LargeListArray::try_new(field, list.offsets().clone(), values, Some(nulls))
                    .map_err(|e| e.to_string())?,
            )
        }
        DataType::FixedSizeList(field, size) => {
            let field = element_field(field, &values);
            Arc::new(
                FixedSizeListArray::try_new(field, *size, values, Some(nulls))
                    .map_err(|e| e.to_string())?,
            )
        }
        _ => return Err(malformed()),
    })
}

/// The CPU kernel's length check, row by row in order: the first row where neither vector is
/// NULL and their lengths differ is an error.
fn check_lengths(function: &str, rows: usize, a: &VectorArg<'_>, b: &VectorArg<'_>) -> Result<()> {
    if let (Some(x), Some(y)) = (a.uniform_len(), b.uniform_len())
        && x == y
    {
        return Ok(());
    }
    // Two scalars: the CPU computes (and checks) one row for the whole batch.
    let checked = if a.scalar && b.scalar {
        rows.min(1)
    } else {
        rows
    };
    for row in 0..checked {
        let (ia, ib) = (a.index(row), b.index(row));
        if a.vectors.is_null(ia) || b.vectors.is_null(ib) {
            continue;
        }
        let (la, lb) = (a.vectors.range(ia).len(), b.vectors.range(ib).len());
        if la != lb {
            return Err(invalid_argument(
                function,
                format!(
                    "vectors of different lengths ({la} and {lb}) in row {} of the batch",
                    row + 1
                ),
            ));
        }
    }
    Ok(())
}

/// The [`GpuColumnarKernel`] of the three vector functions.
struct Similarity(VectorOp);

/// The `long long dim` argument of a vector operand (0 when it has offsets instead).
fn dim_arg(device: &GpuDevice, array: &super::DeviceArray) -> Result<i64> {
    match (array.list_size(), array.offsets()) {
        (Some(size), _) => i64::try_from(size).map_err(|_| device.fail("a vector is too long")),
        (None, Some(_)) => Ok(0),
        (None, None) => Err(device.fail(format!(
            "a vector argument of type {} reached the device without its layout",
            array.data_type()
        ))),
    }
}

impl GpuColumnarKernel for Similarity {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn output_type(&self) -> DataType {
        DataType::Float64
    }

    fn evaluate_columnar(
        &self,
        device: &GpuDevice,
        stream: &Arc<CudaStream>,
        rows: usize,
        args: &[DeviceOperand<'_>],
    ) -> Result<DeviceColumn> {
        let [a, b] = arguments(device, self.name(), args)?;
        let (xa, xb) = (a.array(), b.array());
        for x in [xa, xb] {
            if !matches!(x.element_type(), ElementType::F32 | ElementType::F64) {
                return Err(device.fail(format!(
                    "{}: vectors of {} cannot go to the GPU",
                    self.name(),
                    x.element_type().data_type()
                )));
            }
        }
        let name = format!(
            "vector_similarity_{}_{}",
            xa.element_type().short_name(),
            xb.element_type().short_name()
        );
        let function = device.function(&vectors_source(), &name)?;
        let cfg = warp_per_row(device, rows)?;
        let n = rows_arg(device, rows)?;
        let dims = [dim_arg(device, xa)?, dim_arg(device, xb)?];
        let flags = [a.scalar_flag(), b.scalar_flag()];
        let op: i32 = match self.0 {
            VectorOp::Cosine => 0,
            VectorOp::Dot => 1,
            VectorOp::L2 => 2,
        };
        // A null `long long*`: the operand has a fixed length instead of offsets.
        let no_offsets: u64 = 0;
        let mut out = DeviceColumn::alloc(device, stream, ElementType::F64, rows, true)?;
        let (values, validity) = out.buffers_mut();
        let Some(validity) = validity else {
            return Err(device.fail("the output has no validity bitmap"));
        };
        let mut launch = stream.launch_builder(&function);
        // The order and types of `vector_similarity_*` in cuda/vectors.cu.
        launch.arg(xa.values());
        match xa.offsets() {
            Some(offsets) => launch.arg(offsets),
            None => launch.arg(&no_offsets),
        };
        launch.arg(&dims[0]).arg(&flags[0]);
        launch.arg(xb.values());
        match xb.offsets() {
            Some(offsets) => launch.arg(offsets),
            None => launch.arg(&no_offsets),
        };
        launch.arg(&dims[1]).arg(&flags[1]);
        launch.arg(&n).arg(&op).arg(values).arg(validity);
        // SAFETY: the arguments match the kernel's parameters in number, order and type
        // (A*, long long*, long long, int; B*, long long*, long long, int; long long; int;
        // double*; unsigned int*), with A and B the element types the name was chosen by. Each
        // operand's rows lie within its values: `rows` rows of `dim` elements, or the offsets
        // (rows + 1 of them, within the values) — for a scalar, one row; the kernel reads the
        // shorter of two vectors' lengths, so even a NULL row with a different length stays in
        // bounds. The output holds `rows` doubles and a zeroed bitmap of whole words, and the
        // kernel writes only rows below `rows`.
        unsafe { launch.launch(cfg) }
            .map_err(|e| device.error("launching vector_similarity", e))?;
        drop(launch);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use arrow::array::{Float32Builder, ListBuilder, NullArray};
    use arrow::datatypes::Float32Type;

    use super::*;
    use crate::RuntimeError;

    fn list(rows: Vec<Option<Vec<Option<f32>>>>) -> ArrayRef {
        Arc::new(ListArray::from_iter_primitive::<Float32Type, _, _>(rows))
    }

    #[test]
    fn lengths_are_checked_like_the_cpu_kernel() {
        let a = Operand::Column(list(vec![
            Some(vec![Some(1.0), Some(2.0)]),
            None,
            Some(vec![Some(1.0)]),
        ]));
        let b = Operand::Scalar(list(vec![Some(vec![Some(1.0), Some(1.0)])]));
        let (va, vb) = (
            VectorArg::new("f", 1, &a).unwrap(),
            VectorArg::new("f", 2, &b).unwrap(),
        );
        let e = check_lengths("f", 3, &va, &vb).unwrap_err();
        assert_eq!(e.code(), RuntimeError::INVALID_ARGUMENT);
        assert!(
            e.to_string()
                .contains("vectors of different lengths (1 and 2) in row 3 of the batch"),
            "{e}"
        );
        // The CPU agrees, word for word.
        let cpu = crate::kernels::vectors::vector_similarity(VectorOp::Dot, 3, &a, &b).unwrap_err();
        assert_eq!(
            cpu.to_string(),
            e.to_string().replace("[22U20] f:", "[22U20] dot_product:")
        );
        // A NULL row is never checked; a NULL-typed argument never errs.
        let short = Operand::Column(list(vec![Some(vec![Some(1.0), Some(2.0)]), None, None]));
        let vs = VectorArg::new("f", 1, &short).unwrap();
        assert!(check_lengths("f", 3, &vs, &vb).is_ok());
        let nulls = Operand::Column(Arc::new(NullArray::new(3)));
        let vn = VectorArg::new("f", 1, &nulls).unwrap();
        assert!(check_lengths("f", 3, &va, &vn).is_ok());
    }

    #[test]
    fn types_are_checked_like_the_cpu_kernel() {
        let ints = Operand::Column(Arc::new(arrow::array::Int32Array::from(vec![1])));
        let e = VectorArg::new("cosine_similarity", 2, &ints).unwrap_err();
        let b = Operand::Scalar(list(vec![Some(vec![Some(1.0)])]));
        let cpu =
            crate::kernels::vectors::vector_similarity(VectorOp::Cosine, 1, &b, &ints).unwrap_err();
        assert_eq!(e.to_string(), cpu.to_string());
    }

    #[test]
    fn null_elements_become_null_rows() {
        let mut builder = ListBuilder::new(Float32Builder::new());
        builder.values().append_value(1.0);
        builder.values().append_null();
        builder.append(true);
        builder.values().append_value(2.0);
        builder.append(true);
        builder.append(false);
        let array: ArrayRef = Arc::new(builder.finish());
        let a = Operand::Column(array);
        let prepared = VectorArg::new("f", 1, &a).unwrap().prepared("f").unwrap();
        let got = prepared.array();
        assert_eq!(got.len(), 3);
        assert!(got.is_null(0) && got.is_valid(1) && got.is_null(2));
        // Without NULL elements the operand is passed on untouched.
        let clean = Operand::Column(list(vec![Some(vec![Some(1.0)])]));
        let same = VectorArg::new("f", 1, &clean)
            .unwrap()
            .prepared("f")
            .unwrap();
        assert!(Arc::ptr_eq(same.array(), clean.array()));
    }

    #[test]
    fn lists_of_null_elements_get_double_elements() {
        let field = Arc::new(Field::new_list_field(DataType::Null, true));
        let offsets = arrow::buffer::OffsetBuffer::from_lengths([2, 0]);
        let array = ListArray::try_new(field, offsets, Arc::new(NullArray::new(2)), None).unwrap();
        let a = Operand::Scalar(Arc::new(array.slice(1, 1)));
        let prepared = VectorArg::new("f", 1, &a).unwrap().prepared("f").unwrap();
        assert!(matches!(prepared, Operand::Scalar(_)));
        let got = prepared.array().as_list::<i32>();
        assert_eq!(got.values().data_type(), &DataType::Float64);
        assert!(got.is_valid(0)); // the empty vector keeps its (empty) value
        let whole = Operand::Column(Arc::new(array));
        let prepared = VectorArg::new("f", 1, &whole)
            .unwrap()
            .prepared("f")
            .unwrap();
        assert!(prepared.array().is_null(0) && prepared.array().is_valid(1));
    }
}
