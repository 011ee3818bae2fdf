//! Similarity of embedding vectors — `cosine_similarity`, `dot_product`, `l2_distance` — and the
//! per-group top-k selection of `vector_topk`.
//!
//! A vector is one value of a `List`, `LargeList` or `FixedSizeList` array of `Float32` or
//! `Float64`; the two arguments may be of different kinds (a `FixedSizeList<Float32>` column
//! against a `List<Float64>` query). Sums are taken in `f64` (`f32` elements are widened first),
//! over eight interleaved partial sums so the loop vectorizes; the summation order is therefore
//! not left to right, and another implementation (the GPU's) agrees to rounding, not bit for bit.
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

use std::cmp::Ordering;
use std::ops::Range;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBufferBuilder, Float64Array, Int64Array, UInt32Array,
    new_empty_array,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int64Type};

use super::{Operand, check_rows, invalid_argument};
use crate::Result;

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
fn similarity(
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

/// A vector element: `f32` or `f64`, widened to `f64` for every sum.
trait Element: Copy {
    fn widen(self) -> f64;
}

impl Element for f32 {
    #[inline(always)]
    fn widen(self) -> f64 {
        f64::from(self)
    }
}

impl Element for f64 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
}

/// The element values of a vector array (all its rows, flat).
#[derive(Debug, Clone, Copy)]
enum Elements<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

/// Where row `i`'s vector lies in the flat elements.
#[derive(Debug, Clone, Copy)]
enum Layout<'a> {
    /// `FixedSizeList` of this size: `i * size .. (i + 1) * size` (its values are sliced with it).
    Fixed(usize),
    /// `List` offsets.
    Offsets(&'a [i32]),
    /// `LargeList` offsets.
    LargeOffsets(&'a [i64]),
    /// A `Null`-typed array: every row is NULL.
    AllNull,
}

/// Which elements are NULL.
#[derive(Debug, Clone, Copy)]
enum ElementNulls<'a> {
    None,
    Some(&'a NullBuffer),
    /// A list of `Null` elements: every element is NULL.
    All,
}

/// One argument's vectors, viewed without copying (also the GPU path's host-side view, so that
/// both check arguments alike).
#[derive(Debug)]
pub(crate) struct Vectors<'a> {
    layout: Layout<'a>,
    elements: Elements<'a>,
    /// The list's flat values (`None` for a `Null`-typed argument).
    values: Option<&'a ArrayRef>,
    nulls: Option<&'a NullBuffer>,
    element_nulls: ElementNulls<'a>,
}

