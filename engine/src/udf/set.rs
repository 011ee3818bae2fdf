//! Rust UDFs whose implementation gets whole runs of rows: Exasol's SET scripts (RETURNS or
//! EMITS) and SCALAR EMITS scripts.

use std::fmt;
use std::sync::Arc;

use accelsql_udf_runtime::annotations::parse_instance_limit;
use accelsql_udf_runtime::{AcceleratorRequest, InstanceContext};
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::ScalarValue;
use datafusion::common::exec_datafusion_err;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::ColumnarValue;

use super::definition::{
    Inputs, UdfHeader, check_name, common_builder_methods, common_udf_methods,
};
use super::script::origin::ScriptOrigin;
use crate::{Result, definition_err};

/// A run-based UDF implementation.
///
/// One call of [`SetKernel::run`] is one run: a whole group for a SET UDF (all rows with the same
/// GROUP BY keys, or the whole input without GROUP BY), or a batch of input rows for a SCALAR
/// EMITS UDF. `args` holds one column of `num_rows` rows per argument.
///
/// The result is the run's output as columns:
/// - EMITS: one column per EMITS column, all of the same length (any, zero included), of the
///   declared types.
/// - RETURNS (SET only): one column holding exactly one value, of the declared type.
pub trait SetKernel: Send + Sync {
    /// Processes one run on the instance described by `instance`.
    fn run(
        &self,
        instance: &InstanceContext,
        num_rows: usize,
        args: &[ArrayRef],
    ) -> datafusion::error::Result<Vec<ArrayRef>>;

    /// Processes one run given as the engine gathered it: in chunks, with constant arguments
    /// as scalars. This is what the engine calls; the default joins the chunks into one column
    /// per argument ([`RunInput::to_arrays`]) and calls [`SetKernel::run`]. Override it to work
    /// chunk by chunk instead, without that copy (e.g. a selection that keeps only a few rows).
    /// The result is that of [`SetKernel::run`].
    fn run_input(
        &self,
        instance: &InstanceContext,
        input: &RunInput,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        let args = input.to_arrays()?;
        self.run(instance, input.num_rows(), &args)
    }

