//! The worker protocol's frames and its columnar encoding (the Python side is
//! `udf-runtime/python/accelsql_worker/`, chiefly `wire.py`, `values.py` and `runner.py`; the two
//! must agree byte for byte).
//!
//! A frame is `u64 LE payload length | u8 kind | payload`. One exchange per step:
//!
//! ```text
//! worker → engine  HELLO   str interpreter description          (first thing it sends)
//! engine → worker  INIT    u32 protocol version, u8 mode, script, exa.meta values, columns, body
//! worker → engine  READY   u8 has_run_batch, u8 has_cleanup      (module-level code ran)
//! engine → worker  RUN     u64 run rows, u8 flags, u64 rows, u32 columns, columns…  (a batch
//!                                              or one SET group: its first chunk)
//! worker → engine  FETCH   u64 from         (any number of times: the chunk from row `from`)
//! engine → worker  ROWS    u64 from, u64 rows, u32 columns, columns…
//! worker → engine  EMIT    u32 columns, u64 rows, columns…   (any number: a part of the output)
//! worker → engine  ROW_ENDS  u64 n, n × u64     (when RUN's flag 1 asked: emitted rows after
//!                                                each input row)
//! worker → engine  RESULT  u32 columns, u64 rows, columns…   (the last part)
//! engine → worker  FINISH                                         (calls cleanup())
//! worker → engine  DONE
//! worker → engine  ERROR   u8 kind, … (instead of READY, RESULT, SINGLE_RESULT or DONE)
//! ```
//!
//! INIT (version [`PROTOCOL_VERSION`]; the worker refuses another): `u32 version | u8 mode (0:
//! runs, 1: one single call) | str schema | str name | str language | u8 is_set | u8 emits | u64
//! session_id | u64 statement_id | u32 node_count | u32 node_id | u32 vm_id | str current_user |
//! str scope_user | u8 has_current_schema | str current_schema | u64 memory_limit | u64 rows of
//! the first EMIT | u64 bytes of later EMITs | u8 variadic |
//! u32 n, n input columns | u32 n, n output columns | str database version | str body`; a column
//! is `str name | u8 type code | u8 wire type | u32 precision | i32 scale | u32 length | str
//! declared type | str Exasol type text` (0 for a precision or length that does not apply; a
//! RETURNS script's one output column is named `RETURN`).
//!
//! A single call (mode 1: [`single_call`](super::single_call)) goes INIT → READY, then
//!
//! ```text
//! engine → worker  SINGLE_CALL    u8 function, its argument (see encode_single_call)
//! worker → engine  SINGLE_RESULT  str what the function returned
//! ```
//!
//! and FINISH → DONE.
//!
//! While the engine waits for READY, RESULT or DONE, the worker may ask for another script's
//! code (`exa.import_script`) any number of times, each answered before it goes on:
//!
//! ```text
//! worker → engine  IMPORT  str name
//! engine → worker  SCRIPT  u8 1, str qualified name, str code  |  u8 0, str why not
//! ```
//!
//! and, for `exa.get_connection`:
//!
//! ```text
//! worker → engine  GET_CONNECTION  str name
//! engine → worker  CONNECTION      u8 1, str kind, str address, str user, str password  |  u8 0, str why not
//! ```
//!
//! Integers are little-endian; `str` is `u32 length | UTF-8`. A column is `u8 wire type | u8
//! has_nulls | [rows bytes: 1 = valid, 0 = NULL] | values`, the values in one block per column:
//! Boolean 1 byte each, Int64 / Timestamp(µs) 8, Float64 8, Decimal128 16, Date32 4, Utf8 as
//! `rows + 1` i32 offsets from 0 and the UTF-8 bytes. NULL slots hold zeros.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, PrimitiveArray, StringArray,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Decimal128Type, Float64Type, Int64Type, TimeUnit,
    TimestampMicrosecondType,
};

use super::{
    ColumnSpec, ConnectionInfo, ExportSpec, ImportSpec, ImportedScript, ScriptInputType,
    ScriptOutput, ScriptSpec, SingleCall, SqlType, WorkerContext,
};

/// The protocol's version, the first field of INIT (the Python side checks it).
pub(crate) const PROTOCOL_VERSION: u32 = 3;