impl<'a> Vectors<'a> {
    /// Views `array`, argument `position` of `function`; an array that is not a list of FLOAT or
    /// DOUBLE is an invalid argument.
    pub(crate) fn new(function: &str, position: usize, array: &'a ArrayRef) -> Result<Self> {
        let (layout, values, nulls) = match array.data_type() {
            DataType::Null => {
                return Ok(Self {
                    layout: Layout::AllNull,
                    elements: Elements::F64(&[]),
                    values: None,
                    nulls: None,
                    element_nulls: ElementNulls::None,
                });
            }
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                (
                    Layout::Offsets(list.value_offsets()),
                    list.values(),
                    list.nulls(),
                )
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                let offsets = list.value_offsets();
                (Layout::LargeOffsets(offsets), list.values(), list.nulls())
            }
            DataType::FixedSizeList(_, size) => {
                let list = array.as_fixed_size_list();
                let size = usize::try_from(*size).unwrap_or(0);
                (Layout::Fixed(size), list.values(), list.nulls())
            }
            other => {
                return Err(invalid_argument(
                    function,
                    format!(
                        "argument {position} is {other}; expected a vector (an array of FLOAT or DOUBLE)"
                    ),
                ));
            }
        };
        let mut element_nulls = match values.nulls() {
            Some(n) if n.null_count() > 0 => ElementNulls::Some(n),
            _ => ElementNulls::None,
        };
        let elements = match values.data_type() {
            DataType::Float32 => Elements::F32(values.as_primitive::<Float32Type>().values()),
            DataType::Float64 => Elements::F64(values.as_primitive::<Float64Type>().values()),
            DataType::Null => {
                element_nulls = ElementNulls::All;
                Elements::F64(&[])
            }
            other => {
                return Err(invalid_argument(
                    function,
                    format!(
                        "argument {position} is a vector of {other}; expected FLOAT or DOUBLE elements"
                    ),
                ));
            }
        };
        Ok(Self {
            layout,
            elements,
            values: Some(values),
            nulls,
            element_nulls,
        })
    }

    /// The list's flat values (`None` for a `Null`-typed argument).
    pub(crate) fn values(&self) -> Option<&'a ArrayRef> {
        self.values
    }

    /// The length of every vector of a `FixedSizeList`.
    pub(crate) fn fixed_len(&self) -> Option<usize> {
        match self.layout {
            Layout::Fixed(size) => Some(size),
            _ => None,
        }
    }

    /// Whether some element may be NULL (its elements have NULLs, or are of type `Null`).
    pub(crate) fn may_have_null_elements(&self) -> bool {
        !matches!(self.element_nulls, ElementNulls::None)
    }

    /// Whether row `i` is NULL.
    #[inline]
    pub(crate) fn is_null(&self, i: usize) -> bool {
        matches!(self.layout, Layout::AllNull) || self.nulls.is_some_and(|n| n.is_null(i))
    }

    /// Whether element `index` (of the flat elements) is NULL.
    #[inline]
    fn element_is_null(&self, index: usize) -> bool {
        match self.element_nulls {
            ElementNulls::None => false,
            ElementNulls::All => true,
            ElementNulls::Some(n) => n.is_null(index),
        }
    }

    /// Where row `i`'s (non-NULL) vector lies in the elements.
    #[inline]
    pub(crate) fn range(&self, i: usize) -> Range<usize> {
        match self.layout {
            Layout::Fixed(size) => i * size..(i + 1) * size,
            Layout::Offsets(o) => o[i] as usize..o[i + 1] as usize,
            Layout::LargeOffsets(o) => o[i] as usize..o[i + 1] as usize,
            Layout::AllNull => 0..0,
        }
    }

    /// Whether an element in `range` is NULL.
    #[inline]
    pub(crate) fn has_null_element(&self, range: &Range<usize>) -> bool {
        match self.element_nulls {
            ElementNulls::None => false,
            ElementNulls::All => !range.is_empty(),
            ElementNulls::Some(n) => {
                let valid = n
                    .buffer()
                    .count_set_bits_offset(n.offset() + range.start, range.len());
                valid != range.len()
            }
        }
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
    fn run<A: Element, B: Element>(&self, x: Side<'_, A>, y: Side<'_, B>) -> Result<Float64Array> {
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
                y_norm = Some(dot(v, v));
            }
        }
        for row in 0..computed {
            let value = match self.row_input(&x, &y, row)? {
                RowInput::Null => None,
                RowInput::Vectors(a, b) => match self.op {
                    VectorOp::Dot => Some(dot(a, b)),
                    VectorOp::L2 => Some(squared_distance(a, b).sqrt()),
                    VectorOp::Cosine => {
                        let (d, na, nb) = match y_norm {
                            Some(nb) => {
                                let (d, na) = dot_and_norm(a, b);
                                (d, na, nb)
                            }
                            None => dot_and_norms(a, b),
                        };
                        (na != 0.0 && nb != 0.0).then(|| d / (na.sqrt() * nb.sqrt()))
                    }
                },
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

/// Partial sums per vector step; eight independent ones let the compiler use SIMD lanes.
const LANES: usize = 8;

/// `Σ aᵢ·bᵢ` (`a` and `b` have the same length).
#[inline]
fn dot<A: Element, B: Element>(a: &[A], b: &[B]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += x[l].widen() * y[l].widen();
        }
    }
    let mut tail = 0.0;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x.widen() * y.widen();
    }
    sum_lanes(acc) + tail
}

/// `Σ (aᵢ − bᵢ)²`.
#[inline]
fn squared_distance<A: Element, B: Element>(a: &[A], b: &[B]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            let d = x[l].widen() - y[l].widen();
            acc[l] += d * d;
        }
    }
    let mut tail = 0.0;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let d = x.widen() - y.widen();
        tail += d * d;
    }
    sum_lanes(acc) + tail
}

/// `(Σ aᵢ·bᵢ, Σ aᵢ²)` in one pass.
#[inline]
fn dot_and_norm<A: Element, B: Element>(a: &[A], b: &[B]) -> (f64, f64) {
    let (mut d, mut n) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            let (p, q) = (x[l].widen(), y[l].widen());
            d[l] += p * q;
            n[l] += p * p;
        }
    }
    let (mut td, mut tn) = (0.0, 0.0);
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let (p, q) = (x.widen(), y.widen());
        td += p * q;
        tn += p * p;
    }
    (sum_lanes(d) + td, sum_lanes(n) + tn)
}

/// `(Σ aᵢ·bᵢ, Σ aᵢ², Σ bᵢ²)` in one pass.
#[inline]
fn dot_and_norms<A: Element, B: Element>(a: &[A], b: &[B]) -> (f64, f64, f64) {
    let (mut d, mut na, mut nb) = ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            let (p, q) = (x[l].widen(), y[l].widen());
            d[l] += p * q;
            na[l] += p * p;
            nb[l] += q * q;
        }
    }
    let (mut td, mut ta, mut tb) = (0.0, 0.0, 0.0);
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        let (p, q) = (x.widen(), y.widen());
        td += p * q;
        ta += p * p;
        tb += q * q;
    }
    (sum_lanes(d) + td, sum_lanes(na) + ta, sum_lanes(nb) + tb)
}

