//! A worker runs user code and may write anything to its channel: forged frames (a huge length,
//! an unknown kind, a truncated payload, invalid UTF-8, columns that disagree) fail only that
//! run, with a coded error, in bounded time and memory, and a new worker works afterwards.
//! Needs the `python3` on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use accelsql_udf_runtime::script::{
    ColumnSpec, PythonWorker, ScriptConnections, ScriptImports, ScriptInputType, ScriptOutput,
    ScriptSpec, SqlType, WorkerContext, find_python3,
};
use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::datatypes::DataType;

/// A SCALAR script `f(x BIGINT) RETURNS <output>` whose `run` first executes `forge` (Python,
/// with `ch` the worker's channel, `struct` and `os` imported).
fn worker(output: SqlType, forge: &str, timeout: Duration) -> PythonWorker {
    let body = format!(
        "import os, struct, sys\n\
         from accelsql_worker import state\n\
         def run(ctx):\n\
         \x20   ch = state.CHANNEL\n\
         \x20   def frame(kind, payload, claimed=None):\n\
         \x20       n = len(payload) if claimed is None else claimed\n\
         \x20       os.write(ch.fd, struct.pack('<QB', n, kind) + payload)\n\
         {}\n\
         \x20   return {}\n",
        forge
            .lines()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
        if output == SqlType::BigInt {
            "ctx.x"
        } else {
            "str(ctx.x)"
        }
    );
    let spec = Arc::new(ScriptSpec {
        schema: "TEST".into(),
        name: "F".into(),
        language: "PYTHON3".into(),
        interpreter: find_python3().expect("these tests need python3 >= 3.8 on PATH"),
        input_type: ScriptInputType::Scalar,
        inputs: Some(vec![ColumnSpec::new("x", SqlType::BigInt)]),
        output: ScriptOutput::Returns(output),
        body,
        env: vec![],
        imports: ScriptImports::none(),
        connections: ScriptConnections::none(),
    });
    PythonWorker::start(
        spec,
        WorkerContext::default(),
        &[DataType::Int64],
        Some(timeout),
    )
    .unwrap_or_else(|e| panic!("start failed: {e}"))
}

fn args() -> Vec<ArrayRef> {
    vec![Arc::new(Int64Array::from(vec![7])) as ArrayRef]
}

/// Runs a worker forging with `forge`: the run fails with a coded error within `within`; a
/// healthy worker then runs.
fn fails_cleanly(output: SqlType, forge: &str, within: Duration) -> String {
    let started = Instant::now();
    let mut w = worker(output, forge, Duration::from_secs(3));
    let e = w
        .run(1, &args())
        .expect_err("a forged frame must fail the run");
    let elapsed = started.elapsed();
    let message = e.to_string();
    assert!(
        message.starts_with('[') && message.as_bytes().get(6) == Some(&b']'),
        "{message}"
    );
    assert!(elapsed < within, "took {elapsed:?}: {message}");
    drop(w);
    let mut healthy = worker(output, "pass", Duration::from_secs(30));
    let out = healthy.run(1, &args()).unwrap();
    assert_eq!(out[0].len(), 1);
    message
}

#[test]
fn a_huge_claimed_length_costs_no_memory_and_ends_at_the_timeout() {
    // 256 GiB claimed (just under the frame limit), ten bytes sent: before, the engine
    // allocated the claimed length up front (and aborted); now it waits for bytes that never
    // come, until the run's timeout.
    let message = fails_cleanly(
        SqlType::BigInt,
        "frame(4, b'0123456789', claimed=(1 << 38) - 1)\nimport time\ntime.sleep(60)",
        Duration::from_secs(30),
    );
    assert!(
        message.contains("57U12") || message.contains("timed out"),
        "{message}"
    );
}

#[test]
fn a_length_over_the_limit_is_refused_at_once() {
    let message = fails_cleanly(
        SqlType::BigInt,
        "frame(4, b'', claimed=1 << 62)\nimport time\ntime.sleep(60)",
        Duration::from_secs(20),
    );
    assert!(message.contains("limit"), "{message}");
}

#[test]
fn an_unknown_frame_kind_and_a_truncated_payload_fail_the_run() {
    fails_cleanly(
        SqlType::BigInt,
        "frame(200, b'junk')\nimport time\ntime.sleep(60)",
        Duration::from_secs(20),
    );
    fails_cleanly(
        SqlType::BigInt,
        "frame(4, b'0123456789', claimed=100)\nos._exit(0)",
        Duration::from_secs(20),
    );
}

#[test]
fn invalid_utf8_and_disagreeing_columns_are_refused() {
    // A RESULT of one VARCHAR row whose bytes are not UTF-8.
    let bad_utf8 = "frame(4, struct.pack('<IQBB', 1, 1, 5, 0) + struct.pack('<ii', 0, 2) + b'\\xff\\xfe')\nimport time\ntime.sleep(60)";
    let message = fails_cleanly(
        SqlType::parse("VARCHAR(10)").unwrap(),
        bad_utf8,
        Duration::from_secs(20),
    );
    assert!(message.to_lowercase().contains("utf"), "{message}");
    // Two columns for a script with one output.
    let two = "frame(4, struct.pack('<IQ', 2, 1) + struct.pack('<BBq', 2, 0, 1) * 2)\nimport time\ntime.sleep(60)";
    let message = fails_cleanly(SqlType::BigInt, two, Duration::from_secs(20));
    assert!(message.contains("columns"), "{message}");
    // Offsets that run past the data.
    let past = "frame(4, struct.pack('<IQBB', 1, 1, 5, 0) + struct.pack('<ii', 0, 1000) + b'ab')\nimport time\ntime.sleep(60)";
    fails_cleanly(
        SqlType::parse("VARCHAR(10)").unwrap(),
        past,
        Duration::from_secs(20),
    );
}