/// Bytes of a frame header: u64 length, u8 kind.
pub(crate) const FRAME_HEADER_LEN: usize = 9;
/// Largest frame either side accepts (a guard against garbage lengths).
pub(crate) const MAX_FRAME_LEN: u64 = 1 << 38;

pub(crate) const F_INIT: u8 = 1;
pub(crate) const F_READY: u8 = 2;
pub(crate) const F_RUN: u8 = 3;
pub(crate) const F_RESULT: u8 = 4;
pub(crate) const F_FINISH: u8 = 5;
pub(crate) const F_DONE: u8 = 6;
pub(crate) const F_ERROR: u8 = 7;
pub(crate) const F_HELLO: u8 = 8;
/// Worker → engine, during INIT, RUN or FINISH: `str name` of `exa.import_script(name)`.
pub(crate) const F_IMPORT: u8 = 9;
/// Engine → worker, the answer to IMPORT: `u8 1, str qualified name, str code`, or `u8 0, str
/// why not`.
pub(crate) const F_SCRIPT: u8 = 10;
/// Worker → engine, like IMPORT: `str name` of `exa.get_connection(name)`.
pub(crate) const F_GET_CONNECTION: u8 = 11;
/// Engine → worker, the answer to GET_CONNECTION: `u8 1, str kind, str address, str user, str
/// password`, or `u8 0, str why not`.
pub(crate) const F_CONNECTION: u8 = 12;
/// Engine → worker, after READY in single-call mode: which function to call, and its argument.
pub(crate) const F_SINGLE_CALL: u8 = 13;
/// Worker → engine, the answer to SINGLE_CALL: `str` the function's result.
pub(crate) const F_SINGLE_RESULT: u8 = 14;
/// Worker → engine: the rows of the current run from a row on (`u64 from`).
pub(crate) const F_FETCH: u8 = 15;
/// Engine → worker: the answer to FETCH, a chunk of rows (see [`encode_chunk`]).
pub(crate) const F_ROWS: u8 = 16;
/// Worker → engine: a part of the current run's output, laid out as RESULT (which is the last).
pub(crate) const F_EMIT: u8 = 17;
/// Worker → engine, before RESULT when RUN asked for it ([`RUN_TRACE_ROWS`]): for each input row,
/// how many rows the run had emitted after it (`u64 n | n × u64`).
pub(crate) const F_ROW_ENDS: u8 = 18;
/// RUN flag: report ROW_ENDS (SCALAR EMITS runs).
pub(crate) const RUN_TRACE_ROWS: u8 = 1;

const E_EXCEPTION: u8 = 1;
const E_BAD_OUTPUT: u8 = 2;
const E_SINGLE_CALL: u8 = 3;

/// INIT's mode: the worker runs `run(ctx)` on RUN frames.
pub(crate) const MODE_RUNS: u8 = 0;
/// INIT's mode: the worker answers one SINGLE_CALL (no `run` needed).
pub(crate) const MODE_SINGLE_CALL: u8 = 1;

const W_BOOL: u8 = 1;
const W_I64: u8 = 2;
const W_F64: u8 = 3;
const W_I128: u8 = 4;
const W_UTF8: u8 = 5;
const W_DATE32: u8 = 6;
const W_TS_US: u8 = 7;

/// The wire type of an Arrow type (only the ones [`SqlType::arrow_type`] produces).
fn wire_type(data_type: &DataType) -> Option<u8> {
    Some(match data_type {
        DataType::Boolean => W_BOOL,
        DataType::Int64 => W_I64,
        DataType::Float64 => W_F64,
        DataType::Decimal128(_, _) => W_I128,
        DataType::Utf8 => W_UTF8,
        DataType::Date32 => W_DATE32,
        DataType::Timestamp(TimeUnit::Microsecond, None) => W_TS_US,
        _ => return None,
    })
}

fn type_code(t: &SqlType) -> u8 {
    match t {
        SqlType::Boolean => 1,
        SqlType::SmallInt => 2,
        SqlType::Integer => 3,
        SqlType::BigInt => 4,
        SqlType::Decimal { .. } => 5,
        SqlType::Double => 6,
        SqlType::Varchar(_) => 7,
        SqlType::Char(_) => 8,
        SqlType::Date => 9,
        SqlType::Timestamp => 10,
        SqlType::TimestampLocalTz => 11,
        SqlType::Geometry(_) => 12,
        SqlType::Hashtype(_) => 13,
        SqlType::IntervalYearToMonth(_) => 14,
        SqlType::IntervalDayToSecond { .. } => 15,
    }
}

