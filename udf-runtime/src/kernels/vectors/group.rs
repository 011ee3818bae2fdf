//! A `vector_topk(row_id, emb, query, k)` group's arguments, given whole or in chunks, checked
//! (row counts, types, one positive `k`, one query vector) and joined for a GPU.

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt32Array, new_empty_array};
use arrow::datatypes::{DataType, Int64Type};

use super::element::Element;
use super::view::{ElementNulls, Elements, Vectors};
use crate::Result;
use crate::kernels::{Operand, check_rows, invalid_argument};

/// The SQL name of the top-k set UDF.
pub const VECTOR_TOPK: &str = "vector_topk";

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
    pub(super) fn arguments(&self) -> Result<[&Operand; 4]> {
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
    pub(super) fn ids(&self) -> Result<(&Int64Array, bool)> {
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
pub(super) fn check_group(chunks: &[TopKChunk]) -> Result<(usize, Option<Operand>)> {
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
