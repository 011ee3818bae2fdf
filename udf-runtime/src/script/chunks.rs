//! A run's rows cut into chunks for the worker (RUN and ROWS frames), and the run's output put
//! back together from its parts (EMIT and RESULT frames), so that neither side holds more than a
//! chunk of a run in its Python form.

use arrow::array::{Array, ArrayRef, AsArray, new_empty_array};
use arrow::compute::{cast, concat};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;

/// How a run travels between the engine and its worker.
///
/// The engine sends a run's rows in chunks of at most `max_rows` rows and about `max_bytes`
/// bytes (a single row larger than that goes alone); the worker asks for the next chunk when
/// `ctx.next()` reaches the end of the one it has (and for the first again on `ctx.reset()`), so
/// a SET group of any size costs the worker about one chunk of memory. Emitted rows flow back in
/// parts of about `emit_bytes` bytes (the first after `emit_rows` rows; later parts sized from
/// the bytes per row seen so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunChunking {
    /// The most rows one chunk of input holds.
    pub max_rows: usize,
    /// About how many bytes one chunk of input holds (its encoded size).
    pub max_bytes: usize,
    /// After how many emitted rows the worker sends its first part of output.
    pub emit_rows: usize,
    /// About how many bytes each later part of output holds.
    pub emit_bytes: usize,
}

impl Default for RunChunking {
    fn default() -> Self {
        Self {
            max_rows: 65_536,
            max_bytes: 16 << 20,
            emit_rows: 4_096,
            emit_bytes: 16 << 20,
        }
    }
}

/// The rows of one run as the engine gathered them (consecutive parts, each with every
/// argument), handed out in chunks.
#[derive(Debug)]
pub(crate) struct RunRows {
    /// Non-empty parts: a row count and one array per argument of that length.
    parts: Vec<(usize, Vec<ArrayRef>)>,
    /// The run's row number of each part's first row.
    starts: Vec<usize>,
    total: usize,
    types: Vec<DataType>,
    chunking: RunChunking,
}

impl RunRows {
    /// `parts` (each a row count and one array per argument, of `types`) as one run.
    pub(crate) fn new(
        parts: Vec<(usize, Vec<ArrayRef>)>,
        types: Vec<DataType>,
        chunking: RunChunking,
    ) -> Self {
        let parts: Vec<_> = parts.into_iter().filter(|(rows, _)| *rows > 0).collect();
        let mut starts = Vec::with_capacity(parts.len());
        let mut total = 0;
        for (rows, _) in &parts {
            starts.push(total);
            total += rows;
        }
        Self {
            parts,
            starts,
            total,
            types,
            chunking,
        }
    }

    /// The run's row count.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The chunk starting at row `from`: its row count and one array per argument. A `from` at
    /// the end gives an empty chunk; past it, an error.
    pub(crate) fn chunk(&self, from: usize) -> Result<(usize, Vec<ArrayRef>), String> {
        if from > self.total {
            return Err(format!(
                "rows from {from} asked for, the run has {}",
                self.total
            ));
        }
        if from == self.total {
            return Ok((0, self.types.iter().map(new_empty_array).collect()));
        }
        let mut part = self.starts.partition_point(|&s| s <= from) - 1;
        let mut offset = from - self.starts[part];
        let (mut rows, mut bytes) = (0usize, 0usize);
        let mut pieces: Vec<Vec<ArrayRef>> = Vec::new();
        while part < self.parts.len() && rows < self.chunking.max_rows {
            let (part_rows, arrays) = &self.parts[part];
            let available = (part_rows - offset).min(self.chunking.max_rows - rows);
            let budget = self.chunking.max_bytes.saturating_sub(bytes);
            let take = fitting_rows(arrays, offset, available, budget).max(usize::from(rows == 0));
            if take == 0 {
                break;
            }
            bytes += encoded_bytes(arrays, offset, take);
            rows += take;
            pieces.push(arrays.iter().map(|a| a.slice(offset, take)).collect());
            if take < available {
                break;
            }
            part += 1;
            offset = 0;
        }
        let columns = match pieces.len() {
            1 => pieces.remove(0),
            _ => (0..self.types.len())
                .map(|i| {
                    let refs: Vec<&dyn Array> = pieces.iter().map(|p| p[i].as_ref()).collect();
                    concat(&refs).map_err(|e| e.to_string())
                })
                .collect::<Result<_, _>>()?,
        };
        Ok((rows, columns))
    }
}

