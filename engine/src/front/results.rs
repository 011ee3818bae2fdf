//! Results the front end makes itself: the empty result of a statement without rows, a result
//! stream with its columns renamed, and how a result may be split among readers.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

use crate::core::error::Result;

/// The result of a statement without one.
pub(crate) fn empty_stream() -> Result<SendableRecordBatchStream> {
    let schema = Arc::new(Schema::empty());
    Ok(Box::pin(MemoryStream::try_new(Vec::new(), schema, None)?))
}

/// `stream` with its columns renamed to `schema`'s (same types, same order).
pub(crate) fn with_schema(
    stream: SendableRecordBatchStream,
    schema: SchemaRef,
) -> SendableRecordBatchStream {
    let out = Arc::clone(&schema);
    Box::pin(RecordBatchStreamAdapter::new(
        out,
        stream.map(move |batch| {
            batch.and_then(|b| {
                RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec())
                    .map_err(DataFusionError::from)
            })
        }),
    ))
}

/// How a statement's result may be split among readers: a server offers an unordered query's
/// result as several endpoints, read at once; an ordered one as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultShape {
    /// The statement asked for an order (ORDER BY): one reader reads every row, in order.
    pub ordered: bool,
    /// The partitions the plan produces its result in (1 for anything but a query).
    pub partitions: usize,
}

impl ResultShape {
    /// One unordered stream: statements other than queries, and results built whole.
    pub const SINGLE: Self = Self {
        ordered: false,
        partitions: 1,
    };
}
