//! `cosine_similarity`, `dot_product` and `l2_distance` on the CPU, row by row: both arguments
//! viewed, NULLs and lengths checked, the sums taken (semantics in the module documentation).

use std::ops::Range;

use arrow::array::{BooleanBufferBuilder, Float64Array};
use arrow::buffer::NullBuffer;

use super::element::Element;
#[cfg(target_arch = "x86_64")]
use super::sums::Avx2;
use super::sums::{Dot, DotAndNorm, DotAndNorms, Portable, SquaredDistance, Width};
use super::view::{Elements, Vectors};
use crate::Result;
use crate::kernels::{Operand, check_rows, invalid_argument};

/// Which similarity (or distance) of two vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VectorOp {
    /// `cosine_similarity(a, b)`: `a·b / (|a|·|b|)`, NULL when a norm is 0.
    Cosine,
    /// `dot_product(a, b)`: `a·b`.
    Dot,
    /// `l2_distance(a, b)`: `|a − b|`.
    L2,
}

impl VectorOp {
    /// Every operation, in SQL-name order.
    pub const ALL: [VectorOp; 3] = [Self::Cosine, Self::Dot, Self::L2];

    /// The SQL name of the built-in computing it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cosine => "cosine_similarity",
            Self::Dot => "dot_product",
            Self::L2 => "l2_distance",
        }
    }
}

/// `op` of `a` and `b`, row by row: the CPU kernel of `cosine_similarity`, `dot_product` and
/// `l2_distance` (semantics in the module documentation).
///
/// Either side may be a scalar (the query vector of a search, which is never replicated); its
/// norm is computed once.
///
/// ```
/// use std::sync::Arc;
/// use accelsql_udf_runtime::kernels::Operand;
/// use accelsql_udf_runtime::kernels::vectors::{VectorOp, vector_similarity};
/// use arrow::array::{Array, FixedSizeListArray, ListArray};
/// use arrow::datatypes::{Float32Type, Float64Type};
///
/// // Two rows of 2-element FLOAT embeddings against one DOUBLE query vector.
/// let emb = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
///     [Some([Some(1.0), Some(0.0)]), Some([Some(3.0), Some(4.0)])],
///     2,
/// );
/// let query = ListArray::from_iter_primitive::<Float64Type, _, _>([Some([Some(1.0), Some(0.0)])]);
/// let scores = vector_similarity(
///     VectorOp::Cosine,
///     2,
///     &Operand::Column(Arc::new(emb)),
///     &Operand::Scalar(Arc::new(query)),
/// )?;
/// assert_eq!(scores.values().to_vec(), vec![1.0, 0.6]);
/// # Ok::<(), accelsql_udf_runtime::RuntimeError>(())
/// ```
pub fn vector_similarity(
    op: VectorOp,
    rows: usize,
    a: &Operand,
    b: &Operand,
) -> Result<Float64Array> {
    similarity(op.name(), [1, 2], op, rows, a, b, 0)
}

/// [`vector_similarity`] on behalf of `function`, whose arguments `positions` (1-based) `a` and
/// `b` are (for error messages), over rows that messages number from `first_row + 1`.
pub(super) fn similarity(
    function: &str,
    positions: [usize; 2],
    op: VectorOp,
    rows: usize,
    a: &Operand,
    b: &Operand,
    first_row: usize,
) -> Result<Float64Array> {
    check_rows(function, positions[0], a, rows)?;
    check_rows(function, positions[1], b, rows)?;
    let va = Vectors::new(function, positions[0], a.array())?;
    let vb = Vectors::new(function, positions[1], b.array())?;
    let scalar = |o: &Operand| matches!(o, Operand::Scalar(_));
    // Every operation is symmetric: put a column first, so that only the second side can be a
    // scalar (whose norm is then computed once).
    let swapped = scalar(a) && !scalar(b);
    let (x, y) = if swapped {
        ((&vb, scalar(b)), (&va, scalar(a)))
    } else {
        ((&va, scalar(a)), (&vb, scalar(b)))
    };
    let job = Job {
        function,
        op,
        rows,
        first_row,
        swapped,
    };
    match (x.0.elements, y.0.elements) {
        (Elements::F32(p), Elements::F32(q)) => job.run(side(x, p), side(y, q)),
        (Elements::F32(p), Elements::F64(q)) => job.run(side(x, p), side(y, q)),
        (Elements::F64(p), Elements::F32(q)) => job.run(side(x, p), side(y, q)),
        (Elements::F64(p), Elements::F64(q)) => job.run(side(x, p), side(y, q)),
    }
}