/// How many of `arrays`' rows from `offset` on (at most `limit`) encode into `budget` bytes.
fn fitting_rows(arrays: &[ArrayRef], offset: usize, limit: usize, budget: usize) -> usize {
    if encoded_bytes(arrays, offset, limit) <= budget {
        return limit;
    }
    // The size grows with the row count: the largest count that fits.
    let (mut lo, mut hi) = (0, limit);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if encoded_bytes(arrays, offset, mid) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// The encoded size of `rows` rows of `arrays` from `offset` (see `wire.rs`): a null-mask byte
/// per row, the values, and a string column's offsets and bytes.
fn encoded_bytes(arrays: &[ArrayRef], offset: usize, rows: usize) -> usize {
    arrays
        .iter()
        .map(|a| {
            let values = match a.data_type() {
                DataType::Utf8 => {
                    let offsets = a.as_string::<i32>().value_offsets();
                    let text = offsets[offset + rows] - offsets[offset];
                    4 * rows + usize::try_from(text).unwrap_or(0)
                }
                other => other.primitive_width().unwrap_or(1) * rows,
            };
            2 + rows + values
        })
        .sum()
}

/// A run's output as it arrives: parts of rows, one array per output column each.
#[derive(Debug, Default)]
pub(crate) struct RunOutput {
    parts: Vec<Vec<ArrayRef>>,
    rows: usize,
}

impl RunOutput {
    /// Adds the next part.
    pub(crate) fn push(&mut self, part: Vec<ArrayRef>) {
        self.rows += part.first().map_or(0, |a| a.len());
        self.parts.push(part);
    }

    /// Rows so far.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// The whole output, one array per column. A text column whose values pass the 2 GiB
    /// one Utf8 array can hold is one `LargeUtf8` array (the engine cuts its rows into several
    /// batches). Fails (naming the column) where a column cannot be one array.
    pub(crate) fn finish(self, names: &[&str]) -> Result<Vec<ArrayRef>, (String, String)> {
        self.finish_within(names, i32::MAX as usize)
    }

    /// [`finish`](Self::finish) with `limit` bytes of text in one Utf8 array.
    fn finish_within(
        mut self,
        names: &[&str],
        limit: usize,
    ) -> Result<Vec<ArrayRef>, (String, String)> {
        if self.parts.len() == 1 {
            return Ok(self.parts.remove(0));
        }
        (0..names.len())
            .map(|i| {
                let fail = |e: ArrowError| (names[i].to_string(), e.to_string());
                let refs: Vec<&dyn Array> = self.parts.iter().map(|p| p[i].as_ref()).collect();
                let text: usize = refs
                    .iter()
                    .filter_map(|a| a.as_string_opt::<i32>())
                    .map(|a| {
                        let offsets = a.value_offsets();
                        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
                        usize::try_from(last - first).unwrap_or(0)
                    })
                    .sum();
                if text <= limit {
                    return concat(&refs).map_err(fail);
                }
                let large: Vec<ArrayRef> = refs
                    .iter()
                    .map(|a| cast(*a, &DataType::LargeUtf8))
                    .collect::<Result<_, _>>()
                    .map_err(fail)?;
                let refs: Vec<&dyn Array> = large.iter().map(|a| a.as_ref()).collect();
                concat(&refs).map_err(fail)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    fn small(max_rows: usize, max_bytes: usize) -> RunChunking {
        RunChunking {
            max_rows,
            max_bytes,
            ..RunChunking::default()
        }
    }

    fn ints(values: std::ops::Range<i64>) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(values))
    }

    fn values(a: &ArrayRef) -> Vec<i64> {
        a.as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn text_past_one_arrays_limit_is_one_large_array() {
        let text = |v: &[&str]| -> ArrayRef { Arc::new(StringArray::from(v.to_vec())) };
        let mut output = RunOutput::default();
        output.push(vec![text(&["abc", "de"]), ints(0..2)]);
        output.push(vec![text(&["fgh"]), ints(2..3)]);
        let columns = output.finish_within(&["s", "n"], 7).unwrap();
        assert_eq!(columns[0].data_type(), &DataType::LargeUtf8);
        assert_eq!(columns[0].as_string::<i64>().value(2), "fgh");
        assert_eq!(values(&columns[1]), vec![0, 1, 2]);
        let mut small = RunOutput::default();
        small.push(vec![text(&["abc"])]);
        small.push(vec![text(&["de"])]);
        let columns = small.finish_within(&["s"], 7).unwrap();
        assert_eq!(columns[0].data_type(), &DataType::Utf8);
    }

    #[test]
    fn chunks_cross_parts_and_respect_the_row_limit() {
        let parts = vec![
            (3, vec![ints(0..3)]),
            (1, vec![ints(3..4)]),
            (0, vec![ints(0..0)]),
            (6, vec![ints(4..10)]),
        ];
        let rows = RunRows::new(parts, vec![DataType::Int64], small(4, usize::MAX));
        assert_eq!(rows.total(), 10);
        let mut from = 0;
        let mut seen = Vec::new();
        while from < rows.total() {
            let (n, columns) = rows.chunk(from).unwrap();
            assert!(n <= 4 && n > 0);
            assert_eq!(columns[0].len(), n);
            seen.extend(values(&columns[0]));
            from += n;
        }
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(rows.chunk(10).unwrap().0, 0);
        assert!(rows.chunk(11).unwrap_err().contains("the run has 10"));
    }

    #[test]
    fn chunks_respect_the_byte_limit_but_take_at_least_one_row() {
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            "a".repeat(100),
            "b".repeat(10),
            "c".repeat(10),
        ]));
        // Per row: 1 mask byte, 4 offset bytes, the text; 2 bytes per column.
        let rows = RunRows::new(vec![(3, vec![text])], vec![DataType::Utf8], small(100, 40));
        let (n, columns) = rows.chunk(0).unwrap();
        assert_eq!(n, 1, "a row larger than the limit goes alone");
        assert_eq!(columns[0].as_string::<i32>().value(0).len(), 100);
        let (n, _) = rows.chunk(1).unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn output_parts_are_joined() {
        let mut out = RunOutput::default();
        out.push(vec![ints(0..2)]);
        out.push(vec![ints(2..5)]);
        assert_eq!(out.rows(), 5);
        let columns = out.finish(&["x"]).unwrap();
        assert_eq!(values(&columns[0]), vec![0, 1, 2, 3, 4]);
    }
}