#[inline(always)]
fn sum_lanes(acc: [f64; LANES]) -> f64 {
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// The SQL name of the top-k set UDF.
pub const VECTOR_TOPK: &str = "vector_topk";

/// The `k` rows with the highest scores, best first: the selection step of `vector_topk`, over
/// scores already computed (on the CPU or a GPU).
///
/// Rows with a NULL score are skipped. Order: score descending (NaN ranks below every number),
/// then row id ascending (NULL ids last), then input position, so the result is deterministic.
/// Fewer than `k` scored rows give all of them. Costs O(n + k log k).
///
/// ```
/// use accelsql_udf_runtime::kernels::vectors::top_k;
/// use arrow::array::{Float64Array, Int64Array};
/// let ids = Int64Array::from(vec![10, 11, 12, 13]);
/// let scores = Float64Array::from(vec![Some(0.5), None, Some(0.9), Some(0.5)]);
/// let (ids, scores) = top_k(&ids, &scores, 2);
/// assert_eq!(ids, Int64Array::from(vec![12, 10]));
/// assert_eq!(scores, Float64Array::from(vec![0.9, 0.5]));
/// ```
pub fn top_k(ids: &Int64Array, scores: &Float64Array, k: usize) -> (Int64Array, Float64Array) {
    let n = ids.len().min(scores.len());
    let mut best = Best::new(k);
    best.offer(
        &scores.slice(0, n),
        |i| ids.is_valid(i).then(|| ids.value(i)),
        0,
    );
    best.finish()
}

/// A row that may be among the best: its score (not NULL), row id and position in the group.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f64,
    id: Option<i64>,
    position: usize,
}