/// One side of a computation: its vectors, their elements typed, and whether it is a scalar.
struct Side<'a, T> {
    vectors: &'a Vectors<'a>,
    values: &'a [T],
    scalar: bool,
}

fn side<'a, T>(of: (&'a Vectors<'a>, bool), values: &'a [T]) -> Side<'a, T> {
    Side {
        vectors: of.0,
        values,
        scalar: of.1,
    }
}

impl<'a, T: Element> Side<'a, T> {
    /// The elements in `range`, or why there are none.
    #[inline]
    fn slice(&self, function: &str, range: Range<usize>) -> Result<&'a [T]> {
        self.values.get(range).ok_or_else(|| {
            invalid_argument(
                function,
                "a vector lies outside its array's values (a malformed array)",
            )
        })
    }
}

/// What a row gives before the operation: NULL, or the two vectors.
enum RowInput<'a, A, B> {
    Null,
    Vectors(&'a [A], &'a [B]),
}

/// Both sides' elements, where no row needs a check (see [`Job::dense`]).
enum Dense<'a, A, B> {
    /// A column's elements, its vectors' length, and a scalar vector.
    Scalar(&'a [A], usize, &'a [B]),
    /// Two columns' elements and their vectors' length.
    Columns(&'a [A], usize, &'a [B]),
}

/// One call of [`similarity`], after the arguments are viewed.
struct Job<'f> {
    function: &'f str,
    op: VectorOp,
    rows: usize,
    /// How many rows precede these in what messages call the batch (a group given in chunks).
    first_row: usize,
    /// Whether the sides were swapped (for the order of lengths in messages).
    swapped: bool,
}

