//! Script UDFs in Python, following Exasol's UDF script model: one worker process per instance.
//!
//! The engine parses `CREATE PYTHON3 SCALAR|SET SCRIPT name(params) RETURNS t | EMITS (cols) AS
//! body`, blanks the `%option` lines of the body, and describes the script with a
//! [`ScriptSpec`]. Each instance of a call is a [`PythonWorker`]: a `python3` process running the
//! worker package shipped in this crate (`python/accelsql_worker/`, embedded in the binary),
//! which runs the body's module-level code once, then `run(ctx)` per row (SCALAR) or per group
//! (SET), and `cleanup()` at the end. Workers start warm: a fork server per interpreter and
//! environment, which has imported the worker module and numpy, forks a fresh process for each
//! (see `fork_server.rs`; until it is ready, and if it fails, workers are spawned directly). A
//! ready server keeps one worker forked ahead, the *spare*, which the next instance becomes, so
//! that no `fork()` is on a statement's path ([`warm_starts`] lists servers and spares).
//!
//! The Python side is Exasol's API: `ctx.<col>`, `ctx[i]`, `ctx.next()`, `ctx.reset()`,
//! `ctx.size()`, `ctx.emit(*values)`, `ctx.emit(DataFrame)`, `ctx.get_dataframe(num_rows,
//! start_col)`, the global `exa` (`exa.meta` with Exasol's values and types,
//! `exa.import_script(name)` through [`ScriptImports`], `exa.get_connection(name)` through
//! [`ScriptConnections`]), Exasol's other globals without import (`sys`, `os`, `datetime`,
//! `decimal`, `types`, `unicode`, `decodeUTF8`, `encodeUTF8`, `ExaUDFError`, the type codes
//! `UNSUPPORTED` … `BOOLEAN`, `EXACTLY_ONCE`, `MULTIPLE`; `long` once the top level ran, as in
//! Exasol), and single calls ([`single_call`]: `default_output_columns()`,
//! `generate_sql_for_import_spec`, `generate_sql_for_export_spec`); plus a vectorized form of our
//! own: a SCALAR RETURNS script that defines `run_batch(ctx)` gets whole columns (`ctx.<col>` is a
//! numpy array when numpy is importable, else a list; numeric and boolean columns without NULLs
//! are typed arrays, the others object arrays with `None`) and returns one column (list, tuple,
//! numpy array or pandas Series) — one Python call per batch instead of one per row.
//!
//! Runs of any size: a run's rows travel in chunks ([`RunChunking`]: at most 64 Ki rows and
//! about 16 MiB each), and `ctx.next()` asks for the next chunk when it reaches the end of the
//! one it has, so a SET group of any size costs the worker about one chunk of memory; emitted
//! rows flow back in parts of about 16 MiB. Limits: one value must fit in a chunk on its own
//! (a VARCHAR value is at most 2 GiB, as in Arrow; Exasol's own limit is 2,000,000
//! characters). An output column with more than 2 GiB of text in one run comes back as one
//! `LargeUtf8` array (the worker sends it in parts under 2 GiB each), which the engine cuts
//! into batches.
//!
//! Values: integers ↔ `int`, DECIMAL(p,s) ↔ `decimal.Decimal` (`int` when s = 0), DOUBLE ↔
//! `float`, BOOLEAN ↔ `bool`, VARCHAR/CHAR ↔ `str`, DATE ↔ `datetime.date`, TIMESTAMP ↔
//! `datetime.datetime` (naive; an aware one is converted to UTC), NULL ↔ `None`. Output values are
//! checked against the declared type: a `str` for a DOUBLE, a `bool` for a number, an integer with
//! too many digits or a string longer than its VARCHAR fails with 22U13 naming column and value.
//! Decimal outputs are rounded half-up to their scale, as a SQL CAST would. `emit(DataFrame)` maps
//! pandas' missing values (NaN, NaT, None, pd.NA) to NULL; elsewhere a float NaN stays NaN.
//!
//! The protocol (framing and columnar encoding) is described in `wire.rs`; the error codes in
//! [`RuntimeError`](crate::RuntimeError).

mod chunks;
mod fork_server;
mod interpreter;
mod intervals;
mod process;
pub mod sandbox;
mod single_call;
mod single_call_spec;
mod spec;
mod sql_type;
mod wire;
mod wire_check;
mod worker;

pub use chunks::RunChunking;
pub use fork_server::{WarmStart, warm_starts};
pub use interpreter::{MIN_PYTHON, PythonVersion, find_python3};
pub use process::{WorkerCounts, worker_counts};
pub use single_call::{single_call, single_call_with_timeout};
pub use single_call_spec::{ExportSpec, ImportSpec, SingleCall};
pub use spec::{
    ColumnSpec, ConnectionInfo, ImportedScript, ScriptConnections, ScriptImports, ScriptInputType,
    ScriptOutput, ScriptSpec, WorkerContext,
};
pub use sql_type::SqlType;
pub use wire_check::{decode_worker_frame, sample_worker_frames};
pub use worker::PythonWorker;