    /// Processes one run of a SCALAR EMITS UDF and says which input row each output row came
    /// from: the output, and for each input row how many rows the run had emitted after it (a
    /// running count). The engine calls this when the call's select list carries other items,
    /// whose values are repeated for each row their input row emitted.
    ///
    /// The default runs each input row on its own ([`SetKernel::run`] per row); override it
    /// where one run can tell.
    fn run_input_traced(
        &self,
        instance: &InstanceContext,
        input: &RunInput,
    ) -> datafusion::error::Result<(Vec<ArrayRef>, Vec<u64>)> {
        let args = input.to_arrays()?;
        let rows = input.num_rows();
        if rows == 0 {
            return Ok((self.run(instance, 0, &args)?, Vec::new()));
        }
        let mut outputs = Vec::with_capacity(rows);
        let mut ends = Vec::with_capacity(rows);
        let mut emitted = 0u64;
        for row in 0..rows {
            let one: Vec<ArrayRef> = args.iter().map(|a| a.slice(row, 1)).collect();
            let out = self.run(instance, 1, &one)?;
            emitted += out.first().map_or(0, |c| c.len()) as u64;
            ends.push(emitted);
            outputs.push(out);
        }
        let width = outputs.first().map_or(0, Vec::len);
        let columns = (0..width)
            .map(|i| {
                let parts = outputs
                    .iter()
                    .map(|o| {
                        o.get(i).map(|a| a.as_ref()).ok_or_else(|| {
                            exec_datafusion_err!(
                                "a run returned {} columns, another more than {i}",
                                o.len()
                            )
                        })
                    })
                    .collect::<datafusion::error::Result<Vec<&dyn Array>>>()?;
                Ok(concat(&parts)?)
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        Ok((columns, ends))
    }
}

/// One run's rows as they arrived: consecutive chunks (slices of input batches), each with every
/// argument for its rows. An argument that holds one value for all of a chunk's rows (a constant
/// such as a query vector) comes as [`ColumnarValue::Scalar`], not replicated.
///
/// Runs gathered from many small input batches stay compact: once [`RunInput::push`] has
/// appended 64 chunks of fewer than 1024 rows in a row, it merges them into one, so a run's chunk count (and the work per chunk downstream) does not
/// grow with the number of input batches, only with its rows.
#[derive(Debug, Clone, Default)]
pub struct RunInput {
    num_rows: usize,
    chunks: Vec<RunChunk>,
    /// How many chunks at the end are small and not merged yet.
    small_tail: usize,
    /// Memory held by the chunks' arrays (as [`Array::get_array_memory_size`] counts it).
    memory_size: usize,
}

/// A chunk with fewer rows than this is small: [`RunInput::push`] merges runs of small chunks.
pub(crate) const SMALL_CHUNK_ROWS: usize = 1024;

/// How many small chunks in a row [`RunInput::push`] merges into one.
pub(crate) const SMALL_CHUNKS_MERGED: usize = 64;

/// Consecutive rows of a run: one value per argument, a column of [`RunChunk::num_rows`] rows
/// or a scalar standing for each of them.
#[derive(Debug, Clone)]
pub struct RunChunk {
    num_rows: usize,
    args: Vec<ColumnarValue>,
}

impl RunChunk {
    /// A chunk of `num_rows` rows; every [`ColumnarValue::Array`] must have that many.
    pub fn new(num_rows: usize, args: Vec<ColumnarValue>) -> Self {
        Self { num_rows, args }
    }

    /// How many rows.
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// The arguments, in call order.
    pub fn args(&self) -> &[ColumnarValue] {
        &self.args
    }

    /// Each argument as a column of [`RunChunk::num_rows`] rows (a scalar replicated).
    pub fn to_arrays(&self) -> datafusion::error::Result<Vec<ArrayRef>> {
        self.args
            .iter()
            .map(|a| a.to_array(self.num_rows))
            .collect()
    }
}

impl RunInput {
    /// An empty run (no rows).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a chunk (merging the last small chunks into one when there are 64 of them). Fails only if merging does (chunks whose arguments
    /// disagree in number or type).
    pub fn push(&mut self, chunk: RunChunk) -> datafusion::error::Result<()> {
        if chunk.num_rows == 0 {
            return Ok(());
        }
        self.num_rows += chunk.num_rows;
        self.memory_size += chunk_memory_size(&chunk);
        if chunk.num_rows < SMALL_CHUNK_ROWS {
            self.small_tail += 1;
        } else {
            self.small_tail = 0;
        }
        self.chunks.push(chunk);
        if self.small_tail >= SMALL_CHUNKS_MERGED {
            self.merge_small_tail()?;
        }
        Ok(())
    }

    /// Replaces the small chunks at the end with one chunk holding their rows; an argument that
    /// is the same scalar in each of them stays that scalar.
    fn merge_small_tail(&mut self) -> datafusion::error::Result<()> {
        let tail_start = self.chunks.len() - self.small_tail;
        let tail = RunInput::from_chunks(self.chunks.split_off(tail_start));
        let arity = tail.chunks.first().map_or(0, |c| c.args.len());
        let args = (0..arity)
            .map(|i| match tail.constant(i)? {
                Some(value) => Ok(ColumnarValue::Scalar(value.clone())),
                None => Ok(ColumnarValue::Array(tail.to_array(i)?)),
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let merged = RunChunk::new(tail.num_rows, args);
        self.memory_size = self.memory_size - tail.memory_size + chunk_memory_size(&merged);
        // A merged chunk that is still small joins the next merge: the small chunks grow into
        // one of about SMALL_CHUNK_ROWS rows, each row copied a bounded number of times.
        self.small_tail = usize::from(merged.num_rows < SMALL_CHUNK_ROWS);
        self.chunks.push(merged);
        Ok(())
    }

    /// A run of `chunks` as they are (no merging).
    fn from_chunks(chunks: Vec<RunChunk>) -> Self {
        Self {
            num_rows: chunks.iter().map(|c| c.num_rows).sum(),
            memory_size: chunks.iter().map(chunk_memory_size).sum(),
            small_tail: 0,
            chunks,
        }
    }

    /// Memory held by the run's arrays, counted as the chunks arrived (a slice counts its
    /// whole buffers, as [`Array::get_array_memory_size`] does).
    pub fn memory_size(&self) -> usize {
        self.memory_size
    }

    /// The run's row count (all chunks).
    pub fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// The chunks, in input order.
    pub fn chunks(&self) -> &[RunChunk] {
        &self.chunks
    }

    /// One column per argument holding every row of the run: a constant (the same scalar in
    /// every chunk) is replicated once, a single chunk's column is shared, more are
    /// concatenated. A run without chunks has no arguments.
    pub fn to_arrays(&self) -> datafusion::error::Result<Vec<ArrayRef>> {
        let Some(first) = self.chunks.first() else {
            return Ok(Vec::new());
        };
        (0..first.args.len()).map(|i| self.to_array(i)).collect()
    }

    /// Argument `i` of chunk `chunk`.
    fn arg<'a>(
        &self,
        chunk: &'a RunChunk,
        i: usize,
    ) -> datafusion::error::Result<&'a ColumnarValue> {
        chunk.args.get(i).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "a chunk of the run has {} arguments where another has more than {i}",
                chunk.args.len()
            ))
        })
    }

    /// The scalar that argument `i` is in every chunk, if it is one.
    fn constant(&self, i: usize) -> datafusion::error::Result<Option<&ScalarValue>> {
        let mut constant = None;
        for chunk in &self.chunks {
            match (self.arg(chunk, i)?, constant) {
                (ColumnarValue::Scalar(s), None) => constant = Some(s),
                (ColumnarValue::Scalar(s), Some(c)) if s == c => {}
                _ => return Ok(None),
            }
        }
        Ok(constant)
    }

    /// Argument `i` as one column of [`RunInput::num_rows`] rows.
    fn to_array(&self, i: usize) -> datafusion::error::Result<ArrayRef> {
        if let Some(value) = self.constant(i)? {
            return value.to_array_of_size(self.num_rows);
        }
        let parts = self
            .chunks
            .iter()
            .map(|chunk| self.arg(chunk, i)?.to_array(chunk.num_rows))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        if let [one] = parts.as_slice() {
            return Ok(Arc::clone(one));
        }
        let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
        Ok(concat(&refs)?)
    }
}