/// Appends little-endian values and strings to a payload.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
    }
}

/// Reads what [`Writer`] (or the Python side) wrote; every read is bounds-checked.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| format!("frame too short: {n} more bytes wanted at {}", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub(crate) fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    pub(crate) fn is_done(&self) -> bool {
        self.pos == self.buf.len()
    }
}

fn write_column_spec(w: &mut Writer, col: &ColumnSpec) {
    let t = &col.sql_type;
    w.str(&col.name);
    w.u8(type_code(t));
    w.u8(wire_type(&t.wire_type()).unwrap_or(0));
    w.u32(t.precision().unwrap_or(0));
    w.i32(t.scale().unwrap_or(0));
    w.u32(t.length().unwrap_or(0));
    w.str(&t.to_string());
    w.str(&t.exasol_name());
}

/// The INIT payload ([`MODE_RUNS`] or [`MODE_SINGLE_CALL`]).
pub(crate) fn encode_init(
    spec: &ScriptSpec,
    ctx: &WorkerContext,
    mode: u8,
    inputs: &[ColumnSpec],
    outputs: &[ColumnSpec],
) -> Vec<u8> {
    let mut w = Writer::default();
    w.u32(PROTOCOL_VERSION);
    w.u8(mode);
    w.str(&spec.schema);
    w.str(&spec.name);
    w.str(&spec.language);
    w.u8(u8::from(spec.input_type == ScriptInputType::Set));
    w.u8(u8::from(matches!(spec.output, ScriptOutput::Emits(_))));
    w.u64(ctx.session_id);
    w.u64(ctx.statement_id);
    w.u32(ctx.node_count as u32);
    w.u32(ctx.node_id as u32);
    w.u32(ctx.vm_id as u32);
    w.str(&ctx.current_user);
    w.str(&ctx.scope_user);
    w.u8(u8::from(ctx.current_schema.is_some()));
    w.str(ctx.current_schema.as_deref().unwrap_or(""));
    w.u64(ctx.memory_limit);
    w.u64(ctx.chunking.emit_rows as u64);
    w.u64(ctx.chunking.emit_bytes as u64);
    w.u8(u8::from(spec.inputs.is_none()));
    w.u32(inputs.len() as u32);
    for c in inputs {
        write_column_spec(&mut w, c);
    }
    w.u32(outputs.len() as u32);
    for c in outputs {
        match spec.output {
            // Exasol names a RETURNS script's one output column RETURN.
            ScriptOutput::Returns(_) => {
                write_column_spec(&mut w, &ColumnSpec::new("RETURN", c.sql_type))
            }
            ScriptOutput::Emits(_) => write_column_spec(&mut w, c),
        }
    }
    w.str(env!("CARGO_PKG_VERSION"));
    w.str(&spec.body);
    w.buf
}

/// A RUN frame (`head` = the run's row count, then `u8 flags`) or a ROWS frame (`head` = the
/// chunk's first row, no flags): `u64 head | [u8 flags] | u64 rows | u32 columns | columns…`;
/// `args` must already have their columns' canonical Arrow types.
pub(crate) fn encode_chunk(
    head: usize,
    flags: Option<u8>,
    num_rows: usize,
    args: &[ArrayRef],
) -> Result<Vec<u8>, String> {
    let mut size = 24;
    for a in args {
        size += 2 + num_rows * 9 + a.get_buffer_memory_size();
    }
    let mut w = Writer {
        buf: Vec::with_capacity(size),
    };
    w.u64(head as u64);
    if let Some(flags) = flags {
        w.u8(flags);
    }
    w.u64(num_rows as u64);
    w.u32(args.len() as u32);
    for a in args {
        encode_column(&mut w.buf, a.as_ref())?;
    }
    Ok(w.buf)
}

/// A ROW_ENDS frame: for each input row, the run's emitted rows after it (never decreasing, at
/// most `emitted`).
pub(crate) fn decode_row_ends(payload: &[u8], rows: usize) -> Result<Vec<u64>, String> {
    let mut r = Reader::new(payload);
    let n = usize::try_from(r.u64()?).map_err(|e| e.to_string())?;
    if n != rows {
        return Err(format!("ROW_ENDS for {n} rows, the run has {rows}"));
    }
    let bytes = r.take(n.checked_mul(8).ok_or("ROW_ENDS too long")?)?;
    let ends: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect();
    if ends.windows(2).any(|w| w[0] > w[1]) || !r.is_done() {
        return Err("ROW_ENDS are not a running count".to_string());
    }
    Ok(ends)
}

