//! Tasks that can be stopped between batches: every operator of an executor's task plan is
//! wrapped so that its output stream gives the thread back after each batch.
//!
//! DataFusion's streams yield only when an input is not ready (or tokio's budget of 128 polls
//! runs out). An operator that does much work per batch (a nested-loop join over a large
//! series) then computes for minutes without returning to tokio, and nothing else on its
//! thread runs meanwhile: not the task's timeout, not the scheduler's cancel, not the
//! executor's other tasks. With a yield after each batch, a task stops within one batch.

use std::any::Any;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, RecordBatchStream,
    SendableRecordBatchStream,
};
use futures::Stream;

/// `plan` with every input of every operator (the root's own output excepted) behind a
/// [`YieldEachBatch`].
pub(crate) fn yield_each_batch(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if node.children().is_empty() || (node.as_ref() as &dyn Any).is::<YieldEachBatch>() {
            return Ok(Transformed::no(node));
        }
        let children = node
            .children()
            .into_iter()
            .map(|child| {
                let is_wrapped = (child.as_ref() as &dyn Any).is::<YieldEachBatch>();
                match is_wrapped {
                    true => Arc::clone(child),
                    false => Arc::new(YieldEachBatch::new(Arc::clone(child))) as _,
                }
            })
            .collect();
        // A wrapper has its input's properties: the node's stay as they are.
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep);
        Ok(Transformed::yes(node.replace_children(children, options)?))
    })
    .map(|t| t.data)
}

/// Its input's output, unchanged, with a yield to tokio after each batch.
#[derive(Debug)]
pub(crate) struct YieldEachBatch {
    input: Arc<dyn ExecutionPlan>,
}

impl YieldEachBatch {
    fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for YieldEachBatch {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "YieldEachBatch")
    }
}

impl ExecutionPlan for YieldEachBatch {
    fn name(&self) -> &str {
        "YieldEachBatch"
    }

    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(Self::new(input))),
            _ => datafusion::common::internal_err!("YieldEachBatch has one input"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Ok(Box::pin(YieldingStream {
            inner: self.input.execute(partition, context)?,
            owe_yield: false,
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        None
    }
}

/// A stream that returns `Pending` once (waking itself at once) after each batch it passes on.
struct YieldingStream {
    inner: SendableRecordBatchStream,
    owe_yield: bool,
}

impl Stream for YieldingStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.owe_yield {
            self.owe_yield = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = self.inner.as_mut().poll_next(cx);
        if matches!(next, Poll::Ready(Some(_))) {
            self.owe_yield = true;
        }
        next
    }
}

impl RecordBatchStream for YieldingStream {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::SessionContext;
    use futures::StreamExt;

    #[tokio::test]
    async fn every_input_yields_after_each_batch_and_the_result_is_unchanged() {
        let ctx = SessionContext::new();
        let sql = "SELECT count(*) FROM generate_series(1, 20000) a \
                   JOIN generate_series(1, 30) b ON a.value % 30 = b.value";
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let wrapped = yield_each_batch(Arc::clone(&plan)).unwrap();
        let text = displayable(wrapped.as_ref()).indent(false).to_string();
        // Every operator but the root reads through one wrapper, never two.
        let operators = displayable(plan.as_ref())
            .indent(false)
            .to_string()
            .lines()
            .count();
        assert_eq!(
            text.matches("YieldEachBatch").count(),
            operators - 1,
            "{text}"
        );
        assert!(!text.contains("YieldEachBatch\n  YieldEachBatch"), "{text}");
        let again = yield_each_batch(Arc::clone(&wrapped)).unwrap();
        assert_eq!(displayable(again.as_ref()).indent(false).to_string(), text);

        // The same answer (20000 values less the 666 multiples of 30).
        let mut stream = wrapped.execute(0, ctx.task_ctx()).unwrap();
        let mut rows = Vec::new();
        while let Some(batch) = stream.next().await {
            rows.push(batch.unwrap());
        }
        let cells = datafusion::arrow::util::pretty::pretty_format_batches(&rows)
            .unwrap()
            .to_string();
        assert!(cells.contains("| 19334 "), "{cells}");

        // A stream returns Pending between batches.
        let input = ctx
            .sql("SELECT value FROM generate_series(1, 20000)")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut yielding = YieldingStream {
            inner: input.execute(0, ctx.task_ctx()).unwrap(),
            owe_yield: false,
        };
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let first = Pin::new(&mut yielding).poll_next(&mut cx);
        assert!(matches!(first, Poll::Ready(Some(Ok(_)))));
        assert!(Pin::new(&mut yielding).poll_next(&mut cx).is_pending());
        assert!(matches!(
            Pin::new(&mut yielding).poll_next(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
    }
}