/// Memory held by `chunk`'s arrays (scalars count as nothing: they are small and shared).
fn chunk_memory_size(chunk: &RunChunk) -> usize {
    chunk
        .args
        .iter()
        .map(|a| match a {
            ColumnarValue::Array(a) => a.get_array_memory_size(),
            ColumnarValue::Scalar(_) => 0,
        })
        .sum()
}

impl<F> SetKernel for F
where
    F: Fn(&InstanceContext, usize, &[ArrayRef]) -> datafusion::error::Result<Vec<ArrayRef>>
        + Send
        + Sync,
{
    fn run(
        &self,
        instance: &InstanceContext,
        num_rows: usize,
        args: &[ArrayRef],
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        self(instance, num_rows, args)
    }
}

/// What one run of the UDF sees (Exasol's `SCALAR` / `SET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputType {
    /// Rows one by one (here: a batch of rows per run); only with EMITS — a SCALAR RETURNS UDF is
    /// a [`ScalarUdf`](crate::ScalarUdf).
    Scalar,
    /// A whole group per run.
    Set,
}

impl fmt::Display for InputType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Scalar => "SCALAR",
            Self::Set => "SET",
        })
    }
}

/// What the UDF produces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Output {
    /// One value per run (`RETURNS type`): the UDF is an aggregate function.
    Returns(DataType),
    /// Any number of rows per run (`EMITS (a type, b type)`): the UDF is a row source and must
    /// stand alone in its select list (beside GROUP BY keys).
    Emits(Fields),
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Returns(t) => write!(f, "RETURNS {t}"),
            Self::Emits(fields) => {
                f.write_str("EMITS (")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} {}", field.name(), field.data_type())?;
                }
                f.write_str(")")
            }
        }
    }
}