/// The row a FETCH frame asks for: `u64 from`.
pub(crate) fn decode_fetch(payload: &[u8]) -> Result<usize, String> {
    let mut r = Reader::new(payload);
    let from = usize::try_from(r.u64()?).map_err(|e| e.to_string())?;
    if !r.is_done() {
        return Err("FETCH has trailing bytes".to_string());
    }
    Ok(from)
}

fn extend_le<T: ArrowPrimitiveType, const N: usize>(
    out: &mut Vec<u8>,
    array: &dyn Array,
    to_le: impl Fn(T::Native) -> [u8; N],
) {
    let values = array.as_primitive::<T>().values();
    if cfg!(target_endian = "little") {
        // The wire's byte order is the machine's: one copy of the (sliced) values buffer.
        out.extend_from_slice(values.inner().as_slice());
        return;
    }
    out.reserve(values.len() * N);
    for v in values.iter() {
        out.extend_from_slice(&to_le(*v));
    }
}

fn encode_column(out: &mut Vec<u8>, array: &dyn Array) -> Result<(), String> {
    let tag = wire_type(array.data_type())
        .ok_or_else(|| format!("no wire type for {}", array.data_type()))?;
    out.push(tag);
    match array.logical_nulls().filter(|n| n.null_count() > 0) {
        Some(nulls) => {
            out.push(1);
            out.extend(nulls.iter().map(u8::from));
        }
        None => out.push(0),
    }
    match tag {
        W_BOOL => out.extend(array.as_boolean().values().iter().map(u8::from)),
        W_I64 => extend_le::<Int64Type, 8>(out, array, i64::to_le_bytes),
        W_F64 => extend_le::<Float64Type, 8>(out, array, f64::to_le_bytes),
        W_I128 => extend_le::<Decimal128Type, 16>(out, array, i128::to_le_bytes),
        W_DATE32 => extend_le::<Date32Type, 4>(out, array, i32::to_le_bytes),
        W_TS_US => extend_le::<TimestampMicrosecondType, 8>(out, array, i64::to_le_bytes),
        W_UTF8 => {
            let strings = array.as_string::<i32>();
            let offsets = strings.value_offsets();
            let base = offsets.first().copied().unwrap_or(0);
            let last = offsets.last().copied().unwrap_or(0);
            out.reserve(offsets.len() * 4 + (last - base) as usize);
            for o in offsets {
                out.extend_from_slice(&(o - base).to_le_bytes());
            }
            out.extend_from_slice(&strings.values()[base as usize..last as usize]);
        }
        _ => return Err(format!("no wire type {tag}")),
    }
    Ok(())
}

/// The RESULT payload as Arrow arrays of the output columns' wire types
/// ([`SqlType::wire_type`]: an interval is still its text).
pub(crate) fn decode_result(
    payload: &[u8],
    outputs: &[ColumnSpec],
) -> Result<Vec<ArrayRef>, String> {
    let mut r = Reader::new(payload);
    let ncols = r.u32()? as usize;
    let nrows = usize::try_from(r.u64()?).map_err(|e| e.to_string())?;
    if ncols != outputs.len() {
        return Err(format!(
            "RESULT has {ncols} columns, the script has {} outputs",
            outputs.len()
        ));
    }
    let mut arrays = Vec::with_capacity(ncols);
    for col in outputs {
        arrays.push(
            decode_column(&mut r, nrows, &col.sql_type.wire_type())
                .map_err(|e| format!("output column {}: {e}", col.name))?,
        );
    }
    if !r.is_done() {
        return Err("RESULT has trailing bytes".to_string());
    }
    Ok(arrays)
}

fn scalar<T: ArrowPrimitiveType, const N: usize>(
    bytes: &[u8],
    from_le: impl Fn([u8; N]) -> T::Native,
) -> ScalarBuffer<T::Native> {
    if cfg!(target_endian = "little") {
        // The wire's byte order is the machine's: one copy into an aligned buffer.
        return ScalarBuffer::from(Buffer::from_slice_ref(bytes));
    }
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            from_le(a)
        })
        .collect()
}

