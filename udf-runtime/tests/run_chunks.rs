//! Runs in chunks, with the `python3` on PATH: SET groups and SCALAR batches larger than a chunk
//! give the same answers as small ones (next, reset, size, get_dataframe, emit, run_batch),
//! output comes back in parts, and a large group does not grow the worker's memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use accelsql_udf_runtime::script::{
    ColumnSpec, PythonWorker, RunChunking, ScriptConnections, ScriptImports, ScriptInputType,
    ScriptOutput, ScriptSpec, SqlType, WorkerContext, find_python3,
};
use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Int64Type};

fn columns(list: &[(&str, &str)]) -> Vec<ColumnSpec> {
    list.iter()
        .map(|(n, t)| ColumnSpec::new(*n, SqlType::parse(t).unwrap()))
        .collect()
}

/// A worker for `body` with `inputs`, `output`, cutting runs by `chunking`.
fn worker(
    input_type: ScriptInputType,
    inputs: &[(&str, &str)],
    output: ScriptOutput,
    body: &str,
    chunking: RunChunking,
) -> PythonWorker {
    let inputs = columns(inputs);
    let types: Vec<DataType> = inputs.iter().map(|c| c.sql_type.arrow_type()).collect();
    let spec = Arc::new(ScriptSpec {
        schema: "TEST".into(),
        name: "F".into(),
        language: "PYTHON3".into(),
        interpreter: find_python3().expect("these tests need python3 >= 3.8 on PATH"),
        input_type,
        inputs: Some(inputs),
        output,
        body: body.into(),
        env: vec![],
        imports: ScriptImports::none(),
        connections: ScriptConnections::none(),
    });
    let ctx = WorkerContext {
        chunking,
        ..WorkerContext::default()
    };
    PythonWorker::start(spec, ctx, &types, Some(Duration::from_secs(120)))
        .unwrap_or_else(|e| panic!("start failed: {e}"))
}

/// Chunks of 3 rows, output parts from 2 rows on.
fn tiny() -> RunChunking {
    RunChunking {
        max_rows: 3,
        max_bytes: 1 << 20,
        emit_rows: 2,
        emit_bytes: 64,
    }
}

fn ints(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

fn int_values(a: &ArrayRef) -> Vec<i64> {
    a.as_primitive::<Int64Type>().values().to_vec()
}

#[test]
fn a_set_group_larger_than_a_chunk_is_iterated_reset_and_read_as_dataframes() {
    let body = "\
def run(ctx):
    n = ctx.size()
    seen = []
    while True:
        seen.append(ctx.x)
        if not ctx.next():
            break
    ctx.emit('next', n, sum(seen), len(seen))
    # reset() goes back to the first row, whichever chunk that is in.
    ctx.reset()
    ctx.emit('reset', n, ctx.x, 0)
    # next() after the end says False again, and reset() starts over.
    ctx.next()
    ctx.next()
    ctx.emit('third', n, ctx.x, 0)
";
    let mut w = worker(
        ScriptInputType::Set,
        &[("x", "BIGINT")],
        ScriptOutput::Emits(columns(&[
            ("what", "VARCHAR(10)"),
            ("n", "BIGINT"),
            ("a", "BIGINT"),
            ("b", "BIGINT"),
        ])),
        body,
        tiny(),
    );
    // The group arrives in parts of awkward sizes, as an engine gathers it.
    let parts = vec![
        (1, vec![ints([1])]),
        (4, vec![ints(2..6)]),
        (0, vec![ints([])]),
        (5, vec![ints(6..11)]),
    ];
    let out = w.run_parts(parts).unwrap();
    let what: Vec<&str> = out[0].as_string::<i32>().iter().flatten().collect();
    assert_eq!(what, ["next", "reset", "third"]);
    assert_eq!(int_values(&out[1]), [10, 10, 10]);
    assert_eq!(int_values(&out[2]), [55, 1, 3]);
    assert_eq!(int_values(&out[3]), [10, 0, 0]);
    w.finish().unwrap();
}

#[test]
fn get_dataframe_reads_across_chunks() {
    if std::process::Command::new(find_python3().unwrap())
        .args(["-c", "import pandas"])
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        accelsql_udf_runtime::prerequisite::skip_test(
            "get_dataframe_reads_across_chunks",
            "python3 cannot import pandas",
        );
        return;
    }
    let body = "\
def run(ctx):
    sizes = []
    while True:
        df = ctx.get_dataframe(num_rows=4)
        if df is None:
            break
        sizes.append(len(df))
        ctx.emit(len(df), int(df['x'].sum()))
    ctx.reset()
    df = ctx.get_dataframe(num_rows='all')
    ctx.emit(len(df), int(df['x'].sum()))
";
    let mut w = worker(
        ScriptInputType::Set,
        &[("x", "BIGINT")],
        ScriptOutput::Emits(columns(&[("n", "BIGINT"), ("s", "BIGINT")])),
        body,
        tiny(),
    );
    let out = w.run(10, &[ints(1..11)]).unwrap();
    assert_eq!(int_values(&out[0]), [4, 4, 2, 10]);
    assert_eq!(int_values(&out[1]), [10, 26, 19, 55]);
    w.finish().unwrap();
}