/// A SET (RETURNS or EMITS) or SCALAR EMITS Rust UDF with Exasol's accelerator annotations.
///
/// ```
/// use std::sync::Arc;
/// use accelsql_engine::SetUdf;
/// use accelsql_engine::datafusion::arrow::array::{ArrayRef, Int64Array};
/// use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field};
///
/// // SELECT k, group_size(x) FROM t GROUP BY k  →  one row (k, n) per group
/// let group_size = SetUdf::builder("group_size")
///     .inputs([DataType::Int64])
///     .emits([Field::new("n", DataType::Int64, false)])
///     .accelerator("GpuNvidia|None").unwrap()
///     .cpu(|_ctx: &_, rows: usize, _args: &[ArrayRef]| {
///         Ok(vec![Arc::new(Int64Array::from(vec![rows as i64])) as ArrayRef])
///     })
///     .build()
///     .unwrap();
/// assert_eq!(group_size.name(), "group_size");
/// ```
#[derive(Clone)]
pub struct SetUdf {
    header: UdfHeader,
    input_type: InputType,
    output: Output,
    pub(crate) cpu: Arc<dyn SetKernel>,
    pub(crate) gpu: Option<Arc<dyn SetKernel>>,
    /// How a call without GROUP BY runs as a partial run per input partition and a merge.
    top_k_merge: Option<TopKMerge>,
}

/// How a SET EMITS UDF whose result is the `k` best rows of its group by a score runs without
/// GROUP BY: one partial run per input partition (each emitting its partition's `k` best), then
/// a merge keeping the `k` best of those (score descending with NaN last, then id ascending
/// with NULL last) — instead of one run over the whole input on one core. Only when the
/// arguments it names are constants (literals), so that every partition's run checks the same
/// `k` and the same constant arguments the one run would; otherwise the call runs whole.
/// It stays one call for the placement rule: the partial runs are its runs, on its instances
/// (and devices) under its one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopKMerge {
    /// The argument holding `k` (0-based).
    pub k_argument: usize,
    /// Arguments that must also be constants for the split (0-based), e.g. a query vector.
    pub constant_arguments: Vec<usize>,
    /// The emitted column ranked descending (NaN below every number).
    pub score_column: String,
    /// The emitted column that breaks ties, ascending (NULL last).
    pub id_column: String,
}

impl fmt::Debug for SetUdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.header
            .debug_fields(&mut f.debug_struct("SetUdf"))
            .field("input_type", &self.input_type)
            .field("output", &self.output)
            .field("gpu", &self.gpu.is_some())
            .field("top_k_merge", &self.top_k_merge)
            .finish()
    }
}

impl SetUdf {
    /// How a call without GROUP BY splits into partial runs and a merge, if it can.
    pub fn top_k_merge(&self) -> Option<&TopKMerge> {
        self.top_k_merge.as_ref()
    }

    /// Starts a SET UDF definition (use [`SetUdfBuilder::scalar_input`] for SCALAR EMITS).
    pub fn builder(name: impl Into<String>) -> SetUdfBuilder {
        SetUdfBuilder {
            header: UdfHeader::new(name.into()),
            input_type: InputType::Set,
            output: None,
            cpu: None,
            gpu: None,
            top_k_merge: None,
        }
    }

    common_udf_methods!();

    /// SCALAR or SET.
    pub fn input_type(&self) -> InputType {
        self.input_type
    }

    /// RETURNS or EMITS.
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// The EMITS columns, if it emits.
    pub fn emits(&self) -> Option<&Fields> {
        match &self.output {
            Output::Emits(fields) => Some(fields),
            Output::Returns(_) => None,
        }
    }
}

