//! `UdfCallExec`, the physical operator of an EMITS call. SET calls get their input hash-partitioned
//! by the GROUP BY keys, and each group is handed to one instance as one run: with
//! [`SetGrouping::Gather`] (the default) the partition's rows are kept as they arrive, their
//! indices sorted by the keys alone, and each group's rows gathered just before its run; with
//! [`SetGrouping::Sort`] the input arrives sorted by the keys (payloads and all). SCALAR EMITS
//! calls run batch by batch, tiny batches gathered up to the session's batch size.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array, new_null_array};
use datafusion::arrow::compute::{concat, interleave, partition, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::{
    EquivalenceProperties, LexRequirement, OrderingRequirements, PhysicalExpr,
    PhysicalSortRequirement,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties,
};
use futures::StreamExt;

use super::text_batches::batches_within;
use crate::core::error::EngineError;
use crate::core::options::SetGrouping;
use crate::udf::{InputType, PlacedCall, RunChunk, RunInput, SetUdf, on_instance};
use crate::udf_result_err;

/// The physical operator of one EMITS call.
#[derive(Debug)]
pub(crate) struct UdfCallExec {
    call: Arc<CallSpec>,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// What every partition's stream shares.
#[derive(Debug)]
pub(crate) struct CallSpec {
    pub(crate) def: Arc<SetUdf>,
    pub(crate) keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Which keys the output shows, before the EMITS columns.
    pub(crate) output_keys: Vec<usize>,
    pub(crate) args: Vec<Arc<dyn PhysicalExpr>>,
    /// SCALAR EMITS: the select list's other items, repeated for each row their input row emits;
    /// the output's first columns.
    pub(crate) carried: Vec<Arc<dyn PhysicalExpr>>,
    pub(crate) schema: SchemaRef,
    pub(crate) placed: Option<Arc<PlacedCall>>,
    /// How a SET call with GROUP BY keys gets each group's rows together.
    pub(crate) grouping: SetGrouping,
    /// A SET call split by its [`TopKMerge`](crate::udf::TopKMerge), whose `k` best rows per run
    /// a merge above takes in: without GROUP BY each input partition is a run of its own; with
    /// it, each group of each input batch.
    pub(crate) partial: bool,
}

impl UdfCallExec {
    pub(crate) fn new(call: CallSpec, input: Arc<dyn ExecutionPlan>) -> Self {
        Self::with_spec(Arc::new(call), input)
    }

    /// The call it runs.
    pub(crate) fn call(&self) -> &Arc<CallSpec> {
        &self.call
    }

    fn with_spec(call: Arc<CallSpec>, input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&call.schema)),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Incremental,
            match input.boundedness() {
                Boundedness::Bounded => Boundedness::Bounded,
                other => other,
            },
        );
        Self {
            call,
            input,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    fn is_set(&self) -> bool {
        self.call.def.input_type() == InputType::Set
    }
}

impl CallSpec {
    /// Whether the operator gathers each group's rows itself (a SET call with GROUP BY keys in
    /// [`SetGrouping::Gather`] mode) rather than getting its input sorted by the keys.
    fn gathers_groups(&self) -> bool {
        self.def.input_type() == InputType::Set
            && !self.keys.is_empty()
            && self.grouping == SetGrouping::Gather
            && !self.partial
    }
}

impl DisplayAs for UdfCallExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = &self.call;
        write!(
            f,
            "UdfCallExec: {} {}(",
            call.def.input_type(),
            call.def.name()
        )?;
        for (i, a) in call.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        f.write_str(")")?;
        if !call.keys.is_empty() {
            f.write_str(", group by [")?;
            for (i, k) in call.keys.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}")?;
            }
            f.write_str("]")?;
            if call.gathers_groups() {
                f.write_str(" (gathered)")?;
            }
        }
        if call.partial {
            f.write_str(if call.keys.is_empty() {
                ", partial: each partition's best"
            } else {
                ", partial: each batch's groups' best"
            })?;
        }
        match &call.placed {
            Some(p) => write!(
                f,
                ", placement={}, instances={}",
                p.decision.placement, p.instances
            ),
            None => f.write_str(", placement=CPU (unplaced)"),
        }
    }
}

