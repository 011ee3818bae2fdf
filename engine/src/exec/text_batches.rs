//! An EMITS run's output with more text in one column than one Utf8 array holds (2 GiB): the
//! script runtime hands such a column over as `LargeUtf8`, and it leaves the EMITS operator as
//! several batches, each a slice of the rows whose text fits, in the declared `Utf8`.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, LargeStringArray, RecordBatch, StringArray,
};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::error::ArrowError;

/// `columns` under `schema` as batches: one when every column has its field's type; else, where
/// `LargeUtf8` columns stand for `Utf8` fields, consecutive slices of rows whose text in each
/// such column is at most `limit` bytes, those columns cast to `Utf8`. A single value longer
/// than `limit` is an error (no batch can hold it).
pub(crate) fn batches_within(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    limit: usize,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let large: Vec<usize> = columns
        .iter()
        .zip(schema.fields())
        .enumerate()
        .filter(|(_, (c, f))| {
            c.data_type() == &DataType::LargeUtf8 && f.data_type() == &DataType::Utf8
        })
        .map(|(i, _)| i)
        .collect();
    if large.is_empty() {
        return Ok(vec![RecordBatch::try_new(Arc::clone(schema), columns)?]);
    }
    let rows = columns.first().map_or(0, |c| c.len());
    let length = |column: usize, row: usize| -> usize {
        let offsets = columns[column].as_string::<i64>().value_offsets();
        usize::try_from(offsets[row + 1] - offsets[row]).unwrap_or(0)
    };
    let mut batches = Vec::new();
    let mut start = 0;
    while start < rows {
        let mut used = vec![0usize; large.len()];
        let mut end = start;
        while end < rows {
            let fits = large
                .iter()
                .zip(&used)
                .all(|(&c, &u)| u + length(c, end) <= limit);
            if !fits {
                break;
            }
            for (u, &c) in used.iter_mut().zip(&large) {
                *u += length(c, end);
            }
            end += 1;
        }
        if end == start {
            return Err(ArrowError::InvalidArgumentError(format!(
                "row {} of the run's output has a value of more than {limit} bytes of text, \
                 more than one column of one batch can hold",
                start + 1
            )));
        }
        let slice: Vec<ArrayRef> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let part = c.slice(start, end - start);
                if large.contains(&i) {
                    narrowed(part.as_string::<i64>()).map(|text| Arc::new(text) as ArrayRef)
                } else {
                    Ok(part)
                }
            })
            .collect::<Result<_, ArrowError>>()?;
        batches.push(RecordBatch::try_new(Arc::clone(schema), slice)?);
        start = end;
    }
    Ok(batches)
}

/// A slice of a `LargeUtf8` array whose text fits `i32` offsets, as `Utf8`: its bytes copied
/// once into a buffer of exactly their size, allocated fallibly (a cast would look at the whole
/// shared buffer; collecting value by value grows a buffer by doubling, up to twice the text).
/// A buffer the process cannot get is an error, not an abort.
fn narrowed(large: &LargeStringArray) -> Result<StringArray, ArrowError> {
    let offsets = large.value_offsets();
    let (first, last) = match (offsets.first(), offsets.last()) {
        (Some(&first), Some(&last)) => (first, last),
        _ => return Ok(StringArray::from(Vec::<Option<&str>>::new())),
    };
    let too_large = || {
        ArrowError::InvalidArgumentError(format!(
            "{} bytes of text do not fit one Utf8 column",
            last - first
        ))
    };
    let start = usize::try_from(first).map_err(|_| too_large())?;
    let end = usize::try_from(last).map_err(|_| too_large())?;
    let mut values: Vec<u8> = Vec::new();
    values.try_reserve_exact(end - start).map_err(|e| {
        ArrowError::MemoryError(format!(
            "cannot allocate {} bytes for a script's text output: {e}",
            end - start
        ))
    })?;
    values.extend_from_slice(&large.value_data()[start..end]);
    let mut narrow: Vec<i32> = Vec::new();
    narrow
        .try_reserve_exact(offsets.len())
        .map_err(|e| ArrowError::MemoryError(e.to_string()))?;
    for &o in offsets {
        narrow.push(i32::try_from(o - first).map_err(|_| too_large())?);
    }
    StringArray::try_new(
        OffsetBuffer::new(ScalarBuffer::from(narrow)),
        Buffer::from_vec(values),
        large.nulls().cloned(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn large_text_leaves_as_batches_that_fit() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let n: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3, 4]));
        let s: ArrayRef = Arc::new(LargeStringArray::from(vec![
            Some("aaaa"),
            Some("bb"),
            None,
            Some("cccc"),
        ]));
        let batches = batches_within(&schema, vec![Arc::clone(&n), s], 6).unwrap();
        let shapes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(shapes, [3, 1]);
        assert_eq!(batches[0].column(1).data_type(), &DataType::Utf8);
        assert_eq!(batches[1].column(1).as_string::<i32>().value(0), "cccc");
        assert!(batches[0].column(1).is_null(2));
        // A value longer than the limit fits no batch.
        let long: ArrayRef = Arc::new(LargeStringArray::from(vec!["x"; 4]));
        let e = batches_within(&schema, vec![Arc::clone(&n), long], 0).unwrap_err();
        assert!(e.to_string().contains("row 1"), "{e}");
        // A slice deep into a shared buffer keeps its own values and nulls only.
        let shared = LargeStringArray::from(vec![Some("zz"), Some("ab"), None, Some("c")]);
        let sliced = shared.slice(1, 3);
        let narrow = narrowed(&sliced).unwrap();
        assert_eq!(narrow.value_data(), b"abc");
        assert_eq!(narrow.value(0), "ab");
        assert!(narrow.is_null(1));
        assert_eq!(narrow.value(2), "c");
        // Plain Utf8: one batch as it is.
        let plain: ArrayRef = Arc::new(StringArray::from(vec!["a"; 4]));
        assert_eq!(batches_within(&schema, vec![n, plain], 0).unwrap().len(), 1);
    }
}
