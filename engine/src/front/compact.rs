//! Compaction of session tables that many small writes left in tiny batches.
//!
//! A memory table keeps the batches it was written in: a table filled by 16k one-row INSERTs
//! holds 16k one-row batches, and every query over it then pays DataFusion's per-batch cost 16k
//! times (a `sum(x)` over 16k rows took 30 ms instead of 2). Like a database's row groups, a
//! partition that has gathered [`COMPACT_MIN_BATCHES`] batches or more has its runs of small
//! batches joined, in order, up to the session's batch size, once the write that left them has
//! ended. Batches of half that size or more stay as they are (so a table written under a tiny
//! `datafusion.execution.batch_size`, as tests of many batches do, keeps its batches), and so do tables with fewer batches (EXPLAIN's
//! `partition_sizes` of a table written a few times is unchanged).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::{Stream, StreamExt};

/// A partition is compacted once it holds at least this many batches.
pub(crate) const COMPACT_MIN_BATCHES: usize = 64;

/// The partitions of `table` when it is a memory table (the tables `CREATE TABLE` and
/// `CREATE TABLE … AS` make), else `None`.
fn memory_partitions(table: &Arc<dyn TableProvider>) -> Option<Vec<MemPartition>> {
    let memory = table.downcast_ref::<MemTable>()?;
    Some(memory.batches.clone())
}

/// One partition of a memory table.
type MemPartition = Arc<tokio::sync::RwLock<Vec<RecordBatch>>>;

/// Compacts every partition of `table` (a memory table; others are left alone) now, waiting for
/// readers that hold a partition.
pub(crate) async fn compact_table(
    table: &Arc<dyn TableProvider>,
    batch_size: usize,
) -> DfResult<()> {
    let Some(partitions) = memory_partitions(table) else {
        return Ok(());
    };
    for partition in partitions {
        let mut batches = partition.write().await;
        compact_in_place(&mut batches, batch_size)?;
    }
    Ok(())
}

/// Compacts `batches` where it is worth it (see the module's doc); the rows keep their order.
/// A join that fails (e.g. string offsets beyond `i32`) leaves `batches` as they were.
fn compact_in_place(batches: &mut Vec<RecordBatch>, batch_size: usize) -> DfResult<()> {
    if batches.len() < COMPACT_MIN_BATCHES {
        return Ok(());
    }
    let target = batch_size.max(1);
    let small = (target / 2).max(1);
    let mut out = Vec::with_capacity(batches.len() / 8 + 1);
    let mut run: Vec<RecordBatch> = Vec::new();
    let mut run_rows = 0;
    for batch in batches.iter().cloned() {
        let rows = batch.num_rows();
        if rows >= small {
            flush(&mut run, &mut out)?;
            run_rows = 0;
            out.push(batch);
            continue;
        }
        if run_rows + rows > target {
            flush(&mut run, &mut out)?;
            run_rows = 0;
        }
        run_rows += rows;
        run.push(batch);
    }
    flush(&mut run, &mut out)?;
    *batches = out;
    Ok(())
}

/// Joins `run` into one batch at the end of `out` (an empty run adds nothing; a run of empty
/// batches adds none).
fn flush(run: &mut Vec<RecordBatch>, out: &mut Vec<RecordBatch>) -> DfResult<()> {
    match run.len() {
        0 => {}
        1 => out.extend(run.drain(..).filter(|b| b.num_rows() > 0)),
        _ => {
            let schema = run[0].schema();
            let joined = concat_batches(&schema, run.iter())?;
            run.clear();
            if joined.num_rows() > 0 {
                out.push(joined);
            }
        }
    }
    Ok(())
}

/// `stream` (an INSERT's), compacting the target memory table's partitions when it ends. A
/// partition someone is reading then is left for the next write.
pub(crate) fn compact_after(
    stream: SendableRecordBatchStream,
    table: &Arc<dyn TableProvider>,
    batch_size: usize,
) -> SendableRecordBatchStream {
    match memory_partitions(table) {
        Some(partitions) => Box::pin(CompactAfter {
            inner: stream,
            partitions,
            batch_size,
        }),
        None => stream,
    }
}

/// The stream of [`compact_after`].
struct CompactAfter {
    inner: SendableRecordBatchStream,
    partitions: Vec<MemPartition>,
    batch_size: usize,
}

impl Stream for CompactAfter {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = item {
            let batch_size = self.batch_size;
            for partition in std::mem::take(&mut self.partitions) {
                if let Ok(mut batches) = partition.try_write() {
                    if let Err(e) = compact_in_place(&mut batches, batch_size) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
        item
    }
}

impl RecordBatchStream for CompactAfter {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(values))]).unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn tiny_batches_are_joined_in_order_up_to_the_batch_size() {
        let mut batches: Vec<_> = (0..20_000).map(|i| batch(i..i + 1)).collect();
        compact_in_place(&mut batches, 8192).unwrap();
        let sizes: Vec<_> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, vec![8192, 8192, 3616]);
        assert_eq!(values(&batches), (0..20_000).collect::<Vec<_>>());

        // Batches of the session's own (tiny) batch size are what it asked for.
        let mut asked: Vec<_> = (0..300).map(|i| batch(i * 3..i * 3 + 3)).collect();
        compact_in_place(&mut asked, 3).unwrap();
        assert_eq!(asked.len(), 300);

        let mut batches: Vec<_> = (0..25_000).map(|i| batch(i..i + 1)).collect();
        compact_in_place(&mut batches, 10_000).unwrap();
        let sizes: Vec<_> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, vec![10_000, 10_000, 5000]);
    }

    #[test]
    fn few_batches_and_big_batches_stay_as_they_are() {
        let mut few: Vec<_> = (0..COMPACT_MIN_BATCHES as i64 - 1)
            .map(|i| batch(i..i + 1))
            .collect();
        compact_in_place(&mut few, 8192).unwrap();
        assert_eq!(few.len(), COMPACT_MIN_BATCHES - 1);

        // Big batches split the runs of small ones and are not copied.
        let mut mixed: Vec<_> = (0..100).map(|i| batch(i..i + 1)).collect();
        mixed.insert(50, batch(1000..6000));
        mixed.push(batch(9000..9000));
        let big = mixed[50].column(0).to_data();
        compact_in_place(&mut mixed, 8192).unwrap();
        let sizes: Vec<_> = mixed.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, vec![50, 5000, 50]);
        assert!(mixed[1].column(0).to_data().ptr_eq(&big));
        let mut want: Vec<i64> = (0..50).collect();
        want.extend(1000..6000);
        want.extend(50..100);
        assert_eq!(values(&mixed), want);
    }
}