fn primitive<T: ArrowPrimitiveType, const N: usize>(
    r: &mut Reader<'_>,
    n: usize,
    nulls: Option<NullBuffer>,
    from_le: impl Fn([u8; N]) -> T::Native,
) -> Result<PrimitiveArray<T>, String> {
    let bytes = r.take(n.checked_mul(N).ok_or("row count overflows")?)?;
    PrimitiveArray::<T>::try_new(scalar::<T, N>(bytes, from_le), nulls).map_err(|e| e.to_string())
}

fn decode_column(r: &mut Reader<'_>, n: usize, data_type: &DataType) -> Result<ArrayRef, String> {
    let want = wire_type(data_type).ok_or_else(|| format!("no wire type for {data_type}"))?;
    let tag = r.u8()?;
    if tag != want {
        return Err(format!("wire type {tag}, expected {want}"));
    }
    let nulls = match r.u8()? {
        0 => None,
        _ => Some(NullBuffer::from(
            r.take(n)?.iter().map(|b| *b != 0).collect::<Vec<bool>>(),
        )),
    };
    Ok(match tag {
        W_BOOL => {
            // Both the values and the mask hold exactly `n` entries, so `new` cannot panic.
            let values = r
                .take(n)?
                .iter()
                .map(|b| *b != 0)
                .collect::<BooleanBuffer>();
            Arc::new(BooleanArray::new(values, nulls))
        }
        W_I64 => Arc::new(primitive::<Int64Type, 8>(r, n, nulls, i64::from_le_bytes)?) as ArrayRef,
        W_F64 => Arc::new(primitive::<Float64Type, 8>(
            r,
            n,
            nulls,
            f64::from_le_bytes,
        )?),
        W_DATE32 => Arc::new(primitive::<Date32Type, 4>(r, n, nulls, i32::from_le_bytes)?),
        W_TS_US => Arc::new(primitive::<TimestampMicrosecondType, 8>(
            r,
            n,
            nulls,
            i64::from_le_bytes,
        )?),
        W_I128 => {
            let DataType::Decimal128(p, s) = data_type else {
                return Err(format!("decimal values for {data_type}"));
            };
            let a: Decimal128Array =
                primitive::<Decimal128Type, 16>(r, n, nulls, i128::from_le_bytes)?;
            Arc::new(
                a.with_precision_and_scale(*p, *s)
                    .map_err(|e| e.to_string())?,
            )
        }
        W_UTF8 => {
            let count = n.checked_add(1).ok_or("row count overflows")?;
            let offsets: ScalarBuffer<i32> = scalar::<arrow::datatypes::Int32Type, 4>(
                r.take(count.checked_mul(4).ok_or("row count overflows")?)?,
                i32::from_le_bytes,
            );
            if offsets.first() != Some(&0) || offsets.windows(2).any(|w| w[0] > w[1]) {
                return Err("string offsets are not increasing from 0".to_string());
            }
            let len = offsets.last().copied().unwrap_or(0) as usize;
            let data = Buffer::from(r.take(len)?);
            Arc::new(
                StringArray::try_new(OffsetBuffer::new(offsets), data, nulls)
                    .map_err(|e| e.to_string())?,
            )
        }
        other => return Err(format!("unknown wire type {other}")),
    })
}

/// What a worker's ERROR frame says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WorkerError {
    /// An exception of the script.
    Exception {
        exception: String,
        message: String,
        line: Option<u32>,
        traceback: String,
        phase: String,
    },
    /// A value that does not fit its output column.
    BadOutput {
        column: String,
        sql_type: String,
        value: String,
        message: String,
        /// 0-based row of the run's output.
        row: u64,
    },
    /// A single call's function is missing or returned something other than a `str`.
    SingleCall { function: String, message: String },
}

/// The name in an IMPORT frame.
pub(crate) fn decode_import(payload: &[u8]) -> Result<String, String> {
    let mut r = Reader::new(payload);
    let name = r.str()?;
    if !r.is_done() {
        return Err("IMPORT frame has trailing bytes".into());
    }
    Ok(name)
}