impl ExecutionPlan for UdfCallExec {
    fn name(&self) -> &str {
        "UdfCallExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        for e in self
            .call
            .keys
            .iter()
            .chain(&self.call.args)
            .chain(&self.call.carried)
        {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "UdfCallExec has one input, got {}",
                children.len()
            )));
        }
        Ok(Arc::new(Self::with_spec(
            Arc::clone(&self.call),
            children.remove(0),
        )))
    }

    fn input_distribution_requirements(
        &self,
    ) -> datafusion::physical_plan::InputDistributionRequirements {
        let distribution = match (
            self.is_set() && !self.call.partial,
            self.call.keys.is_empty(),
        ) {
            // One group per key value: all of a group's rows in one partition.
            (true, false) => Distribution::KeyPartitioned(self.call.keys.clone()),
            // No GROUP BY: the whole input is one group.
            (true, true) => Distribution::SinglePartition,
            (false, _) => Distribution::UnspecifiedDistribution,
        };
        datafusion::physical_plan::InputDistributionRequirements::new(vec![distribution])
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        if !self.is_set() || self.call.gathers_groups() || self.call.partial {
            return vec![None];
        }
        // Rows of one group arrive together: sorted by the keys (either direction).
        let requirement = LexRequirement::new(
            self.call
                .keys
                .iter()
                .map(|k| PhysicalSortRequirement::new(Arc::clone(k), None)),
        );
        vec![requirement.map(OrderingRequirements::new)]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![!(self.is_set() && self.call.keys.is_empty()) || self.call.partial]
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let batch_size = context.session_config().batch_size();
        let gathered = self.call.gathers_groups().then(|| Gathered {
            batches: Vec::new(),
            reservation: MemoryConsumer::new(format!("UdfCallExec[{partition}]"))
                .register(context.memory_pool()),
            groups: VecDeque::new(),
            ordered: false,
        });
        let input = self.input.execute(partition, context)?;
        let state = RunState {
            batch_size,
            call: Arc::clone(&self.call),
            input,
            partition,
            runs_started: 0,
            group: None,
            gathered,
            pending: VecDeque::new(),
            done: false,
            baseline: BaselineMetrics::new(&self.metrics, partition),
            rows_in: MetricBuilder::new(&self.metrics).counter("rows_in", partition),
            runs: MetricBuilder::new(&self.metrics).counter("runs", partition),
        };
        let stream = futures::stream::try_unfold(state, |mut state| async move {
            loop {
                if let Some(batch) = state.pending.pop_front() {
                    state.baseline.record_output(batch.num_rows());
                    return Ok(Some((batch, state)));
                }
                if state.done {
                    let elapsed = state.baseline.elapsed_compute().clone();
                    let timer = elapsed.timer();
                    let ran = state
                        .run_next_gathered()
                        .map_err(EngineError::into_datafusion)?;
                    timer.done();
                    if ran {
                        continue;
                    }
                    return Ok(None);
                }
                match state.input.next().await {
                    Some(batch) => {
                        let batch = batch?;
                        let elapsed = state.baseline.elapsed_compute().clone();
                        let timer = elapsed.timer();
                        state
                            .consume(&batch)
                            .map_err(EngineError::into_datafusion)?;
                        timer.done();
                    }
                    None => {
                        state.done = true;
                        let elapsed = state.baseline.elapsed_compute().clone();
                        let timer = elapsed.timer();
                        state.finish_group().map_err(EngineError::into_datafusion)?;
                        state
                            .run_empty_input()
                            .map_err(EngineError::into_datafusion)?;
                        state
                            .order_gathered()
                            .map_err(EngineError::into_datafusion)?;
                        timer.done();
                    }
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.call.schema),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The rows of the group being gathered: slices of the input batches (constant arguments as
/// scalars), handed to the kernel as they are.
struct Group {
    key: Vec<ScalarValue>,
    input: RunInput,
    /// The carried items' values for the run's rows, batch by batch (one list per item).
    carried: Vec<Vec<ArrayRef>>,
}

impl Group {
    fn new(key: Vec<ScalarValue>, carried: usize) -> Self {
        Self {
            key,
            input: RunInput::new(),
            carried: vec![Vec::new(); carried],
        }
    }
}

/// A partition's rows kept for [`SetGrouping::Gather`]: its batches' keys and arguments as
/// they arrived, and, once the input has ended, the groups still to run.
struct Gathered {
    /// Per input batch: its rows, its key columns and its arguments.
    batches: Vec<(usize, Vec<ArrayRef>, Vec<ColumnarValue>)>,
    /// The memory the kept batches hold, in the statement's pool (so a session's budget
    /// bounds it as it bounds a sort).
    reservation: MemoryReservation,
    /// The groups left to run.
    groups: VecDeque<GatheredGroup>,
    /// Whether the groups have been worked out.
    ordered: bool,
}

/// One group of a [`Gathered`] partition: its key and its rows as `(batch, row)` pairs.
struct GatheredGroup {
    key: Vec<ScalarValue>,
    rows: Vec<(usize, usize)>,
}

/// One partition's progress.
struct RunState {
    call: Arc<CallSpec>,
    input: SendableRecordBatchStream,
    /// The input partition. SCALAR EMITS runs go to instance `partition % instances`; SET groups
    /// go round the instances from there, so groups spread over instances (and their devices)
    /// even when the input is one partition.
    partition: usize,
    /// Runs started so far in this partition.
    runs_started: usize,
    /// The session's batch size: a SCALAR EMITS run gathers input rows until it has this many
    /// (or the input ends), so that small input batches do not each cost a run.
    batch_size: usize,
    group: Option<Group>,
    /// [`SetGrouping::Gather`]: the partition's rows, kept until its input ends.
    gathered: Option<Gathered>,
    pending: VecDeque<RecordBatch>,
    done: bool,
    baseline: BaselineMetrics,
    rows_in: Count,
    runs: Count,
}

impl RunState {
    fn consume(&mut self, batch: &RecordBatch) -> crate::Result<()> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        self.rows_in.add(rows);
        let args = evaluate_values(&self.call.args, batch)?;
        if self.call.def.input_type() == InputType::Scalar {
            let carried = evaluate(&self.call.carried, batch)?;
            let group = self
                .group
                .get_or_insert_with(|| Group::new(Vec::new(), carried.len()));
            group.input.push(RunChunk::new(rows, args))?;
            for (values, column) in group.carried.iter_mut().zip(carried) {
                values.push(column);
            }
            if group.input.num_rows() >= self.batch_size {
                self.finish_group()?;
            }
            return Ok(());
        }
        let keys = evaluate(&self.call.keys, batch)?;
        if self.call.partial && !keys.is_empty() {
            return self.run_batch_groups(rows, keys, args);
        }
        if let Some(gathered) = &mut self.gathered {
            let size: usize = keys
                .iter()
                .map(|k| k.get_array_memory_size())
                .chain(args.iter().map(|a| match a {
                    ColumnarValue::Array(a) => a.get_array_memory_size(),
                    ColumnarValue::Scalar(_) => 0,
                }))
                .sum();
            gathered.reservation.try_grow(size)?;
            gathered.batches.push((rows, keys, args));
            return Ok(());
        }
        let ranges: Vec<std::ops::Range<usize>> = if keys.is_empty() {
            std::iter::once(0..rows).collect()
        } else {
            partition(&keys).map_err(DataFusionError::from)?.ranges()
        };
        for range in ranges {
            let key = keys
                .iter()
                .map(|k| ScalarValue::try_from_array(k, range.start))
                .collect::<DfResult<Vec<_>>>()?;
            if self.group.as_ref().is_some_and(|g| g.key != key) {
                self.finish_group()?;
            }
            let group = self.group.get_or_insert_with(|| Group::new(key, 0));
            let chunk = args
                .iter()
                .map(|arg| match arg {
                    ColumnarValue::Array(a) if range.len() < rows => {
                        ColumnarValue::Array(a.slice(range.start, range.len()))
                    }
                    other => other.clone(),
                })
                .collect();
            group.input.push(RunChunk::new(range.len(), chunk))?;
        }
        Ok(())
    }

    /// A partial run of a grouped call: each of the batch's groups runs on its own, its rows
    /// gathered from the batch (the merge above keeps each group's best of all its runs).
    fn run_batch_groups(
        &mut self,
        rows: usize,
        keys: Vec<ArrayRef>,
        args: Vec<ColumnarValue>,
    ) -> crate::Result<()> {
        let batches = [(rows, keys, args)];
        for GatheredGroup { key, rows: places } in group_rows(&batches, self.call.keys.len())? {
            let args = if places.len() == rows {
                // The batch is one group: its arguments as they are.
                batches[0].2.clone()
            } else {
                (0..self.call.args.len())
                    .map(|a| gather_argument(&batches, a, &places))
                    .collect::<DfResult<Vec<_>>>()?
            };
            let mut group = Group::new(key, 0);
            group.input.push(RunChunk::new(places.len(), args))?;
            self.run(&group)?;
        }
        Ok(())
    }

    /// [`SetGrouping::Gather`], once the input has ended: the partition's row indices sorted
    /// by the keys alone (NULL keys a group of their own), cut into groups.
    fn order_gathered(&mut self) -> crate::Result<()> {
        let Some(gathered) = &mut self.gathered else {
            return Ok(());
        };
        if std::mem::replace(&mut gathered.ordered, true) || gathered.batches.is_empty() {
            return Ok(());
        }
        gathered.groups = group_rows(&gathered.batches, self.call.keys.len())?;
        Ok(())
    }

    /// [`SetGrouping::Gather`]: runs the next group, its rows gathered from the kept batches in
    /// chunks of the session's batch size; false when none is left.
    fn run_next_gathered(&mut self) -> crate::Result<bool> {
        let Some(gathered) = &mut self.gathered else {
            return Ok(false);
        };
        let Some(GatheredGroup { key, rows }) = gathered.groups.pop_front() else {
            // Every group has run: the kept rows go.
            gathered.batches.clear();
            gathered.reservation.free();
            return Ok(false);
        };
        let mut group = Group::new(key, 0);
        for chunk in rows.chunks(self.batch_size.max(1)) {
            let args = (0..self.call.args.len())
                .map(|a| gather_argument(&gathered.batches, a, chunk))
                .collect::<DfResult<Vec<_>>>()?;
            group.input.push(RunChunk::new(chunk.len(), args))?;
        }
        self.run(&group)?;
        Ok(true)
    }

    /// A SET script called without GROUP BY over no rows at all: Exasol calls it once even
    /// then, with one row of NULLs. Other UDFs, and grouped calls (no group), are not called.
    fn run_empty_input(&mut self) -> crate::Result<()> {
        let once = self.call.def.input_type() == InputType::Set
            && self.call.def.is_local()
            && self.call.keys.is_empty()
            && !self.call.partial
            && self.runs_started == 0
            && self.rows_in.value() == 0;
        if !once {
            return Ok(());
        }
        let schema = self.input.schema();
        let nulls = self
            .call
            .args
            .iter()
            .map(|e| {
                Ok(ColumnarValue::Array(new_null_array(
                    &e.data_type(&schema)?,
                    1,
                )))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let mut group = Group::new(Vec::new(), 0);
        group.input.push(RunChunk::new(1, nulls))?;
        self.run(&group)
    }

    /// Hands the gathered group, if any, to an instance as one run.
    fn finish_group(&mut self) -> crate::Result<()> {
        let Some(group) = self.group.take() else {
            return Ok(());
        };
        self.run(&group)
    }

    /// One run: the kernel's rows, checked against EMITS, behind the run's key columns (SET) or
    /// carried items (SCALAR).
    fn run(&mut self, group: &Group) -> crate::Result<()> {
        let (key, input) = (&group.key, &group.input);
        let rows = input.num_rows();
        let call = Arc::clone(&self.call);
        let def = &call.def;
        let slot = match def.input_type() {
            InputType::Set => self.partition + self.runs_started,
            InputType::Scalar => self.partition,
        };
        self.runs_started += 1;
        let ran = on_instance(
            call.placed.as_deref(),
            Some(slot),
            def.name(),
            def.accelerator(),
            def.cpu.as_ref(),
            def.gpu.as_deref(),
            |kernel, context| {
                if group.carried.is_empty() {
                    Ok((kernel.run_input(context, input)?, None))
                } else {
                    let (columns, ends) = kernel.run_input_traced(context, input)?;
                    Ok((columns, Some(ends)))
                }
            },
        )?;
        self.runs.add(1);
        let (value, row_ends) = ran.value;
        let leading = call.output_keys.len() + group.carried.len();
        let emitted = check_emitted(def, &call.schema, leading, value)?;
        let out_rows = emitted.first().map_or(0, |c| c.len());
        if let Some(placed) = &call.placed {
            placed
                .stats
                .record(rows, out_rows, ran.elapsed, ran.instance, ran.used_gpu_impl);
        }
        if out_rows == 0 {
            return Ok(());
        }
        let mut columns = call
            .output_keys
            .iter()
            .filter_map(|&i| key.get(i))
            .map(|k| k.to_array_of_size(out_rows))
            .collect::<DfResult<Vec<_>>>()?;
        if let Some(ends) = row_ends {
            columns.extend(carry(def, &group.carried, &ends, rows, out_rows)?);
        }
        columns.extend(emitted);
        // More than 2 GiB of text in a column leaves as several batches.
        let batches = batches_within(&call.schema, columns, i32::MAX as usize)
            .map_err(|e| udf_result_err!(def.name(), "{e}"))?;
        self.pending.extend(batches);
        Ok(())
    }
}

/// The carried items' values for a run's output rows: each input row's values repeated for
/// each row it emitted (`ends`: the running count of emitted rows after each input row).
fn carry(
    def: &SetUdf,
    carried: &[Vec<ArrayRef>],
    ends: &[u64],
    rows: usize,
    out_rows: usize,
) -> crate::Result<Vec<ArrayRef>> {
    let bad = |message: String| udf_result_err!(def.name(), "{message}");
    if ends.len() != rows || ends.last().copied().unwrap_or(0) != out_rows as u64 {
        return Err(bad(format!(
            "it traced {} input rows and {} output rows for a run of {rows} rows that emitted \
             {out_rows}",
            ends.len(),
            ends.last().copied().unwrap_or(0)
        )));
    }
    let mut origins = Vec::with_capacity(out_rows);
    let mut start = 0u64;
    for (row, &end) in ends.iter().enumerate() {
        if end < start {
            return Err(bad("its emitted-row counts decrease".to_string()));
        }
        let row = u32::try_from(row).map_err(|_| bad(format!("{rows} rows in one run")))?;
        origins.extend(std::iter::repeat_n(row, (end - start) as usize));
        start = end;
    }
    let origins = UInt32Array::from(origins);
    carried
        .iter()
        .map(|parts| {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let values = concat(&refs)?;
            Ok(take(values.as_ref(), &origins, None)?)
        })
        .collect::<DfResult<Vec<_>>>()
        .map_err(EngineError::from)
}

/// The groups of the kept `batches` (`keys` key columns each), in key order, each with its
/// rows as `(batch, row)` pairs in the order they arrived: the row indices are sorted (stably)
/// by the keys' row encoding alone, in which NULLs are equal.
fn group_rows(
    batches: &[(usize, Vec<ArrayRef>, Vec<ColumnarValue>)],
    keys: usize,
) -> DfResult<VecDeque<GatheredGroup>> {
    // Where each row of the concatenated keys lives.
    let places: Vec<(usize, usize)> = batches
        .iter()
        .enumerate()
        .flat_map(|(b, (rows, _, _))| (0..*rows).map(move |r| (b, r)))
        .collect();
    let keys = (0..keys)
        .map(|k| {
            let parts: Vec<&dyn Array> = batches
                .iter()
                .map(|(_, keys, _)| keys[k].as_ref())
                .collect();
            concat(&parts)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let converter = RowConverter::new(
        keys.iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect(),
    )?;
    let encoded = converter.convert_columns(&keys)?;
    let mut order: Vec<usize> = (0..places.len()).collect();
    order.sort_by(|&a, &b| encoded.row(a).cmp(&encoded.row(b)));
    let mut groups = VecDeque::new();
    for run in order.chunk_by(|&a, &b| encoded.row(a) == encoded.row(b)) {
        let key = keys
            .iter()
            .map(|k| ScalarValue::try_from_array(k, run[0]))
            .collect::<DfResult<Vec<_>>>()?;
        groups.push_back(GatheredGroup {
            key,
            rows: run.iter().map(|&i| places[i]).collect(),
        });
    }
    Ok(groups)
}

/// Argument `a` of the kept rows `rows` (`(batch, row)` pairs), in that order; a constant
/// (a scalar in every batch) stays a scalar.
fn gather_argument(
    batches: &[(usize, Vec<ArrayRef>, Vec<ColumnarValue>)],
    a: usize,
    rows: &[(usize, usize)],
) -> DfResult<ColumnarValue> {
    if let Some((_, _, args)) = batches.first()
        && let ColumnarValue::Scalar(value) = &args[a]
        && batches
            .iter()
            .all(|(_, _, args)| matches!(&args[a], ColumnarValue::Scalar(v) if v == value))
    {
        return Ok(ColumnarValue::Scalar(value.clone()));
    }
    let arrays = batches
        .iter()
        .map(|(n, _, args)| args[a].to_array(*n))
        .collect::<DfResult<Vec<_>>>()?;
    let refs: Vec<&dyn Array> = arrays.iter().map(|x| x.as_ref()).collect();
    Ok(ColumnarValue::Array(interleave(&refs, rows)?))
}

/// The arguments for `batch`: constants stay scalars.
fn evaluate_values(
    exprs: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> DfResult<Vec<ColumnarValue>> {
    exprs.iter().map(|e| e.evaluate(batch)).collect()
}

fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> DfResult<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}

/// Checks a run's output against the EMITS columns (the schema after `keys` key columns).
fn check_emitted(
    def: &SetUdf,
    schema: &SchemaRef,
    keys: usize,
    columns: Vec<ArrayRef>,
) -> crate::Result<Vec<ArrayRef>> {
    let bad = |message: String| udf_result_err!(def.name(), "{message}");
    let fields = &schema.fields()[keys..];
    if columns.len() != fields.len() {
        return Err(bad(format!(
            "{} columns where EMITS declares {}",
            columns.len(),
            fields.len()
        )));
    }
    let rows = columns.first().map_or(0, |c| c.len());
    for (column, field) in columns.iter().zip(fields) {
        if column.len() != rows {
            return Err(bad(format!(
                "column {} has {} rows, column {} has {rows}",
                field.name(),
                column.len(),
                fields[0].name()
            )));
        }
        // Text past one Utf8 array's 2 GiB comes as LargeUtf8 (cut into batches later).
        let large_text =
            column.data_type() == &DataType::LargeUtf8 && field.data_type() == &DataType::Utf8;
        if column.data_type() != field.data_type() && !large_text {
            return Err(bad(format!(
                "column {} is {} where EMITS says {}",
                field.name(),
                column.data_type(),
                field.data_type()
            )));
        }
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(bad(format!(
                "column {} is declared NOT NULL but holds NULL",
                field.name()
            )));
        }
    }
    Ok(columns)
}