/// Builder of [`SetUdf`].
pub struct SetUdfBuilder {
    header: UdfHeader,
    input_type: InputType,
    output: Option<Output>,
    cpu: Option<Arc<dyn SetKernel>>,
    gpu: Option<Arc<dyn SetKernel>>,
    top_k_merge: Option<TopKMerge>,
}

impl SetUdfBuilder {
    /// Lets a call without GROUP BY run as partial runs per input partition and a merge (see
    /// [`TopKMerge`]). The kernels must emit, for any run, its `k` best rows by that order.
    pub fn merged_as_top_k(mut self, merge: TopKMerge) -> Self {
        self.top_k_merge = Some(merge);
        self
    }

    /// Makes it a SCALAR EMITS UDF: runs get batches of input rows, each row may emit 0..n rows.
    pub fn scalar_input(mut self) -> Self {
        self.input_type = InputType::Scalar;
        self
    }

    common_builder_methods!();

    /// One value per group (`RETURNS type`): an aggregate function.
    pub fn returns(mut self, data_type: DataType) -> Self {
        self.output = Some(Output::Returns(data_type));
        self
    }

    /// Rows per run (`EMITS (…)`).
    pub fn emits(mut self, fields: impl IntoIterator<Item = Field>) -> Self {
        let fields: Vec<FieldRef> = fields.into_iter().map(Arc::new).collect();
        self.output = Some(Output::Emits(fields.into()));
        self
    }

    /// The CPU implementation: mandatory, the fallback and the reference.
    pub fn cpu(mut self, kernel: impl SetKernel + 'static) -> Self {
        self.cpu = Some(Arc::new(kernel));
        self
    }

    /// The GPU implementation, used when the call is placed on a GPU of a real device.
    pub fn gpu(mut self, kernel: impl SetKernel + 'static) -> Self {
        self.gpu = Some(Arc::new(kernel));
        self
    }

    /// Checks and finishes the definition.
    pub fn build(self) -> Result<SetUdf> {
        let name = check_name(&self.header.name)?;
        let cpu = self.cpu.ok_or_else(|| {
            definition_err!(
                "UDF {name} has no CPU implementation; every UDF needs one (fallback and reference)"
            )
        })?;
        let output = self
            .output
            .ok_or_else(|| definition_err!("UDF {name} has neither RETURNS nor EMITS"))?;
        match (&output, self.input_type) {
            (Output::Returns(_), InputType::Scalar) => {
                return Err(definition_err!(
                    "UDF {name} is SCALAR RETURNS: define it as a ScalarUdf"
                ));
            }
            (Output::Returns(_), InputType::Set) if matches!(&self.header.inputs, Inputs::Exact(t) | Inputs::Castable(t) if t.is_empty()) =>
            {
                return Err(definition_err!(
                    "SET RETURNS UDF {name} needs at least one parameter"
                ));
            }
            (Output::Emits(fields), _) => {
                if fields.is_empty() {
                    return Err(definition_err!("UDF {name} EMITS no columns"));
                }
                let mut names: Vec<_> = fields.iter().map(|f| f.name().to_string()).collect();
                names.sort();
                if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
                    return Err(definition_err!("UDF {name} EMITS column {} twice", w[0]));
                }
            }
            _ => {}
        }
        if let Some(merge) = &self.top_k_merge {
            let emitted = |column: &str| match (&output, self.input_type) {
                (Output::Emits(fields), InputType::Set) => {
                    fields.iter().any(|f| f.name() == column)
                }
                _ => false,
            };
            if !emitted(&merge.score_column) || !emitted(&merge.id_column) {
                return Err(definition_err!(
                    "UDF {name} merges as a top-k by {} and {}: it must be SET EMITS with both \
                     columns",
                    merge.score_column,
                    merge.id_column
                ));
            }
        }
        Ok(SetUdf {
            header: UdfHeader {
                name,
                ..self.header
            },
            input_type: self.input_type,
            output,
            cpu,
            gpu: self.gpu,
            top_k_merge: self.top_k_merge,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> impl SetKernel {
        |_: &InstanceContext, _: usize, _: &[ArrayRef]| Ok(Vec::new())
    }

    #[test]
    fn a_top_k_merge_needs_set_emits_with_its_columns() {
        let merge = || TopKMerge {
            k_argument: 1,
            constant_arguments: Vec::new(),
            score_column: "score".into(),
            id_column: "id".into(),
        };
        let fields = || {
            [
                Field::new("id", DataType::Int64, true),
                Field::new("score", DataType::Float64, false),
            ]
        };
        let ok = SetUdf::builder("f")
            .inputs([DataType::Int64, DataType::Int64])
            .emits(fields())
            .merged_as_top_k(merge())
            .cpu(noop())
            .build()
            .unwrap();
        assert_eq!(ok.top_k_merge(), Some(&merge()));
        let e = SetUdf::builder("f")
            .scalar_input()
            .inputs([DataType::Int64, DataType::Int64])
            .emits(fields())
            .merged_as_top_k(merge())
            .cpu(noop())
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("must be SET EMITS"), "{e}");
        let e = SetUdf::builder("f")
            .inputs([DataType::Int64, DataType::Int64])
            .emits([Field::new("id", DataType::Int64, true)])
            .merged_as_top_k(merge())
            .cpu(noop())
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("score and id"), "{e}");
    }