impl Job<'_> {
    /// The rows' values: with the AVX2 sums and the row loop compiled for AVX2 where the CPU
    /// has it (the default x86-64 target has only SSE2), else the portable sums. The arithmetic
    /// and its order are the same either way, so the results are identical.
    fn run<A: Element, B: Element>(&self, x: Side<'_, A>, y: Side<'_, B>) -> Result<Float64Array> {
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = Avx2::detect() {
            // SAFETY: `Avx2::detect` found AVX2 on this CPU.
            return unsafe { self.run_avx2(avx2, x, y) };
        }
        self.run_rows(Portable, x, y)
    }

    /// [`Self::run_rows`] with the AVX2 sums, compiled with AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn run_avx2<A: Element, B: Element>(
        &self,
        avx2: Avx2,
        x: Side<'_, A>,
        y: Side<'_, B>,
    ) -> Result<Float64Array> {
        self.run_rows(avx2, x, y)
    }

    /// The row loop, its sums taken by `w` (inlined into each compiled form of [`Self::run`]).
    #[inline(always)]
    fn run_rows<W: Width, A: Element, B: Element>(
        &self,
        w: W,
        x: Side<'_, A>,
        y: Side<'_, B>,
    ) -> Result<Float64Array> {
        // Both scalars: one value for every row.
        let computed = if x.scalar {
            self.rows.min(1)
        } else {
            self.rows
        };
        let mut out = Vec::with_capacity(self.rows);
        let mut valid = BooleanBufferBuilder::new(self.rows);
        // The scalar side's squared norm, once (cosine only).
        let mut y_norm = None;
        if y.scalar && self.op == VectorOp::Cosine && !y.vectors.is_null(0) {
            let range = y.vectors.range(0);
            if !y.vectors.has_null_element(&range) {
                let v = y.slice(self.function, range)?;
                y_norm = Some(w.sums::<Dot, 1, _, _>(v, v)[0]);
            }
        }
        if let Some(dense) = self.dense(&x, &y)? {
            return Ok(match dense {
                Dense::Scalar(xs, size, q) => {
                    self.dense_rows(w, xs.chunks_exact(size), std::iter::repeat(q), y_norm)
                }
                Dense::Columns(xs, size, ys) => {
                    self.dense_rows(w, xs.chunks_exact(size), ys.chunks_exact(size), y_norm)
                }
            });
        }
        for row in 0..computed {
            let value = match self.row_input(&x, &y, row)? {
                RowInput::Null => None,
                RowInput::Vectors(a, b) => self.value(w, a, b, y_norm),
            };
            out.push(value.unwrap_or(0.0));
            valid.append(value.is_some());
        }
        if computed < self.rows {
            let (value, is_valid) = (out.first().copied(), valid.get_bit(0));
            out.resize(self.rows, value.unwrap_or(0.0));
            valid.append_n(self.rows - computed, is_valid);
        }
        let valid = NullBuffer::new(valid.finish());
        let valid = (valid.null_count() > 0).then_some(valid);
        Ok(Float64Array::new(out.into(), valid))
    }

    /// The value of one row's vectors `a` and `b`; `y_norm` is `Σ bᵢ²` where already known.
    #[inline(always)]
    fn value<W: Width, A: Element, B: Element>(
        &self,
        w: W,
        a: &[A],
        b: &[B],
        y_norm: Option<f64>,
    ) -> Option<f64> {
        match self.op {
            VectorOp::Dot => Some(w.sums::<Dot, 1, _, _>(a, b)[0]),
            VectorOp::L2 => Some(w.sums::<SquaredDistance, 1, _, _>(a, b)[0].sqrt()),
            VectorOp::Cosine => {
                let (d, na, nb) = match y_norm {
                    Some(nb) => {
                        let [d, na] = w.sums::<DotAndNorm, 2, _, _>(a, b);
                        (d, na, nb)
                    }
                    None => w.sums::<DotAndNorms, 3, _, _>(a, b).into(),
                };
                (na != 0.0 && nb != 0.0).then(|| d / (na.sqrt() * nb.sqrt()))
            }
        }
    }

    /// The sides' elements where no row needs a check: `x` a column of `size`-element vectors
    /// (`size` > 0) without NULL vectors or elements, `y` a scalar of that many non-NULL
    /// elements or a column like `x`. `None` where some row needs the checks.
    fn dense<'v, A: Element, B: Element>(
        &self,
        x: &Side<'v, A>,
        y: &Side<'v, B>,
    ) -> Result<Option<Dense<'v, A, B>>> {
        let Some(size) = x.vectors.dense_len().filter(|&size| size > 0 && !x.scalar) else {
            return Ok(None);
        };
        let xs = x.slice(self.function, 0..self.rows * size)?;
        if y.scalar {
            if y.vectors.is_null(0) {
                return Ok(None);
            }
            let range = y.vectors.range(0);
            if range.len() != size || y.vectors.has_null_element(&range) {
                return Ok(None);
            }
            return Ok(Some(Dense::Scalar(
                xs,
                size,
                y.slice(self.function, range)?,
            )));
        }
        if y.vectors.dense_len() != Some(size) {
            return Ok(None);
        }
        let ys = y.slice(self.function, 0..self.rows * size)?;
        Ok(Some(Dense::Columns(xs, size, ys)))
    }

    /// The values of dense rows (see [`Self::dense`]): `x`'s vectors, each with `y`'s next.
    #[inline(always)]
    fn dense_rows<'v, W: Width, A: Element + 'v, B: Element + 'v>(
        &self,
        w: W,
        x: impl Iterator<Item = &'v [A]>,
        y: impl Iterator<Item = &'v [B]>,
        y_norm: Option<f64>,
    ) -> Float64Array {
        let mut out = Vec::with_capacity(self.rows);
        // Validity only once a row is NULL (a zero norm); most batches have none.
        let mut valid: Option<BooleanBufferBuilder> = None;
        for (row, (a, b)) in x.zip(y).enumerate() {
            let value = self.value(w, a, b, y_norm);
            if value.is_none() && valid.is_none() {
                let mut v = BooleanBufferBuilder::new(self.rows);
                v.append_n(row, true);
                valid = Some(v);
            }
            if let Some(v) = &mut valid {
                v.append(value.is_some());
            }
            out.push(value.unwrap_or(0.0));
        }
        let valid = valid.map(|mut v| NullBuffer::new(v.finish()));
        Float64Array::new(out.into(), valid)
    }

    /// Row `row`'s two vectors, NULL, or the length-mismatch error.
    #[inline]
    fn row_input<'v, A: Element, B: Element>(
        &self,
        x: &Side<'v, A>,
        y: &Side<'v, B>,
        row: usize,
    ) -> Result<RowInput<'v, A, B>> {
        let (xi, yi) = (
            if x.scalar { 0 } else { row },
            if y.scalar { 0 } else { row },
        );
        if x.vectors.is_null(xi) || y.vectors.is_null(yi) {
            return Ok(RowInput::Null);
        }
        let (xr, yr) = (x.vectors.range(xi), y.vectors.range(yi));
        if xr.len() != yr.len() {
            let (la, lb) = if self.swapped {
                (yr.len(), xr.len())
            } else {
                (xr.len(), yr.len())
            };
            return Err(invalid_argument(
                self.function,
                format!(
                    "vectors of different lengths ({la} and {lb}) in row {} of the batch",
                    self.first_row + row + 1
                ),
            ));
        }
        if x.vectors.has_null_element(&xr) || y.vectors.has_null_element(&yr) {
            return Ok(RowInput::Null);
        }
        Ok(RowInput::Vectors(
            x.slice(self.function, xr)?,
            y.slice(self.function, yr)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        Array, FixedSizeListArray, Float32Array, LargeListArray, ListArray, NullArray,
    };
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Int64Type};

    use super::super::test_support::{Rows, close, list, some};
    use super::*;

    /// The AVX2 sums and row loop against the portable ones, bit for bit: FLOAT and DOUBLE
    /// elements on either side, a scalar or a column second, lengths with and without a tail.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_sums_give_the_portable_sums_results_bit_for_bit() {
        let Some(avx2) = Avx2::detect() else {
            return;
        };
        let value = |i: usize, j: usize| ((i * 31 + j * 17) % 23) as f64 / 7.0 - 1.5;
        let fixed32 = |rows: usize, dim: usize, shift: usize| -> arrow::array::ArrayRef {
            Arc::new(
                FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
                    (0..rows)
                        .map(|i| Some((0..dim).map(move |j| Some(value(i + shift, j) as f32)))),
                    dim as i32,
                ),
            )
        };
        let list64 = |rows: usize, dim: usize, shift: usize| -> arrow::array::ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(
                (0..rows).map(|i| Some((0..dim).map(move |j| Some(value(i + shift, j) / 3.0)))),
            ))
        };
        let bits = |a: &Float64Array| a.values().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let mut compared = 0;
        for dim in [1, 3, 8, 16, 37, 128] {
            let sides = [fixed32(40, dim, 0), list64(40, dim, 5)];
            let queries = [fixed32(1, dim, 11), list64(1, dim, 13)];
            for (a, b, scalar) in sides
                .iter()
                .flat_map(|a| sides.iter().map(move |b| (a, b, false)))
                .chain(
                    sides
                        .iter()
                        .flat_map(|a| queries.iter().map(move |q| (a, q, true))),
                )
            {
                let (va, vb) = (
                    Vectors::new("t", 1, a).unwrap(),
                    Vectors::new("t", 2, b).unwrap(),
                );
                for op in VectorOp::ALL {
                    let job = Job {
                        function: "t",
                        op,
                        rows: 40,
                        first_row: 0,
                        swapped: false,
                    };
                    macro_rules! both {
                        ($p:expr, $q:expr) => {{
                            let (x, y) = (side((&va, false), $p), side((&vb, scalar), $q));
                            let portable = job.run_rows(Portable, x, y).unwrap();
                            let (x, y) = (side((&va, false), $p), side((&vb, scalar), $q));
                            // SAFETY: `Avx2::detect` found AVX2.
                            let wide = unsafe { job.run_avx2(avx2, x, y) }.unwrap();
                            assert_eq!(portable.null_count(), 0);
                            assert_eq!(bits(&portable), bits(&wide), "{op:?}, dim {dim}");
                        }};
                    }
                    match (va.elements, vb.elements) {
                        (Elements::F32(p), Elements::F32(q)) => both!(p, q),
                        (Elements::F32(p), Elements::F64(q)) => both!(p, q),
                        (Elements::F64(p), Elements::F32(q)) => both!(p, q),
                        (Elements::F64(p), Elements::F64(q)) => both!(p, q),
                    }
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 6 * 8 * 3);
    }

    /// Dense columns (no per-row checks) give what the checked row loop gives for the same
    /// vectors as a `List`, bit for bit, including a NULL from a zero norm; a column with one
    /// NULL element or a NULL row takes the checked loop.
    #[test]
    fn dense_rows_give_the_checked_rows_results() {
        let bits = |a: &Float64Array| a.iter().map(|v| v.map(f64::to_bits)).collect::<Vec<_>>();
        for dim in [1usize, 7, 8, 19] {
            let mut rows: Rows = (0..30)
                .map(|i| {
                    Some(
                        (0..dim)
                            .map(|j| Some(((i * 7 + j * 3) % 11) as f64 / 4.0 - 1.0))
                            .collect(),
                    )
                })
                .collect();
            rows[4] = Some(vec![Some(0.0); dim]);
            let dense = col(fixed32(dim as i32, rows.clone()));
            let checked = col(list32(rows.clone()));
            let q = scalar((0..dim).map(|j| j as f64 / 5.0 - 0.7).collect());
            for op in VectorOp::ALL {
                let d = vector_similarity(op, 30, &dense, &q).unwrap();
                assert_eq!(
                    bits(&d),
                    bits(&vector_similarity(op, 30, &checked, &q).unwrap())
                );
                let d = vector_similarity(op, 30, &dense, &dense).unwrap();
                assert_eq!(
                    bits(&d),
                    bits(&vector_similarity(op, 30, &checked, &checked).unwrap())
                );
                // The query first: the sides are swapped, the values the same.
                assert_eq!(
                    bits(&vector_similarity(op, 30, &q, &dense).unwrap()),
                    bits(&vector_similarity(op, 30, &dense, &q).unwrap())
                );
            }
            let cos = vector_similarity(VectorOp::Cosine, 30, &dense, &q).unwrap();
            assert!(cos.is_null(4) && !cos.is_null(5), "dim {dim}");
            let dot = vector_similarity(VectorOp::Dot, 30, &dense, &q).unwrap();
            assert_eq!(dot.null_count(), 0);
            // A NULL element, then a NULL row: NULL there, the same values elsewhere.
            let mut holed = rows.clone();
            holed[9].as_mut().unwrap()[0] = None;
            holed[12] = None;
            let holed =
                vector_similarity(VectorOp::Dot, 30, &col(fixed32(dim as i32, holed)), &q).unwrap();
            assert!(holed.is_null(9) && holed.is_null(12) && holed.null_count() == 2);
            assert_eq!(holed.value(13).to_bits(), dot.value(13).to_bits());
        }
    }

    fn list32(rows: Rows) -> ListArray {
        ListArray::from_iter_primitive::<Float32Type, _, _>(
            rows.into_iter()
                .map(|r| r.map(|v| v.into_iter().map(|e| e.map(|e| e as f32)))),
        )
    }

    fn fixed32(size: i32, rows: Rows) -> FixedSizeListArray {
        FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
            rows.into_iter()
                .map(|r| r.map(|v| v.into_iter().map(|e| e.map(|e| e as f32)))),
            size,
        )
    }

    fn col(array: impl Array + 'static) -> Operand {
        Operand::Column(Arc::new(array))
    }

    fn scalar(v: Vec<f64>) -> Operand {
        Operand::Scalar(Arc::new(list(vec![Some(
            v.into_iter().map(Some).collect(),
        )])))
    }

    fn run(op: VectorOp, rows: usize, a: &Operand, b: &Operand) -> Vec<Option<f64>> {
        vector_similarity(op, rows, a, b).unwrap().iter().collect()
    }

    /// The plain left-to-right definition, in f64.
    fn naive(op: VectorOp, a: &[f64], b: &[f64]) -> Option<f64> {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        match op {
            VectorOp::Dot => Some(dot),
            VectorOp::L2 => Some(
                a.iter()
                    .zip(b)
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum::<f64>()
                    .sqrt(),
            ),
            VectorOp::Cosine => {
                let na: f64 = a.iter().map(|x| x * x).sum();
                let nb: f64 = b.iter().map(|x| x * x).sum();
                (na != 0.0 && nb != 0.0).then(|| dot / (na.sqrt() * nb.sqrt()))
            }
        }
    }

    #[test]
    fn known_values() {
        let a = col(list(vec![some(&[1.0, 2.0, 3.0]), some(&[3.0, 4.0, 0.0])]));
        let b = col(list(vec![some(&[4.0, 5.0, 6.0]), some(&[0.0, 0.0, 5.0])]));
        assert_eq!(run(VectorOp::Dot, 2, &a, &b), vec![Some(32.0), Some(0.0)]);
        let l2 = run(VectorOp::L2, 2, &a, &b);
        assert!(
            close(l2[0], 27f64.sqrt()) && close(l2[1], 50f64.sqrt()),
            "{l2:?}"
        );
        let cos = run(VectorOp::Cosine, 2, &a, &b);
        assert!(
            close(cos[0], 32.0 / (14f64.sqrt() * 77f64.sqrt())),
            "{cos:?}"
        );
        assert_eq!(cos[1], Some(0.0));
        // Opposite directions, and a vector with itself.
        let c = col(list(vec![some(&[1.0, -2.0]), some(&[0.5, 0.25])]));
        let d = col(list(vec![some(&[-2.0, 4.0]), some(&[0.5, 0.25])]));
        let cos = run(VectorOp::Cosine, 2, &c, &d);
        assert!(close(cos[0], -1.0) && close(cos[1], 1.0), "{cos:?}");
        assert_eq!(
            VectorOp::ALL.map(VectorOp::name),
            ["cosine_similarity", "dot_product", "l2_distance"]
        );
    }

    #[test]
    fn nulls_zero_norms_and_empty_vectors() {
        let a = col(list(vec![
            None,
            some(&[1.0, 2.0]),
            Some(vec![Some(1.0), None]),
            some(&[0.0, 0.0]),
            some(&[]),
        ]));
        let b = col(list(vec![
            some(&[1.0, 2.0]),
            None,
            some(&[1.0, 2.0]),
            some(&[1.0, 2.0]),
            some(&[]),
        ]));
        assert_eq!(
            run(VectorOp::Cosine, 5, &a, &b),
            vec![None, None, None, None, None]
        );
        assert_eq!(
            run(VectorOp::Dot, 5, &a, &b),
            vec![None, None, None, Some(0.0), Some(0.0)]
        );
        assert_eq!(
            run(VectorOp::L2, 5, &a, &b),
            vec![None, None, None, Some(5f64.sqrt()), Some(0.0)]
        );
        // A NULL scalar makes every row NULL; a Null-typed argument (SQL NULL) too.
        let null_scalar = Operand::Scalar(Arc::new(list(vec![None])));
        assert_eq!(run(VectorOp::Dot, 5, &a, &null_scalar), vec![None; 5]);
        let null = Operand::Scalar(Arc::new(NullArray::new(1)));
        assert_eq!(run(VectorOp::L2, 5, &null, &b), vec![None; 5]);
        // NULL elements in the scalar: NULL rows, but lengths are still checked first.
        let with_null = Operand::Scalar(Arc::new(list(vec![Some(vec![None, Some(1.0)])])));
        let pair = col(list(vec![some(&[1.0, 2.0])]));
        assert_eq!(run(VectorOp::Dot, 1, &pair, &with_null), vec![None]);
        let e = vector_similarity(VectorOp::Dot, 5, &b, &with_null).unwrap_err();
        assert!(e.to_string().contains("(0 and 2) in row 5"), "{e}");
    }

    #[test]
    fn different_lengths_are_an_error_naming_row_and_lengths() {
        let a = col(list(vec![some(&[1.0, 2.0]), some(&[1.0, 2.0, 3.0])]));
        let b = col(list(vec![some(&[1.0, 2.0]), some(&[1.0, 2.0, 3.0, 4.0])]));
        let e = vector_similarity(VectorOp::Cosine, 2, &a, &b).unwrap_err();
        assert_eq!(e.code(), "22U20");
        assert_eq!(
            e.to_string(),
            "[22U20] cosine_similarity: vectors of different lengths (3 and 4) in row 2 of the batch"
        );
        // With a scalar first argument the lengths are still in argument order.
        let e = vector_similarity(VectorOp::L2, 2, &scalar(vec![1.0]), &b).unwrap_err();
        assert!(
            e.to_string()
                .contains("l2_distance: vectors of different lengths (1 and 2) in row 1"),
            "{e}"
        );
        // A NULL row never fails.
        let n = col(list(vec![None, None]));
        assert_eq!(
            run(VectorOp::Dot, 2, &scalar(vec![1.0]), &n),
            vec![None, None]
        );
    }

    #[test]
    fn scalar_operands_on_either_side() {
        let emb = col(list(vec![
            some(&[1.0, 0.0]),
            some(&[3.0, 4.0]),
            None,
            some(&[0.0, 0.0]),
        ]));
        let q = scalar(vec![1.0, 0.0]);
        let want = vec![Some(1.0), Some(0.6), None, None];
        assert_eq!(run(VectorOp::Cosine, 4, &emb, &q), want);
        assert_eq!(run(VectorOp::Cosine, 4, &q, &emb), want);
        assert_eq!(
            run(VectorOp::L2, 4, &q, &emb),
            vec![Some(0.0), Some(20f64.sqrt()), None, Some(1.0)]
        );
        // Both scalars: one value for every row; an empty batch; a one-row batch.
        assert_eq!(
            run(VectorOp::Dot, 3, &q, &scalar(vec![2.0, 5.0])),
            vec![Some(2.0); 3]
        );
        assert_eq!(run(VectorOp::Dot, 0, &q, &scalar(vec![2.0])), vec![]);
        assert_eq!(run(VectorOp::Dot, 0, &col(list(vec![])), &q), vec![]);
        assert_eq!(
            run(VectorOp::Dot, 1, &col(list(vec![some(&[2.0, 2.0])])), &q),
            vec![Some(2.0)]
        );
    }

    #[test]
    fn list_kinds_and_element_types_mix() {
        let rows = vec![some(&[1.5, -2.0, 0.25]), None, some(&[0.0, 3.0, 4.0])];
        let query = [0.1, 0.2, 0.3];
        let f64_list = col(list(rows.clone()));
        let f32_list = col(list32(rows.clone()));
        let f32_fixed = col(fixed32(3, rows.clone()));
        let large = col(LargeListArray::from_iter_primitive::<Float64Type, _, _>(
            rows.clone(),
        ));
        let q64 = scalar(query.to_vec());
        let q32 = Operand::Scalar(Arc::new(fixed32(3, vec![some(&query)])));
        for op in VectorOp::ALL {
            let want = run(op, 3, &f64_list, &q64);
            for (a, b) in [
                (&f32_list, &q64),
                (&f32_fixed, &q64),
                (&large, &q32),
                (&f32_fixed, &q32),
                (&q32, &f32_list),
            ] {
                let got = run(op, 3, a, b);
                assert_eq!(got[1], None);
                for i in [0, 2] {
                    // f32 inputs are exact here except the query's 0.1 etc., widened from f32.
                    let w = want[i].unwrap();
                    let g = got[i].unwrap();
                    assert!(
                        (g - w).abs() < 1e-6 * w.abs().max(1.0),
                        "{op:?} row {i}: {g} vs {w}"
                    );
                }
            }
        }
        // f32 elements are widened before multiplying: no f32 rounding of the products.
        let big = col(list32(vec![some(&[16_777_217.0, 1.0])]));
        let got = run(
            VectorOp::Dot,
            1,
            &big,
            &col(list32(vec![some(&[3.0, 1.0])])),
        );
        assert_eq!(got, vec![Some(f64::from(16_777_216f32) * 3.0 + 1.0)]);
    }

    #[test]
    fn sliced_arrays_respect_offsets() {
        let rows: Rows = (0..12)
            .map(|i| {
                (i % 5 != 4).then(|| (0..4).map(|j| Some((i * 4 + j) as f64 - 20.0)).collect())
            })
            .collect();
        let fixed = fixed32(4, rows.clone()).slice(3, 7);
        let listed = list(rows.clone()).slice(3, 7);
        let other = list(rows.iter().rev().cloned().collect()).slice(2, 7);
        for op in VectorOp::ALL {
            let got_fixed = run(op, 7, &col(fixed.clone()), &col(other.clone()));
            let got_list = run(op, 7, &col(listed.clone()), &col(other.clone()));
            for i in 0..7 {
                let (a, b) = (&rows[3 + i], &rows[12 - 1 - (2 + i)]);
                let want = match (a, b) {
                    (Some(a), Some(b)) => {
                        let a: Vec<f64> = a.iter().map(|v| v.unwrap_or(f64::NAN)).collect();
                        let b: Vec<f64> = b.iter().map(|v| v.unwrap_or(f64::NAN)).collect();
                        naive(op, &a, &b)
                    }
                    _ => None,
                };
                for got in [got_fixed[i], got_list[i]] {
                    match want {
                        Some(w) => assert!(close(got, w), "{op:?} row {i}: {got:?} vs {w}"),
                        None => assert_eq!(got, None, "{op:?} row {i}"),
                    }
                }
            }
        }
        // A list whose values child is itself a slice, with NULL elements past the window.
        let values =
            Float64Array::from(vec![Some(9.0), None, Some(1.0), Some(2.0), Some(3.0), None]);
        let field = Arc::new(Field::new_list_field(DataType::Float64, true));
        let lists = ListArray::new(
            field,
            OffsetBuffer::from_lengths([2, 1]),
            Arc::new(values.slice(2, 3)),
            None,
        );
        assert_eq!(
            run(
                VectorOp::Dot,
                2,
                &col(lists),
                &col(list(vec![some(&[1.0, 1.0]), some(&[2.0])]))
            ),
            vec![Some(3.0), Some(6.0)]
        );
    }

    #[test]
    fn agrees_with_the_naive_definition_for_every_length() {
        // Lengths 0..=40 cover the eight-lane loop and every tail length.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let (mut a_rows, mut b_rows) = (Vec::new(), Vec::new());
        for len in 0..=40 {
            a_rows.push((0..len).map(|_| next()).collect::<Vec<_>>());
            b_rows.push((0..len).map(|_| next()).collect::<Vec<_>>());
        }
        let wrap = |rows: &[Vec<f64>]| col(list(rows.iter().map(|r| some(r)).collect()));
        let (a, b) = (wrap(&a_rows), wrap(&b_rows));
        for op in VectorOp::ALL {
            let got = run(op, 41, &a, &b);
            for (len, got) in got.into_iter().enumerate() {
                match naive(op, &a_rows[len], &b_rows[len]) {
                    Some(w) => assert!(close(got, w), "{op:?} len {len}: {got:?} vs {w}"),
                    None => assert_eq!(got, None),
                }
            }
        }
    }

    #[test]
    fn arguments_that_are_not_float_vectors_are_invalid() {
        let ints = col(ListArray::from_iter_primitive::<Int64Type, _, _>([Some([
            Some(1),
        ])]));
        let e = vector_similarity(VectorOp::Dot, 1, &ints, &scalar(vec![1.0])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[22U20] dot_product: argument 1 is a vector of Int64; expected FLOAT or DOUBLE elements"
        );
        let floats = col(Float32Array::from(vec![1.0]));
        let e = vector_similarity(VectorOp::Dot, 1, &scalar(vec![1.0]), &floats).unwrap_err();
        assert!(
            e.to_string()
                .contains("argument 2 is Float32; expected a vector"),
            "{e}"
        );
        let e = vector_similarity(VectorOp::Dot, 2, &scalar(vec![1.0]), &scalar(vec![1.0]));
        assert!(e.is_ok());
        let e = vector_similarity(VectorOp::Dot, 2, &col(list(vec![])), &scalar(vec![1.0]));
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("argument 1 has 0 values")
        );
    }
}