/// The SCRIPT frame answering an IMPORT.
pub(crate) fn encode_script(found: &Result<ImportedScript, String>) -> Vec<u8> {
    let mut w = Writer::default();
    match found {
        Ok(script) => {
            w.u8(1);
            w.str(&script.qualified_name);
            w.str(&script.code);
        }
        Err(why) => {
            w.u8(0);
            w.str(why);
        }
    }
    w.buf
}

/// The name in a GET_CONNECTION frame.
pub(crate) fn decode_get_connection(payload: &[u8]) -> Result<String, String> {
    let mut r = Reader::new(payload);
    let name = r.str()?;
    if !r.is_done() {
        return Err("GET_CONNECTION frame has trailing bytes".into());
    }
    Ok(name)
}

fn write_connection(w: &mut Writer, c: &ConnectionInfo) {
    w.str(&c.kind);
    w.str(&c.address);
    w.str(&c.user);
    w.str(&c.password);
}

/// The CONNECTION frame answering a GET_CONNECTION.
pub(crate) fn encode_connection(found: &Result<ConnectionInfo, String>) -> Vec<u8> {
    let mut w = Writer::default();
    match found {
        Ok(c) => {
            w.u8(1);
            write_connection(&mut w, c);
        }
        Err(why) => {
            w.u8(0);
            w.str(why);
        }
    }
    w.buf
}

fn write_opt_str(w: &mut Writer, s: Option<&str>) {
    w.u8(u8::from(s.is_some()));
    w.str(s.unwrap_or(""));
}

fn write_opt_list(w: &mut Writer, list: Option<&[String]>) {
    w.u8(u8::from(list.is_some()));
    let list = list.unwrap_or(&[]);
    w.u32(list.len() as u32);
    for s in list {
        w.str(s);
    }
}

fn write_connection_part(
    w: &mut Writer,
    parameters: &[(String, String)],
    name: Option<&str>,
    connection: Option<&ConnectionInfo>,
) {
    w.u32(parameters.len() as u32);
    for (k, v) in parameters {
        w.str(k);
        w.str(v);
    }
    write_opt_str(w, name);
    w.u8(u8::from(connection.is_some()));
    if let Some(c) = connection {
        write_connection(w, c);
    }
}

/// The SINGLE_CALL payload: `u8 function (1 default_output_columns, 2
/// generate_sql_for_import_spec, 3 generate_sql_for_export_spec)`, then for 2 `u8 is_subselect |
/// opt-list subselect_column_names | opt-list subselect_column_types | parameters | opt-str
/// connection_name | opt-connection`, for 3 `parameters | opt-str connection_name |
/// opt-connection | u8 has_truncate | u8 has_replace | opt-str created_by | opt-list
/// source_column_names`. An opt-str is `u8 present | str`, an opt-list `u8 present | u32 n | n
/// str`, an opt-connection `u8 present | [str kind | str address | str user | str password]`,
/// parameters `u32 n | n (str key | str value)`.
pub(crate) fn encode_single_call(call: &SingleCall) -> Vec<u8> {
    let mut w = Writer::default();
    match call {
        SingleCall::DefaultOutputColumns => w.u8(1),
        SingleCall::ImportSpec(ImportSpec {
            is_subselect,
            subselect_column_names,
            subselect_column_types,
            connection_name,
            connection,
            parameters,
        }) => {
            w.u8(2);
            w.u8(u8::from(*is_subselect));
            write_opt_list(&mut w, subselect_column_names.as_deref());
            write_opt_list(&mut w, subselect_column_types.as_deref());
            write_connection_part(
                &mut w,
                parameters,
                connection_name.as_deref(),
                connection.as_ref(),
            );
        }
        SingleCall::ExportSpec(ExportSpec {
            parameters,
            connection_name,
            connection,
            has_truncate,
            has_replace,
            created_by,
            source_column_names,
        }) => {
            w.u8(3);
            write_connection_part(
                &mut w,
                parameters,
                connection_name.as_deref(),
                connection.as_ref(),
            );
            w.u8(u8::from(*has_truncate));
            w.u8(u8::from(*has_replace));
            write_opt_str(&mut w, created_by.as_deref());
            write_opt_list(&mut w, source_column_names.as_deref());
        }
    }
    w.buf
}

/// The string of a SINGLE_RESULT frame.
pub(crate) fn decode_single_result(payload: &[u8]) -> Result<String, String> {
    let mut r = Reader::new(payload);
    let s = r.str()?;
    if !r.is_done() {
        return Err("SINGLE_RESULT frame has trailing bytes".into());
    }
    Ok(s)
}