    #[test]
    fn definitions_are_checked() {
        let e = SetUdf::builder("f")
            .scalar_input()
            .returns(DataType::Int64)
            .cpu(noop())
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("define it as a ScalarUdf"), "{e}");
        let e = SetUdf::builder("f")
            .returns(DataType::Int64)
            .cpu(noop())
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("at least one parameter"), "{e}");
        let e = SetUdf::builder("f")
            .inputs([DataType::Int64])
            .emits([
                Field::new("a", DataType::Int64, true),
                Field::new("a", DataType::Utf8, true),
            ])
            .cpu(noop())
            .build()
            .unwrap_err();
        assert_eq!(e.code(), "42E01");
        assert!(e.to_string().contains("EMITS column a twice"), "{e}");
        let e = SetUdf::builder("f")
            .inputs([DataType::Int64])
            .emits([Field::new("a", DataType::Int64, true)])
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("no CPU implementation"), "{e}");
    }

    #[test]
    fn run_input_joins_chunks_and_replicates_constants() {
        use datafusion::arrow::array::{AsArray, Int64Array};
        use datafusion::arrow::datatypes::Int64Type;
        use datafusion::common::ScalarValue;

        let column = |v: Vec<i64>| ColumnarValue::Array(Arc::new(Int64Array::from(v)));
        let scalar = |v: i64| ColumnarValue::Scalar(ScalarValue::Int64(Some(v)));
        let values = |a: &ArrayRef| a.as_primitive::<Int64Type>().values().to_vec();
        let mut input = RunInput::new();
        assert!(input.to_arrays().unwrap().is_empty());
        let first = Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef;
        input
            .push(RunChunk::new(
                2,
                vec![
                    ColumnarValue::Array(Arc::clone(&first)),
                    scalar(7),
                    scalar(5),
                ],
            ))
            .unwrap();
        // One chunk: its column is shared, not copied.
        let args = input.to_arrays().unwrap();
        assert!(Arc::ptr_eq(&args[0], &first));
        assert_eq!(values(&args[1]), vec![7, 7]);
        input
            .push(RunChunk::new(
                3,
                vec![column(vec![3, 4, 5]), scalar(7), scalar(6)],
            ))
            .unwrap();
        input
            .push(RunChunk::new(
                1,
                vec![column(vec![6]), scalar(7), column(vec![9])],
            ))
            .unwrap();
        assert_eq!((input.num_rows(), input.chunks().len()), (6, 3));
        assert_eq!(input.chunks()[1].num_rows(), 3);
        let args = input.to_arrays().unwrap();
        assert_eq!(values(&args[0]), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(values(&args[1]), vec![7; 6]);
        assert_eq!(values(&args[2]), vec![5, 5, 6, 6, 6, 9]);
    }

    #[test]
    fn many_small_chunks_are_merged_as_they_arrive() {
        use datafusion::arrow::array::{AsArray, Int64Array};
        use datafusion::arrow::datatypes::Int64Type;

        let mut input = RunInput::new();
        let rows = 3 * SMALL_CHUNKS_MERGED + 5;
        for i in 0..rows {
            let column = ColumnarValue::Array(Arc::new(Int64Array::from(vec![i as i64])));
            let constant = ColumnarValue::Scalar(ScalarValue::Int64(Some(7)));
            input
                .push(RunChunk::new(1, vec![column, constant]))
                .unwrap();
        }
        // Empty chunks are not kept.
        input.push(RunChunk::new(0, Vec::new())).unwrap();
        assert_eq!(input.num_rows(), rows);
        // The first merge joined 64 chunks; each later one the merged chunk and 63 more, three
        // merges in all; seven chunks came after the last.
        let merged = SMALL_CHUNKS_MERGED + 2 * (SMALL_CHUNKS_MERGED - 1);
        assert_eq!(input.chunks().len(), 1 + rows - merged);
        assert_eq!(input.chunks()[0].num_rows(), merged);
        // The constant stayed a scalar through the merge.
        assert!(matches!(
            input.chunks()[0].args()[1],
            ColumnarValue::Scalar(_)
        ));
        let args = input.to_arrays().unwrap();
        let expected: Vec<i64> = (0..rows as i64).collect();
        assert_eq!(
            args[0].as_primitive::<Int64Type>().values().to_vec(),
            expected
        );
        assert_eq!(
            args[1].as_primitive::<Int64Type>().values().to_vec(),
            vec![7; rows]
        );
        let held: usize = input
            .chunks()
            .iter()
            .flat_map(|c| c.args())
            .map(|a| match a {
                ColumnarValue::Array(a) => a.get_array_memory_size(),
                ColumnarValue::Scalar(_) => 0,
            })
            .sum();
        assert_eq!(input.memory_size(), held);
        // A large chunk is kept as it is and ends the small run.
        let big = ColumnarValue::Array(Arc::new(Int64Array::from(vec![0; SMALL_CHUNK_ROWS])));
        let constant = ColumnarValue::Scalar(ScalarValue::Int64(Some(7)));
        input
            .push(RunChunk::new(SMALL_CHUNK_ROWS, vec![big, constant]))
            .unwrap();
        assert_eq!(input.chunks().len(), 1 + rows - merged + 1);
    }

    #[test]
    fn the_default_run_input_calls_run_with_joined_columns() {
        use datafusion::arrow::array::Int64Array;
        use datafusion::common::ScalarValue;

        let kernel = |_: &InstanceContext, rows: usize, args: &[ArrayRef]| {
            assert_eq!(args[0].len(), rows);
            Ok(vec![
                Arc::new(Int64Array::from(vec![rows as i64])) as ArrayRef
            ])
        };
        let mut input = RunInput::new();
        for rows in [3, 4] {
            let arg = ColumnarValue::Scalar(ScalarValue::Int64(Some(1)));
            input.push(RunChunk::new(rows, vec![arg])).unwrap();
        }
        let out = kernel
            .run_input(&InstanceContext::default(), &input)
            .unwrap();
        assert_eq!(out[0].as_ref(), &Int64Array::from(vec![7]) as &dyn Array);
    }

    #[test]
    fn output_is_shown_in_exasol_syntax() {
        let udf = SetUdf::builder("Split")
            .scalar_input()
            .variadic()
            .emits([
                Field::new("word", DataType::Utf8, true),
                Field::new("n", DataType::Int64, true),
            ])
            .cpu(noop())
            .build()
            .unwrap();
        assert_eq!(udf.name(), "split");
        assert_eq!(udf.input_type(), InputType::Scalar);
        assert_eq!(udf.output().to_string(), "EMITS (word Utf8, n Int64)");
    }
}