#[test]
fn scalar_runs_larger_than_a_chunk_return_every_row_in_order() {
    let rows = 10;
    let mut w = worker(
        ScriptInputType::Scalar,
        &[("x", "BIGINT")],
        ScriptOutput::Returns(SqlType::BigInt),
        "def run(ctx):\n    return ctx.x * 2\n",
        tiny(),
    );
    let out = w.run(rows, &[ints(0..rows as i64)]).unwrap();
    assert_eq!(
        int_values(&out[0]),
        (0..rows as i64).map(|x| x * 2).collect::<Vec<_>>()
    );
    w.finish().unwrap();

    let mut w = worker(
        ScriptInputType::Scalar,
        &[("x", "BIGINT")],
        ScriptOutput::Returns(SqlType::BigInt),
        "def run_batch(ctx):\n    return [v + ctx.size() for v in ctx.x]\n",
        tiny(),
    );
    let out = w.run(rows, &[ints(0..rows as i64)]).unwrap();
    // run_batch sees one chunk at a time: 3, 3, 3 and 1 rows.
    let expected: Vec<i64> = (0..rows as i64)
        .map(|x| x + if x < 9 { 3 } else { 1 })
        .collect();
    assert_eq!(int_values(&out[0]), expected);
    w.finish().unwrap();

    let mut w = worker(
        ScriptInputType::Scalar,
        &[("x", "BIGINT")],
        ScriptOutput::Emits(columns(&[("y", "BIGINT")])),
        "def run(ctx):\n    for i in range(ctx.x % 3):\n        ctx.emit(ctx.x)\n",
        tiny(),
    );
    let out = w.run(rows, &[ints(0..rows as i64)]).unwrap();
    assert_eq!(int_values(&out[0]), [1, 2, 2, 4, 5, 5, 7, 8, 8]);
    // Traced: after each input row, how many rows the run had emitted (across chunks and
    // output parts).
    let (out, ends) = w
        .run_parts_traced(vec![(rows, vec![ints(0..rows as i64)])])
        .unwrap();
    assert_eq!(int_values(&out[0]), [1, 2, 2, 4, 5, 5, 7, 8, 8]);
    assert_eq!(ends, [0, 1, 3, 3, 4, 6, 6, 7, 9, 9]);
    w.finish().unwrap();
}

#[test]
fn a_bad_value_names_its_row_in_the_run_whichever_part_it_is_in() {
    // Parts of 2 rows, then 16: row 7 is in the last part (RESULT), row 21 in a middle one
    // (EMIT, sent while run(ctx) goes on).
    for (bad, rows) in [(6, 10), (20, 40)] {
        let body = format!(
            "def run(ctx):\n    for i in range({rows}):\n        ctx.emit(i if i != {bad} else 'bad')\n"
        );
        let mut w = worker(
            ScriptInputType::Set,
            &[("x", "BIGINT")],
            ScriptOutput::Emits(columns(&[("y", "BIGINT")])),
            &body,
            tiny(),
        );
        let e = w.run(1, &[ints([0])]).unwrap_err();
        assert_eq!(e.code(), "22U13", "{e}");
        let row = format!("row {} of this run", bad + 1);
        assert!(e.to_string().contains(&row), "{e}");
    }
}

#[test]
fn a_large_group_does_not_grow_the_workers_memory() {
    // 2M rows of 32-character strings: 64 MiB of text, well over 200 MB as Python objects had
    // the group been decoded whole. In chunks of 1 MiB the worker's peak grows by a few MB.
    let rows = 2_000_000;
    let text: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..rows).map(|i| format!("{i:032}")),
    ));
    let body = "\
import resource
START = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

def run(ctx):
    n = 0
    total = 0
    while True:
        n += 1
        total += len(ctx.s)
        if not ctx.next():
            break
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - START
    ctx.emit(n, total, grown_kib)
";
    let chunking = RunChunking {
        max_bytes: 1 << 20,
        ..RunChunking::default()
    };
    let mut w = worker(
        ScriptInputType::Set,
        &[("s", "VARCHAR(40)")],
        ScriptOutput::Emits(columns(&[
            ("n", "BIGINT"),
            ("total", "BIGINT"),
            ("grown_kib", "BIGINT"),
        ])),
        body,
        chunking,
    );
    let out = w.run(rows, &[text]).unwrap();
    assert_eq!(int_values(&out[0]), [rows as i64]);
    assert_eq!(int_values(&out[1]), [32 * rows as i64]);
    let grown_mib = int_values(&out[2])[0] / 1024;
    assert!(
        grown_mib < 48,
        "the worker's peak memory grew by {grown_mib} MiB"
    );
    w.finish().unwrap();
}

#[test]
fn many_emitted_rows_come_back_in_parts_and_whole() {
    let body = "\
def run(ctx):
    for i in range(ctx.n):
        ctx.emit(float(i))
";
    let mut w = worker(
        ScriptInputType::Set,
        &[("n", "BIGINT")],
        ScriptOutput::Emits(columns(&[("y", "DOUBLE")])),
        body,
        RunChunking {
            emit_rows: 100,
            emit_bytes: 4096,
            ..RunChunking::default()
        },
    );
    let out = w.run(1, &[ints([100_000])]).unwrap();
    let y = out[0].as_any().downcast_ref::<Float64Array>().unwrap();
    assert_eq!(y.len(), 100_000);
    assert!(y.values().iter().enumerate().all(|(i, v)| *v == i as f64));
    w.finish().unwrap();
}
