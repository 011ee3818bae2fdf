//! The `accelsql` SQL shell as a user runs it: `-c`, `-f`, piped scripts, output formats, timing
//! and error reports.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const ACCELSQL: &str = env!("CARGO_BIN_EXE_accelsql");

/// `accelsql ARGS` with `stdin` piped in, on zero simulated GPUs unless the args say otherwise.
fn accelsql_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(args)
        .env("ACCELSQL_SIMULATED_GPUS", "0")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("ACCELSQL_DEVICE_LOCK_DIR")
        .env_remove("ACCELSQL_GPU_WAIT_TIMEOUT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start accelsql");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn accelsql(args: &[&str]) -> Output {
    accelsql_with_stdin(args, "")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// The `[CODE]` in `line` right after `prefix`, checked to be a 5-character SQLSTATE-style code.
fn code_after<'a>(line: &'a str, prefix: &str) -> &'a str {
    let rest = line
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{line:?} does not start with {prefix:?}"));
    let code = &rest[..5];
    assert!(
        code.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
        "{line}"
    );
    code
}

fn write_script(dir: &Path, text: &str) -> String {
    let path = dir.join("script.sql");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_command_prints_a_table_by_default() {
    let out = accelsql(&["-c", "SELECT 1 AS one, 'a' AS letter"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "+-----+--------+\n\
         | one | letter |\n\
         +-----+--------+\n\
         | 1   | a      |\n\
         +-----+--------+\n"
    );
}

#[test]
fn a_command_prints_csv_with_a_header() {
    let out = accelsql(&[
        "--format",
        "csv",
        "-c",
        "SELECT * FROM (VALUES (1, 'x, y'), (2, NULL)) AS t(n, s) ORDER BY n",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "n,s\n1,\"x, y\"\n2,\n");
}

#[test]
fn a_command_prints_one_json_object_per_row() {
    let out = accelsql(&[
        "--format",
        "json",
        "-c",
        "SELECT * FROM (VALUES (1, 'x'), (2, NULL)) AS t(n, s) ORDER BY n",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        rows,
        [
            serde_json::json!({"n": 1, "s": "x"}),
            serde_json::json!({"n": 2, "s": null})
        ]
    );
}

#[test]
fn a_command_runs_every_statement_and_prints_each_result() {
    let out = accelsql(&[
        "--format",
        "csv",
        "-c",
        "CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2); SELECT sum(x) AS total FROM t;",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // INSERT reports its row count; CREATE TABLE prints nothing.
    assert_eq!(stdout(&out), "count\n2\ntotal\n3\n");
}

#[test]
fn a_schema_with_tables_is_dropped_with_cascade_and_kept_without() {
    let out = accelsql(&[
        "--format",
        "csv",
        "-c",
        "CREATE SCHEMA gone; CREATE TABLE gone.t (x INT); DROP SCHEMA gone CASCADE; \
         DROP SCHEMA IF EXISTS gone; SELECT count(*) AS n FROM information_schema.schemata \
         WHERE schema_name = 'gone';",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "n\n0\n");
    let out = accelsql(&[
        "-c",
        "CREATE SCHEMA kept; CREATE TABLE kept.t (x INT); DROP SCHEMA kept;",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("other tables depend on it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_failing_command_prints_its_code_and_exits_1() {
    let out = accelsql(&["-c", "SELEC 1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("ERROR [42000]: SQL error: "), "{err}");

    let out = accelsql(&["-c", "SELECT 1; SELECT * FROM no_such_table; SELECT 2"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    code_after(&err, "ERROR [");
    assert!(err.contains("no_such_table"), "{err}");
    assert!(stdout(&out).contains("| 1 "), "the first statement ran");
    assert!(!stdout(&out).contains("| 2 "), "the last one did not");
}

#[test]
fn a_script_stops_at_the_first_error_and_says_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        dir.path(),
        "-- setup\n\
         CREATE TABLE t (x INT);\n\
         INSERT INTO t VALUES (1);\n\
         \n\
         SELECT x\n\
           FROM missing;\n\
         SELECT 'never runs' AS after;\n",
    );
    let out = accelsql(&["--format", "csv", "-f", &script]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    code_after(&err, &format!("ERROR at {script}:5 (statement 3): ["));
    assert!(err.contains("missing"), "{err}");
    assert_eq!(
        stdout(&out),
        "count\n1\n",
        "statements before the error ran"
    );
    assert!(!stdout(&out).contains("never runs"));
}

#[test]
fn a_script_reports_an_accelsql_error_with_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    // A bad value is rejected by SET itself.
    let script = write_script(
        dir.path(),
        "SELECT 1;\nSET accelsql.gpu_wait_timeout = 'soon';\nSELECT 2;\n",
    );
    let out = accelsql(&["-f", &script]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("ERROR at {script}:2 (statement 2): [22E03] ")),
        "{err}"
    );
}

#[test]
fn a_missing_script_is_an_error_naming_the_file() {
    let out = accelsql(&["-f", "/no/such/script.sql"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("accelsql: [58C03] cannot read /no/such/script.sql"),
        "{err}"
    );
}

#[test]
fn piped_standard_input_runs_as_a_script() {
    let out = accelsql_with_stdin(
        &["--format", "csv"],
        "SELECT 1 AS a;\nSELECT 2 AS b -- no semicolon at the end\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "a\n1\nb\n2\n");

    let out = accelsql_with_stdin(&[], "SELECT 1;\n\nSELECT nope FROM nowhere;\n");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    code_after(&err, "ERROR at <stdin>:3 (statement 2): [");
}

#[test]
fn timing_prints_row_count_and_time_after_each_statement() {
    let out = accelsql(&[
        "--timing",
        "--format",
        "csv",
        "-c",
        "SELECT * FROM (VALUES (1), (2), (3)) AS t(x); SELECT 1 AS y",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..5], ["x", "1", "2", "3", "3 row(s)"], "{text}");
    assert!(
        lines[5].starts_with("Time: ") && lines[5].ends_with(" ms"),
        "{text}"
    );
    assert_eq!(lines[6..8], ["y", "1"], "{text}");
    assert_eq!(lines[8], "1 row(s)", "{text}");
    let ms: f64 = lines[9]
        .strip_prefix("Time: ")
        .and_then(|t| t.strip_suffix(" ms"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ms >= 0.0);
}

#[test]
fn simulated_gpus_show_in_the_system_tables() {
    let out = accelsql(&[
        "--simulated-gpus",
        "2",
        "--format",
        "csv",
        "-c",
        "SELECT count(*) AS n FROM accelsql.gpu_devices",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "n\n2\n");
}

#[test]
fn the_quickstart_script_runs_without_gpus() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart.sql");
    let out = accelsql(&["-f", script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("acceleratorDeviceGpuNvidiaCount"), "{text}");
    assert!(text.contains("gpu_placement"), "{text}");
    assert!(text.contains("Berlin"), "{text}");
}

#[test]
fn a_reader_that_stops_early_ends_the_shell_quietly() {
    use std::io::Read;

    let mut child = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args([
            "--format",
            "csv",
            "-c",
            "SELECT * FROM generate_series(1, 500000)",
        ])
        .env("ACCELSQL_SIMULATED_GPUS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 6];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // then the pipe closes
    assert_eq!(&first, b"value\n");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

#[test]
fn ctrl_c_cancels_the_running_statement_and_stops_the_script() {
    // A statement that runs for minutes, then one that must not run.
    let child = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args([
            "-c",
            "SELECT sum(value) FROM range(100000000000); SELECT 'not reached'",
        ])
        .env("ACCELSQL_SIMULATED_GPUS", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start accelsql");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: sending SIGINT to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let started = std::time::Instant::now();
    let output = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "cancellation took {:?}",
        started.elapsed()
    );
    let err = String::from_utf8(output.stderr.clone()).unwrap();
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("ERROR [57014]: statement cancelled"), "{err}");
    assert!(!stdout(&output).contains("not reached"));
}

#[test]
fn a_script_file_with_a_create_script_missing_its_slash_line_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        dir.path(),
        "SELECT 1;\nCREATE PYTHON3 SCALAR SCRIPT f() RETURNS INT AS\ndef run(ctx):\n    return 1;\nSELECT f();\n",
    );
    let out = accelsql(&["-f", &script]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("ERROR at {script}:2 (statement 2): [42E03] ")),
        "{err}"
    );
    assert!(err.contains("no closing line holding only '/'"), "{err}");
}

#[test]
fn a_script_file_creates_and_calls_a_python_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        dir.path(),
        "CREATE PYTHON3 SCALAR SCRIPT twice(x BIGINT) RETURNS BIGINT AS\n\
         # a comment; with a semicolon\ndef run(ctx):\n    return 2 * ctx.x\n/\nSELECT twice(21) AS answer;\n",
    );
    let out = accelsql(&["-f", &script, "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "answer\n42\n");
}

#[test]
fn a_file_name_is_a_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cities.csv"),
        "name,population\nLyon,522\nNice,342\n",
    )
    .unwrap();
    let csv = dir.path().join("cities.csv").display().to_string();
    let sql = format!("SELECT name, population FROM '{csv}' ORDER BY population DESC");
    let out = accelsql(&["-c", &sql, "--format", "csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "name,population\nLyon,522\nNice,342\n");

    // A glob, and a missing file with its code.
    let glob = dir.path().join("*.csv").display().to_string();
    let out = accelsql(&[
        "-c",
        &format!("SELECT count(*) AS n FROM '{glob}'"),
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "n\n2\n");
    let missing = dir.path().join("missing.csv").display().to_string();
    let out = accelsql(&["-c", &format!("SELECT * FROM '{missing}'")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(code_after(&err, "ERROR ["), "58P01", "{err}");
    assert!(err.contains("missing.csv"), "{err}");
}

#[test]
fn restricted_refuses_files_script_ddl_and_limit_lifting_settings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret.csv"), "a\n1\n").unwrap();
    let csv = dir.path().join("secret.csv").display().to_string();
    let out_file = dir.path().join("out.csv");
    for sql in [
        format!("SELECT * FROM '{csv}'"),
        format!("COPY (SELECT 1 AS a) TO '{}'", out_file.display()),
        "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=/bin/sh'".to_string(),
        "SET datafusion.execution.target_partitions = 512".to_string(),
    ] {
        let out = accelsql(&["--restricted", "-c", &sql]);
        assert_eq!(out.status.code(), Some(1), "{sql}");
        let err = stderr(&out);
        assert!(
            err.starts_with("ERROR [42501]: not allowed in a restricted session"),
            "{err}"
        );
        // Without --restricted the same statement runs.
        let out = accelsql(&["-c", &sql]);
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
    }
    assert!(out_file.exists(), "the unrestricted COPY wrote it");
    let out = accelsql(&["--restricted", "-c", "SELECT 6 * 7 AS x", "--format", "csv"]);
    assert_eq!(stdout(&out), "x\n42\n");
}

#[test]
fn backslash_commands_work_in_scripts_as_at_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let included = dir.path().join("more.sql");
    std::fs::write(&included, "INSERT INTO t VALUES (3, 'z');\n").unwrap();
    let copy = dir.path().join("copy.txt");
    let script = write_script(
        dir.path(),
        &format!(
            "CREATE TABLE t (a INT, b VARCHAR(5)) AS VALUES (1, 'x'), (2, NULL);\n\
             \\i {}\n\
             \\dt\n\
             \\d t\n\
             \\x on\n\
             SELECT a, b FROM t WHERE a = 1;\n\
             \\x off\n\
             \\o {}\n\
             SELECT count(*) AS n FROM t;\n\
             \\o\n\
             \\timing on\n\
             SELECT 'after' AS w;\n\
             \\q\n\
             SELECT 'not reached';\n",
            included.display(),
            copy.display()
        ),
    );
    let out = accelsql(&["--format", "csv", "-f", &script]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // \dt and \d t.
    assert!(
        text.contains("schema,name,type\npublic,t,BASE TABLE\n"),
        "{text}"
    );
    assert!(
        text.contains("column_name,data_type,is_nullable\na,Int32,YES\nb,Utf8View,YES\n"),
        "{text}"
    );
    // \x is the table format's: CSV stays CSV.
    assert!(
        text.contains("Expanded display is on.\na,b\n1,x\n"),
        "{text}"
    );
    // \o sent one result to the file, and only that one; \i's row is counted.
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "n\n3\n");
    assert!(!text.contains("n\n3\n"), "{text}");
    assert!(text.contains("w\nafter\n1 row(s)\nTime: "), "{text}");
    assert!(!text.contains("not reached"), "{text}");

    // Expanded display in the table format; \df lists scripts with their annotations.
    let out = accelsql_with_stdin(
        &["--simulated-gpus", "1"],
        "CREATE PYTHON3 SCALAR SCRIPT twice(x INT) RETURNS INT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia|None;\n\
         def run(ctx):\n    return 2 * ctx.x\n/\n\
         \\x\nSELECT 1 AS one, 'it' AS two;\n\\df\n\\d twice\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("-[ RECORD 1 ]-\none | 1\ntwo | it\n"),
        "{text}"
    );
    assert!(
        text.contains("-[ RECORD 1 ]-\nschema      | public\nname        | twice\n"),
        "{text}"
    );
    assert!(
        text.contains("annotations | %perInstanceRequiredAcceleratorDevices GpuNvidia|None;"),
        "{text}"
    );

    // An unknown command fails the script with its code, and says where.
    let script = write_script(dir.path(), "SELECT 1;\n\\nope\nSELECT 2;\n");
    let out = accelsql(&["-f", &script]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("[42C01]") && err.contains("script.sql:2: unknown command \\nope"),
        "{err}"
    );
    assert!(!stdout(&out).contains("| 2 "), "{}", stdout(&out));
    // A backslash inside a statement (a string, a script body) is the statement's.
    let out = accelsql(&["--format", "csv", "-c", "SELECT '\\d' AS s"]);
    assert_eq!(stdout(&out), "s\n\\d\n");
}

#[test]
fn markdown_and_parquet_formats() {
    let out = accelsql(&["--format", "markdown", "-c", "SELECT 1 AS a, 'x|y' AS b"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "| a | b |\n| --- | --- |\n| 1 | x\\|y |\n");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.parquet");
    let file = file.to_str().unwrap();
    let out = accelsql(&[
        "--format",
        "parquet",
        "-o",
        file,
        "-c",
        "SELECT 1 AS first; SELECT value AS v, value * 2 AS w FROM generate_series(1, 1000)",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    // The file holds the last result.
    let read = accelsql(&[
        "--format",
        "csv",
        "-c",
        &format!("SELECT count(*) AS n, sum(w) AS s FROM '{file}'"),
    ]);
    assert_eq!(stdout(&read), "n,s\n1000,1001000\n", "{}", stderr(&read));

    let out = accelsql(&["--format", "parquet", "-c", "SELECT 1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("-o FILE"), "{}", stderr(&out));
}

/// `accelsql ARGS` under a pseudo terminal (`script` from util-linux), its terminal output.
fn accelsql_on_a_terminal(args: &str, lock_dir: &Path) -> std::process::Child {
    Command::new("script")
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(["-qfec", &format!("{ACCELSQL} {args}"), "/dev/null"])
        .env("ACCELSQL_DEVICE_LOCK_DIR", lock_dir)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("ACCELSQL_SIMULATED_GPUS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start `script` (util-linux) to give accelsql a terminal")
}

#[test]
fn a_long_statement_shows_its_progress_and_lease_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let locks = dir.path().join("locks");
    std::fs::create_dir(&locks).unwrap();
    let script = write_script(
        dir.path(),
        "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT slow(x INT) RETURNS INT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         import time\n\
         def run(ctx):\n    time.sleep(3)\n    return ctx.x\n/\n\
         SELECT slow(1) AS s;\n",
    );
    // Two processes share the simulated GPU's lock: the second waits for the first.
    let args = format!("--simulated-gpus 1 -f {script}");
    let first = accelsql_on_a_terminal(&args, &locks);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let second = accelsql_on_a_terminal(&args, &locks);
    let first = first.wait_with_output().unwrap();
    let second = second.wait_with_output().unwrap();
    let first_text = stdout(&first);
    let second_text = stdout(&second);
    assert!(
        first.status.success() && second.status.success(),
        "{first_text}\n{second_text}"
    );
    assert!(first_text.contains(" rows · holding GPU 0"), "{first_text}");
    assert!(
        second_text.contains("0 rows · waiting for the GPU lease ("),
        "{second_text}"
    );
    assert!(second_text.contains("holding GPU 0"), "{second_text}");
    // The line is erased before the result is printed.
    assert!(second_text.contains("\r\x1b[K+---+"), "{second_text:?}");

    // Not on a terminal: the output is the result alone.
    let out = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(["--simulated-gpus", "1", "--format", "csv", "-f", &script])
        .env("ACCELSQL_DEVICE_LOCK_DIR", &locks)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "s\n1\n");
    assert_eq!(stderr(&out), "");
}

#[test]
fn the_interactive_prompt_takes_backslash_commands_on_a_terminal() {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new("script")
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args([
            "-qfec",
            &format!("{ACCELSQL} --simulated-gpus 0"),
            "/dev/null",
        ])
        .env("HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start `script` (util-linux) to give accelsql a terminal");
    let mut input = child.stdin.take().unwrap();
    // Typed a line at a time, as a user would (the prompt must be up before each).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    for line in [
        "CREATE TABLE tt(a INT);",
        "\\dt",
        "\\x",
        "SELECT 5 AS five;",
        "\\nope",
        "\\q",
    ] {
        input.write_all(format!("{line}\r").as_bytes()).unwrap();
        input.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(400));
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("| public | tt   | BASE TABLE |"), "{text}");
    assert!(text.contains("Expanded display is on."), "{text}");
    assert!(text.contains("-[ RECORD 1 ]-\r\nfive | 5"), "{text:?}");
    assert!(text.contains("[42C01] unknown command \\nope"), "{text}");
    // \q ended the shell, and its history was kept.
    let history = std::fs::read_to_string(home.path().join(".accelsql_history")).unwrap();
    assert!(history.contains("\\dt"), "{history}");
}

/// The ```sql blocks of `text` with their first line's number and, where a ```text block
/// follows (blank lines between), what it shows.
fn sql_examples(text: &str) -> Vec<(usize, String, Option<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    let block_at = |start: usize| -> (String, usize) {
        let mut body = String::new();
        let mut i = start;
        while i < lines.len() && lines[i] != "```" {
            body.push_str(lines[i]);
            body.push('\n');
            i += 1;
        }
        (body, i + 1)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i] != "```sql" {
            i += 1;
            continue;
        }
        let (sql, next) = block_at(i + 1);
        let mut j = next;
        while j < lines.len() && lines[j].trim().is_empty() {
            j += 1;
        }
        let (shown, after) = if lines.get(j) == Some(&"```text") {
            let (shown, after) = block_at(j + 1);
            (Some(shown), after)
        } else {
            (None, next)
        };
        out.push((i + 1, sql, shown));
        i = after;
    }
    out
}

/// The book's SQL examples run as written: every ```sql block of `docs/src/*.md`, page by page
/// in a fresh directory (a page's blocks in order, its tables kept between them), in the shell
/// on two simulated GPUs; a ```text block right after one is the shell's whole output for it.
/// A page that shows SQL the engine refuses, or output it does not print, fails here.
#[test]
fn every_sql_example_of_the_book_runs_and_prints_what_the_book_shows() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src");
    let mut pages: Vec<_> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    let (mut run, mut checked) = (0, 0);
    let mut failures = Vec::new();
    for page in &pages {
        let examples = sql_examples(&std::fs::read_to_string(page).unwrap());
        if examples.is_empty() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for (line, sql, shown) in examples {
            std::fs::write(dir.path().join("example.sql"), &sql).unwrap();
            let output = Command::new(ACCELSQL)
                .current_dir(dir.path())
                .env("ACCELSQL_DATA_DIR", dir.path().join("db"))
                .env("ACCELSQL_SIMULATED_GPUS", "2")
                .env_remove("CUDA_VISIBLE_DEVICES")
                .env_remove("ACCELSQL_DEVICE_LOCK_DIR")
                .env_remove("ACCELSQL_GPU_WAIT_TIMEOUT")
                .args(["-f", "example.sql"])
                .output()
                .unwrap();
            run += 1;
            if !output.status.success() {
                failures.push(format!("{name}:{line}: {}", stderr(&output)));
            } else if let Some(shown) = shown {
                checked += 1;
                if stdout(&output) != shown {
                    failures.push(format!(
                        "{name}:{line}: the book shows\n{shown}the shell printed\n{}",
                        stdout(&output)
                    ));
                }
            }
        }
    }
    assert!(
        run >= 6 && checked >= 6,
        "only {run} examples ({checked} with output) found"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