/// The order of [`top_k`]: `Less` when `a` ranks before `b`. A total order (positions differ).
fn rank(a: &Candidate, b: &Candidate) -> Ordering {
    let by_score = match (a.score.is_nan(), b.score.is_nan()) {
        (false, false) => b.score.partial_cmp(&a.score).unwrap_or(Ordering::Equal),
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
    };
    by_score
        .then_with(|| match (a.id, b.id) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then(a.position.cmp(&b.position))
}

/// The `k` best rows of those offered so far, offered a chunk at a time (positions increasing).
/// Holds at most `max(2k, 1024)` candidates; once it has pruned to `k`, a row that ranks after
/// the `k`-th kept one is dropped at once.
struct Best {
    k: usize,
    kept: Vec<Candidate>,
    /// The worst of the `k` kept after the last pruning: later rows must beat it.
    worst: Option<Candidate>,
}

impl Best {
    const MIN_BUFFER: usize = 1024;

    fn new(k: usize) -> Self {
        Self {
            k,
            kept: Vec::new(),
            worst: None,
        }
    }

    /// Offers the rows of `scores` (NULL ones are skipped), whose ids `id(i)` gives and whose
    /// positions in the group start at `first_position`.
    fn offer(
        &mut self,
        scores: &Float64Array,
        id: impl Fn(usize) -> Option<i64>,
        first_position: usize,
    ) {
        if self.k == 0 {
            return;
        }
        let limit = self.k.saturating_mul(2).max(Self::MIN_BUFFER);
        for (i, &score) in scores.values().iter().enumerate() {
            if scores.is_null(i) {
                continue;
            }
            let candidate = Candidate {
                score,
                id: id(i),
                position: first_position + i,
            };
            if self
                .worst
                .is_some_and(|w| rank(&candidate, &w) == Ordering::Greater)
            {
                continue;
            }
            self.kept.push(candidate);
            if self.kept.len() >= limit {
                self.prune();
            }
        }
    }

    /// Keeps only the `k` best.
    fn prune(&mut self) {
        if self.k > 0 && self.kept.len() > self.k {
            self.kept.select_nth_unstable_by(self.k - 1, rank);
            self.kept.truncate(self.k);
            self.worst = self.kept.last().copied();
        }
    }

    /// The `k` best (or all offered, if fewer), best first.
    fn finish(mut self) -> (Int64Array, Float64Array) {
        self.prune();
        self.kept.sort_unstable_by(rank);
        let ids: Int64Array = self.kept.iter().map(|c| c.id).collect();
        let scores: Vec<f64> = self.kept.iter().map(|c| c.score).collect();
        (ids, Float64Array::from(scores))
    }
}

/// The arguments of one `vector_topk(row_id, emb, query, k)` group, checked: what both the CPU
/// and a GPU implementation start from.
#[derive(Debug, Clone)]
pub struct TopKGroup {
    /// The row ids (argument 1, BIGINT).
    pub ids: Int64Array,
    /// The embeddings (argument 2), a column.
    pub embeddings: Operand,
    /// The group's query vector (argument 3) as a one-row scalar; `None` when it is NULL in every
    /// row, so that no row has a score.
    pub query: Option<Operand>,
    /// How many rows to keep (argument 4): positive, the same in every row.
    pub k: usize,
}

/// Consecutive rows of a `vector_topk` group, as the engine gathered them: `rows` rows and the
/// four arguments `(row_id, emb, query, k)` for them, each a column of `rows` values or a
/// one-row scalar (a constant, such as the query vector, is never replicated).
#[derive(Debug, Clone)]
pub struct TopKChunk {
    /// How many rows.
    pub rows: usize,
    /// The arguments.
    pub args: Vec<Operand>,
}

impl TopKChunk {
    /// A chunk of columns, all of `rows` rows.
    pub fn of_columns(rows: usize, args: &[ArrayRef]) -> Self {
        Self {
            rows,
            args: args
                .iter()
                .map(|a| Operand::Column(std::sync::Arc::clone(a)))
                .collect(),
        }
    }

    /// The four arguments, or the error for another count.
    fn arguments(&self) -> Result<[&Operand; 4]> {
        match self.args.as_slice() {
            [ids, emb, query, k] => Ok([ids, emb, query, k]),
            other => Err(invalid_argument(
                VECTOR_TOPK,
                format!(
                    "takes 4 arguments (row_id, emb, query, k), got {}",
                    other.len()
                ),
            )),
        }
    }

    /// The row ids (argument 1) and whether they are a scalar.
    fn ids(&self) -> Result<(&Int64Array, bool)> {
        let [ids, ..] = self.arguments()?;
        let array = ids.array().as_primitive_opt::<Int64Type>().ok_or_else(|| {
            invalid_argument(
                VECTOR_TOPK,
                format!(
                    "argument 1 (row_id) is {}, expected BIGINT",
                    ids.array().data_type()
                ),
            )
        })?;
        Ok((array, matches!(ids, Operand::Scalar(_))))
    }
}

/// Checks one group's arguments (`rows` rows each) for `vector_topk`:
/// - `k` (argument 4, BIGINT) must be positive and the same in every row; NULL is an error;
/// - the query (argument 3) is usually a constant; when it is a column, its first non-NULL
///   value is the group's query, and a different non-NULL value in another row is an error;
/// - embeddings and query must be vectors of FLOAT or DOUBLE.
///
/// Every error is [`crate::RuntimeError::InvalidArgument`] (22U20). An empty group is fine (and
/// selects nothing).
pub fn top_k_group(rows: usize, args: &[ArrayRef]) -> Result<TopKGroup> {
    top_k_group_chunks(&[TopKChunk::of_columns(rows, args)])
}

/// [`top_k_group`] for a group given as chunks: the same checks over the whole group (rows
/// numbered from the group's first), then the ids and embeddings joined into one column each
/// (for a GPU, which scores the whole group at once).
pub fn top_k_group_chunks(chunks: &[TopKChunk]) -> Result<TopKGroup> {
    let (k, query) = check_group(chunks)?;
    let ids = joined(chunks, 0, DataType::Int64)?;
    let ids = ids
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| {
            invalid_argument(
                VECTOR_TOPK,
                format!(
                    "argument 1 (row_id) is {}, expected BIGINT",
                    ids.data_type()
                ),
            )
        })?
        .clone();
    let embeddings = Operand::Column(joined(chunks, 1, DataType::Null)?);
    Ok(TopKGroup {
        ids,
        embeddings,
        query,
        k,
    })
}

/// Argument `index` of every chunk as one column (scalars repeated over their chunk's rows);
/// an empty column of `empty` when there are no chunks.
fn joined(chunks: &[TopKChunk], index: usize, empty: DataType) -> Result<ArrayRef> {
    let fail = |e: arrow::error::ArrowError| {
        invalid_argument(
            VECTOR_TOPK,
            format!(
                "argument {} cannot be joined over the group: {e}",
                index + 1
            ),
        )
    };
    let mut parts = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let Some(operand) = chunk.args.get(index) else {
            return Err(chunk.arguments().err().unwrap_or_else(|| {
                invalid_argument(VECTOR_TOPK, "an argument is missing in a chunk")
            }));
        };
        parts.push(match operand {
            Operand::Column(a) => std::sync::Arc::clone(a),
            Operand::Scalar(a) => {
                let zeros = UInt32Array::from(vec![0u32; chunk.rows]);
                arrow::compute::take(a.as_ref(), &zeros, None).map_err(fail)?
            }
        });
    }
    match parts.as_slice() {
        [] => Ok(new_empty_array(&empty)),
        [one] => Ok(std::sync::Arc::clone(one)),
        _ => {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            arrow::compute::concat(&refs).map_err(fail)
        }
    }
}