pub(crate) fn decode_error(payload: &[u8]) -> Result<WorkerError, String> {
    let mut r = Reader::new(payload);
    match r.u8()? {
        E_EXCEPTION => Ok(WorkerError::Exception {
            exception: r.str()?,
            message: r.str()?,
            line: Some(r.u32()?).filter(|l| *l > 0),
            traceback: r.str()?,
            phase: r.str()?,
        }),
        E_BAD_OUTPUT => Ok(WorkerError::BadOutput {
            column: r.str()?,
            sql_type: r.str()?,
            value: r.str()?,
            message: r.str()?,
            row: r.u64()?,
        }),
        E_SINGLE_CALL => Ok(WorkerError::SingleCall {
            function: r.str()?,
            message: r.str()?,
        }),
        other => Err(format!("unknown error kind {other}")),
    }
}

/// The canonical Arrow types a RUN frame carries, one per input column (an interval's is its
/// text's, see [`SqlType::wire_type`]).
pub(crate) fn input_arrow_types(inputs: &[ColumnSpec]) -> Vec<DataType> {
    inputs.iter().map(|c| c.sql_type.wire_type()).collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::{Date32Array, Float64Array, Int64Array, TimestampMicrosecondArray};

    use super::*;

    /// Encoding a RUN frame and decoding it as a RESULT frame (the column layout is the same)
    /// gives back the arrays, NULLs, offsets of sliced arrays and decimals included.
    #[test]
    fn columns_round_trip() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            Arc::new(Int64Array::from(vec![Some(i64::MIN), None, Some(i64::MAX)])),
            Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN), None])),
            Arc::new(
                Decimal128Array::from(vec![Some(-12345), None, Some(i128::from(i64::MAX) * 1000)])
                    .with_precision_and_scale(30, 2)
                    .unwrap(),
            ),
            Arc::new(StringArray::from(vec![Some("x"), Some("hällo"), None, Some("")]).slice(1, 3)),
            Arc::new(Date32Array::from(vec![Some(0), Some(-1), None])),
            Arc::new(TimestampMicrosecondArray::from(vec![
                None,
                Some(1),
                Some(-1),
            ])),
        ];
        let types = [
            SqlType::Boolean,
            SqlType::BigInt,
            SqlType::Double,
            SqlType::Decimal {
                precision: 30,
                scale: 2,
            },
            SqlType::Varchar(10),
            SqlType::Date,
            SqlType::Timestamp,
        ];
        let specs: Vec<ColumnSpec> = types.iter().map(|t| ColumnSpec::new("c", *t)).collect();
        let run = encode_chunk(3, Some(0), 3, &cols).unwrap();
        // RUN is `u64 run rows, u8 flags, u64 rows, u32 cols`, RESULT `u32 cols, u64 rows`.
        let mut result = Vec::new();
        result.extend_from_slice(&(cols.len() as u32).to_le_bytes());
        result.extend_from_slice(&3u64.to_le_bytes());
        result.extend_from_slice(&run[21..]);
        let back = decode_result(&result, &specs).unwrap();
        for (a, b) in cols.iter().zip(&back) {
            assert_eq!(a.data_type(), b.data_type());
            assert_eq!(a.len(), b.len());
            assert_eq!(a.logical_nulls(), b.logical_nulls());
        }
        assert_eq!(back[4].as_string::<i32>().value(0), "hällo");
        assert_eq!(back[4].as_string::<i32>().value(2), "");
        assert_eq!(back[3].as_primitive::<Decimal128Type>().value(0), -12345);
        assert!(back[2].as_primitive::<Float64Type>().value(1).is_nan());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let specs = [ColumnSpec::new("s", SqlType::Varchar(5))];
        let mut w = Writer::default();
        w.u32(1);
        w.u64(2);
        w.u8(W_UTF8);
        w.u8(0);
        for o in [0i32, 5, 3] {
            w.i32(o);
        }
        w.buf.extend_from_slice(b"abc");
        assert!(
            decode_result(&w.buf, &specs)
                .unwrap_err()
                .contains("offsets")
        );
        assert!(decode_result(&[1, 0], &specs).is_err());
        assert!(decode_error(&[9]).is_err());
    }
}