/// The checks of [`top_k_group`] over every chunk of a group, in its order: row counts and the
/// id type, `k`, the embeddings' type, the query. Returns `k` and the query.
fn check_group(chunks: &[TopKChunk]) -> Result<(usize, Option<Operand>)> {
    let f = VECTOR_TOPK;
    for chunk in chunks {
        for (i, a) in chunk.arguments()?.into_iter().enumerate() {
            check_rows(f, i + 1, a, chunk.rows)?;
        }
        chunk.ids()?;
    }
    let k = group_k(chunks)?;
    for chunk in chunks {
        let [_, emb, _, _] = chunk.arguments()?;
        Vectors::new(f, 2, emb.array())?;
    }
    let query = group_query(chunks)?;
    Ok((k, query))
}

/// The group's `k`: positive, non-NULL, the same in every row (0 for an empty group).
fn group_k(chunks: &[TopKChunk]) -> Result<usize> {
    let f = VECTOR_TOPK;
    let mut values: Vec<&[i64]> = Vec::with_capacity(chunks.len());
    let mut has_null = false;
    for chunk in chunks {
        let [.., k] = chunk.arguments()?;
        let array = k.array().as_primitive_opt::<Int64Type>().ok_or_else(|| {
            invalid_argument(
                f,
                format!(
                    "argument 4 (k) is {}, expected BIGINT",
                    k.array().data_type()
                ),
            )
        })?;
        // A scalar stands for each of the chunk's rows; one of them is enough here.
        let rows = match k {
            Operand::Column(_) => chunk.rows,
            Operand::Scalar(_) => chunk.rows.min(1),
        };
        let rows = rows.min(array.len());
        has_null |= (0..rows).any(|i| array.is_null(i));
        values.push(&array.values()[..rows]);
    }
    if has_null {
        return Err(invalid_argument(
            f,
            "k is NULL; pass a positive number of rows to keep",
        ));
    }
    let mut all = values.iter().flat_map(|v| v.iter().copied());
    let Some(first) = all.next() else {
        return Ok(0);
    };
    if let Some(other) = all.find(|&v| v != first) {
        return Err(invalid_argument(
            f,
            format!("k must be the same in every row of a group, got {first} and {other}"),
        ));
    }
    if first <= 0 {
        return Err(invalid_argument(
            f,
            format!("k must be a positive number of rows, got {first}"),
        ));
    }
    Ok(usize::try_from(first).unwrap_or(usize::MAX))
}

/// The group's query vector as a one-row scalar: its first non-NULL value, the same in every
/// non-NULL row; `None` when every row is NULL.
fn group_query(chunks: &[TopKChunk]) -> Result<Option<Operand>> {
    let f = VECTOR_TOPK;
    let mut views = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let [_, _, query, _] = chunk.arguments()?;
        views.push((Vectors::new(f, 3, query.array())?, query));
    }
    // The first non-NULL value: (chunk, index in its array, row in the group).
    let mut first: Option<(usize, usize, usize)> = None;
    let mut offset = 0;
    for (c, (chunk, (vectors, query))) in chunks.iter().zip(&views).enumerate() {
        // A scalar holds the same value for each of its chunk's rows: its first row decides.
        let rows = match query {
            Operand::Column(_) => chunk.rows,
            Operand::Scalar(_) => chunk.rows.min(1),
        };
        for row in 0..rows {
            if vectors.is_null(row) {
                continue;
            }
            match first {
                None => first = Some((c, row, offset + row)),
                Some((fc, fi, first_row)) => {
                    if !same_vector(&views[fc].0, fi, vectors, row) {
                        return Err(invalid_argument(
                            f,
                            format!(
                                "the query vector (argument 3) differs between rows {} and {} \
                                 of a group; pass one query per group (usually a constant)",
                                first_row + 1,
                                offset + row + 1
                            ),
                        ));
                    }
                }
            }
        }
        offset += chunk.rows;
    }
    Ok(first.map(|(c, i, _)| Operand::Scalar(views[c].1.array().slice(i, 1))))
}

/// Whether row `i` of `a` and row `j` of `b` (neither NULL) hold the same vector: the same
/// length, NULL elements in the same places, the same values (NaN equals NaN).
fn same_vector(a: &Vectors<'_>, i: usize, b: &Vectors<'_>, j: usize) -> bool {
    let (ra, rb) = (a.range(i), b.range(j));
    if ra.len() != rb.len() {
        return false;
    }
    let checks_nulls = !matches!(
        (a.element_nulls, b.element_nulls),
        (ElementNulls::None, ElementNulls::None) | (ElementNulls::All, ElementNulls::All)
    );
    if checks_nulls
        && (0..ra.len()).any(|e| a.element_is_null(ra.start + e) != b.element_is_null(rb.start + e))
    {
        return false;
    }
    match (a.elements, b.elements) {
        (Elements::F32(p), Elements::F32(q)) => same_values(p.get(ra), q.get(rb)),
        (Elements::F32(p), Elements::F64(q)) => same_values(p.get(ra), q.get(rb)),
        (Elements::F64(p), Elements::F32(q)) => same_values(p.get(ra), q.get(rb)),
        (Elements::F64(p), Elements::F64(q)) => same_values(p.get(ra), q.get(rb)),
    }
}

/// Equal element values (NaN equals NaN); a side without values (a list of NULL elements) is
/// decided by its length alone.
fn same_values<A: Element, B: Element>(p: Option<&[A]>, q: Option<&[B]>) -> bool {
    match (p, q) {
        (Some(p), Some(q)) => p.iter().zip(q).all(|(a, b)| {
            let (a, b) = (a.widen(), b.widen());
            a == b || (a.is_nan() && b.is_nan())
        }),
        _ => true,
    }
}

/// `vector_topk` on the CPU for one group: cosine similarity of each row's embedding to the
/// group's query, then [`top_k`]. Returns the emitted `(row_id, score)` columns.
pub fn vector_topk(rows: usize, args: &[ArrayRef]) -> Result<(Int64Array, Float64Array)> {
    vector_topk_chunks(&[TopKChunk::of_columns(rows, args)])
}

/// [`vector_topk`] for a group given as chunks, without joining them: each chunk is scored and
/// its best rows kept, so beyond the chunks it holds the scores of one chunk and O(k) rows. The
/// result (ties included) and the errors are those of [`vector_topk`] over the joined group.
pub fn vector_topk_chunks(chunks: &[TopKChunk]) -> Result<(Int64Array, Float64Array)> {
    let (k, query) = check_group(chunks)?;
    let mut best = Best::new(k);
    let Some(query) = &query else {
        return Ok(best.finish());
    };
    let mut offset = 0;
    for chunk in chunks {
        let [_, emb, _, _] = chunk.arguments()?;
        let scores = similarity(
            VECTOR_TOPK,
            [2, 3],
            VectorOp::Cosine,
            chunk.rows,
            emb,
            query,
            offset,
        )?;
        let (ids, scalar_ids) = chunk.ids()?;
        best.offer(
            &scores,
            |i| {
                let i = if scalar_ids { 0 } else { i };
                ids.is_valid(i).then(|| ids.value(i))
            },
            offset,
        );
        offset += chunk.rows;
    }
    Ok(best.finish())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{FixedSizeListArray, Float32Array, LargeListArray, ListArray, NullArray};
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::Field;

    use super::*;

    type Rows = Vec<Option<Vec<Option<f64>>>>;

    fn list(rows: Rows) -> ListArray {
        ListArray::from_iter_primitive::<Float64Type, _, _>(rows)
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

    fn some(v: &[f64]) -> Option<Vec<Option<f64>>> {
        Some(v.iter().copied().map(Some).collect())
    }

    fn run(op: VectorOp, rows: usize, a: &Operand, b: &Operand) -> Vec<Option<f64>> {
        vector_similarity(op, rows, a, b).unwrap().iter().collect()
    }

    fn close(got: Option<f64>, want: f64) -> bool {
        got.is_some_and(|g| (g - want).abs() <= 1e-12 * want.abs().max(1.0))
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

    #[test]
    fn top_k_orders_by_score_then_id_and_skips_nulls() {
        let ids = Int64Array::from(vec![
            Some(5),
            Some(3),
            Some(9),
            None,
            Some(1),
            Some(2),
            Some(7),
        ]);
        let scores = Float64Array::from(vec![
            Some(0.5),
            Some(0.9),
            None,
            Some(0.9),
            Some(0.5),
            Some(f64::NAN),
            Some(-1.0),
        ]);
        let (i, s) = top_k(&ids, &scores, 3);
        assert_eq!(i, Int64Array::from(vec![Some(3), None, Some(1)]));
        assert_eq!(s, Float64Array::from(vec![0.9, 0.9, 0.5]));
        let (i, s) = top_k(&ids, &scores, 100);
        assert_eq!(
            i,
            Int64Array::from(vec![Some(3), None, Some(1), Some(5), Some(7), Some(2)])
        );
        assert_eq!(s.len(), 6);
        assert!(s.value(5).is_nan());
        let (i, s) = top_k(&ids, &scores, 0);
        assert_eq!((i.len(), s.len()), (0, 0));
        let (i, _) = top_k(
            &Int64Array::from(Vec::<i64>::new()),
            &Float64Array::from(Vec::<f64>::new()),
            3,
        );
        assert_eq!(i.len(), 0);
        // Large input, small k: the same as sorting everything.
        let n = 10_000;
        let ids = Int64Array::from((0..n).map(|i| (i * 7919) % n).collect::<Vec<i64>>());
        let scores = Float64Array::from((0..n).map(|i| ((i * 31) % 97) as f64).collect::<Vec<_>>());
        let (i, s) = top_k(&ids, &scores, 10);
        let (all_i, all_s) = top_k(&ids, &scores, n as usize);
        assert_eq!(i, all_i.slice(0, 10));
        assert_eq!(s, all_s.slice(0, 10));
        assert!(s.values().iter().all(|&v| v == 96.0));
    }

    fn topk_args(ids: Vec<i64>, emb: Rows, query: Rows, k: Vec<Option<i64>>) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(list(emb)),
            Arc::new(list(query)),
            Arc::new(Int64Array::from(k)),
        ]
    }

    #[test]
    fn vector_topk_per_group() {
        let emb = vec![
            some(&[1.0, 0.0]),
            some(&[0.0, 1.0]),
            some(&[1.0, 1.0]),
            None,
            some(&[0.0, 0.0]),
        ];
        let q = some(&[1.0, 0.0]);
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            vec![q.clone(); 5],
            vec![Some(2); 5],
        );
        let (ids, scores) = vector_topk(5, &args).unwrap();
        assert_eq!(ids, Int64Array::from(vec![10, 12]));
        assert!(close(Some(scores.value(1)), 0.5f64.sqrt()));
        // k beyond the scored rows: all of them (NULL and zero-norm rows are skipped).
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            vec![q.clone(); 5],
            vec![Some(50); 5],
        );
        let (ids, scores) = vector_topk(5, &args).unwrap();
        assert_eq!(ids, Int64Array::from(vec![10, 12, 11]));
        assert_eq!(scores.value(2), 0.0);
        // A query column: its first non-NULL value; NULL rows of it are fine.
        let query = vec![None, q.clone(), None, q.clone(), q.clone()];
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            query,
            vec![Some(1); 5],
        );
        assert_eq!(vector_topk(5, &args).unwrap().0, Int64Array::from(vec![10]));
        // Every query NULL: nothing; an empty group: nothing.
        let args = topk_args(
            vec![10, 11, 12, 13, 14],
            emb.clone(),
            vec![None; 5],
            vec![Some(1); 5],
        );
        assert_eq!(vector_topk(5, &args).unwrap().0.len(), 0);
        let args = topk_args(vec![], vec![], vec![], vec![]);
        assert_eq!(vector_topk(0, &args).unwrap().0.len(), 0);
        let group = top_k_group(
            5,
            &topk_args(
                vec![1; 5],
                emb.clone(),
                vec![q.clone(); 5],
                vec![Some(3); 5],
            ),
        )
        .unwrap();
        assert_eq!(group.k, 3);
        assert!(matches!(group.query, Some(Operand::Scalar(ref a)) if a.len() == 1));
    }

    #[test]
    fn vector_topk_argument_errors() {
        let emb = vec![some(&[1.0, 0.0]), some(&[0.0, 1.0])];
        let q = some(&[1.0, 0.0]);
        let err = |query: Rows, k: Vec<Option<i64>>| {
            vector_topk(2, &topk_args(vec![1, 2], emb.clone(), query, k))
                .unwrap_err()
                .to_string()
        };
        let q2 = vec![q.clone(), q.clone()];
        assert_eq!(
            err(q2.clone(), vec![Some(0), Some(0)]),
            "[22U20] vector_topk: k must be a positive number of rows, got 0"
        );
        assert!(err(q2.clone(), vec![Some(-3), Some(-3)]).contains("got -3"));
        assert!(err(q2.clone(), vec![None, Some(1)]).contains("k is NULL"));
        assert!(
            err(q2.clone(), vec![Some(1), Some(2)])
                .contains("same in every row of a group, got 1 and 2")
        );
        let e = err(vec![q.clone(), some(&[0.0, 1.0])], vec![Some(1), Some(1)]);
        assert!(
            e.contains("the query vector (argument 3) differs between rows 1 and 2"),
            "{e}"
        );
        // Lengths of embedding and query are checked with vector_topk's name and positions.
        let e = err(vec![some(&[1.0]), some(&[1.0])], vec![Some(1), Some(1)]);
        assert_eq!(
            e,
            "[22U20] vector_topk: vectors of different lengths (2 and 1) in row 1 of the batch"
        );
        let e = top_k_group(
            2,
            &topk_args(vec![1, 2], emb.clone(), q2, vec![Some(1); 2])[..3],
        )
        .unwrap_err();
        assert!(e.to_string().contains("takes 4 arguments"), "{e}");
    }

    /// Splits the columns of a group into chunks at `cuts`, with query and k as scalars where
    /// `scalars` says so.
    fn chunked(args: &[ArrayRef], cuts: &[usize], scalars: bool) -> Vec<TopKChunk> {
        let rows = args[0].len();
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < rows));
        bounds.push(rows);
        bounds
            .windows(2)
            .map(|w| {
                let (start, len) = (w[0], w[1] - w[0]);
                let args = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        if scalars && i >= 2 {
                            Operand::Scalar(a.slice(start, 1))
                        } else {
                            Operand::Column(a.slice(start, len))
                        }
                    })
                    .collect();
                TopKChunk { rows: len, args }
            })
            .collect()
    }

    #[test]
    fn vector_topk_over_chunks_equals_the_joined_group() {
        // 3000 rows: repeated embeddings (ties), NULL ids, NULL and zero vectors.
        let n = 3000usize;
        let emb: Rows = (0..n)
            .map(|i| match i % 50 {
                7 => None,
                8 => some(&[0.0, 0.0, 0.0]),
                _ => some(&[(i % 13) as f64, ((i * 7) % 11) as f64 - 5.0, 1.0]),
            })
            .collect();
        let ids: Vec<Option<i64>> = (0..n)
            .map(|i| (i % 97 != 3).then_some(((i * 7919) % 1000) as i64))
            .collect();
        let q = some(&[1.0, 0.5, -0.25]);
        for k in [1, 3, 10, 600, 5000] {
            let args: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(list(emb.clone())),
                Arc::new(list(vec![q.clone(); n])),
                Arc::new(Int64Array::from(vec![k; n])),
            ];
            let joined = vector_topk(n, &args).unwrap();
            for (cuts, scalars) in [
                (vec![], true),
                (vec![1, 2, 1500], true),
                (vec![100, 1124, 2048, 2999], false),
                ((1..n).step_by(7).collect::<Vec<_>>(), true),
            ] {
                let chunks = chunked(&args, &cuts, scalars);
                assert_eq!(vector_topk_chunks(&chunks).unwrap(), joined, "k {k}");
                let group = top_k_group_chunks(&chunks).unwrap();
                assert_eq!(group.k, k as usize);
                assert_eq!(group.ids.len(), n);
                assert_eq!(group.embeddings.array().len(), n);
                assert!(matches!(group.query, Some(Operand::Scalar(ref a)) if a.len() == 1));
            }
        }
        assert_eq!(vector_topk_chunks(&[]).unwrap().0.len(), 0);
        assert_eq!(top_k_group_chunks(&[]).unwrap().k, 0);
    }

    #[test]
    fn vector_topk_chunk_errors_number_rows_in_the_group() {
        let emb = vec![some(&[1.0, 0.0]); 6];
        let q = some(&[1.0, 0.0]);
        let args = |query: Rows, k: Vec<Option<i64>>| {
            topk_args(vec![1, 2, 3, 4, 5, 6], emb.clone(), query, k)
        };
        let err = |args: &[ArrayRef], scalars: bool| {
            vector_topk_chunks(&chunked(args, &[2, 4], scalars))
                .unwrap_err()
                .to_string()
        };
        let mut query = vec![q.clone(); 6];
        query[4] = some(&[0.0, 1.0]);
        let e = err(&args(query, vec![Some(1); 6]), false);
        assert!(e.contains("differs between rows 1 and 5 of a group"), "{e}");
        let mut query = vec![None, None, q.clone(), q.clone(), some(&[0.0, 1.0]), None];
        let e = err(&args(query.clone(), vec![Some(1); 6]), true);
        assert!(e.contains("differs between rows 3 and 5 of a group"), "{e}");
        query[4] = q.clone();
        assert_eq!(
            vector_topk_chunks(&chunked(&args(query, vec![Some(1); 6]), &[2, 4], true))
                .unwrap()
                .0,
            Int64Array::from(vec![1])
        );
        let mut k = vec![Some(2); 6];
        k[4] = Some(3);
        let e = err(&args(vec![q.clone(); 6], k.clone()), true);
        assert!(
            e.contains("same in every row of a group, got 2 and 3"),
            "{e}"
        );
        k[5] = None;
        let e = err(&args(vec![q.clone(); 6], k), false);
        assert!(e.contains("k is NULL"), "{e}");
        let mut emb = emb.clone();
        emb[3] = some(&[1.0]);
        let e = err(
            &topk_args(vec![1; 6], emb, vec![q.clone(); 6], vec![Some(1); 6]),
            true,
        );
        assert!(
            e.ends_with("vectors of different lengths (1 and 2) in row 4 of the batch"),
            "{e}"
        );
    }
}
