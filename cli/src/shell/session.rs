//! The shell's session: one engine session that runs statements one at a time and prints each
//! result (`Shell`), whatever the input mode; its backslash commands (`meta.rs`), and the
//! progress line of a long statement on a terminal.

use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use accelsql_engine::splitter::{is_blank, is_complete, split_statements};
use accelsql_engine::{Engine, EngineError, EngineOptions, LeasePlace, SchedulerConfig, Session};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use futures::StreamExt;
use tokio::runtime::Runtime;

use super::args::ShellArgs;
use super::meta::{self, MetaCommand};
use super::{OutputFormat, format, interrupt};
use crate::error::{CliError, StatementLocation};

/// A statement that runs longer than this gets a progress line (on a terminal).
const PROGRESS_AFTER: Duration = Duration::from_secs(1);
/// How often the progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How deep `\i` may nest (a file that includes itself stops there).
const MAX_INCLUDE_DEPTH: usize = 16;

/// What the input loop does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on reading.
    Continue,
    /// `\q`: stop.
    Quit,
}

/// One session and how to print its results: what every input mode runs statements through.
pub(crate) struct Shell {
    runtime: Runtime,
    session: Session,
    format: OutputFormat,
    /// `--timing`, `\timing`.
    timing: Cell<bool>,
    /// `\x`: a record per row (the table format).
    expanded: Cell<bool>,
    /// Where results go (`-o FILE`, `\o FILE`); `None`: standard output.
    output: RefCell<Option<PathBuf>>,
    /// Whether long statements draw a progress line: standard error is a terminal.
    progress: bool,
    /// How deep `\i` has nested now.
    depth: Cell<usize>,
}

impl Shell {
    /// Starts the async runtime and the engine (devices from `--simulated-gpus`, else the
    /// environment) and opens a session: SYS's, or `--user`'s.
    pub(super) fn start(args: &ShellArgs) -> Result<Self, CliError> {
        if args.format == OutputFormat::Parquet && args.output.is_none() {
            return Err(CliError::Command(
                "--format parquet writes a file: give it with -o FILE".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            // Statements plan and run on these threads (see STATEMENT_STACK_BYTES).
            .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
            .build()
            .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
        let engine = runtime.block_on(async {
            let mut scheduler = SchedulerConfig::from_env()?;
            if let Some(n) = args.simulated_gpus {
                scheduler = scheduler.with_simulated_gpus(n);
            }
            let options = EngineOptions {
                scheduler,
                data_dir: crate::data_dir::resolve(args.data_dir.as_deref(), args.in_memory),
                // Files as tables (`SELECT * FROM 'x.parquet'`), as in datafusion-cli.
                url_tables: true,
                restricted: args.restricted,
                ..EngineOptions::default()
            };
            let options = match &args.cluster {
                Some(address) => {
                    let auth = args.cluster_auth.auth()?;
                    accelsql_cluster::ClusterClient::connect(address, auth, args.nodes)
                        .await
                        .map_err(|e| CliError::Cluster(Box::new(e)))?
                        .engine_options(options)
                }
                None => options,
            };
            Engine::with_options(options).map_err(|e| CliError::Engine(Box::new(e)))
        })?;
        // `--restricted` is the engine's option: it bounds this session whoever its user is.
        let session = match &args.user {
            Some(user) => engine
                .session_as(user)
                .map_err(|e| CliError::Engine(Box::new(e)))?,
            None => engine.session(),
        };
        if !interrupt::install() {
            eprintln!("accelsql: Ctrl-C cannot cancel statements here; it will end the shell");
        }
        let shell = Self {
            runtime,
            session,
            format: args.format,
            timing: Cell::new(args.timing),
            expanded: Cell::new(false),
            output: RefCell::new(None),
            progress: std::io::stderr().is_terminal(),
            depth: Cell::new(0),
        };
        if let Some(path) = &args.output {
            shell.send_output_to(Some(path.clone()))?;
        }
        Ok(shell)
    }

    /// The session's engine (for the prompt's banner).
    pub(crate) fn engine(&self) -> &Engine {
        self.session.engine()
    }

    /// Runs the statements and backslash commands of `text` in order, stopping at the first
    /// that fails (or at `\q`). With a script name, the error says where the statement starts:
    /// `ERROR at NAME:LINE (statement N): …`. A backslash command counts at the start of a line
    /// where no statement is open.
    pub(crate) fn run_script(&self, text: &str, script: Option<&str>) -> Result<Flow, CliError> {
        let has_commands = text.lines().any(|l| l.trim_start().starts_with('\\'));
        if !has_commands {
            return self.run_statements(text, script, 1, &mut 0);
        }
        let mut pending = String::new();
        let mut pending_line = 1;
        let mut index = 0;
        for (n, line) in text.split_inclusive('\n').enumerate() {
            if is_blank(&pending) && line.trim_start().starts_with('\\') {
                pending.clear();
                let Some(command) = MetaCommand::parse(line) else {
                    continue;
                };
                let flow = self.meta(command).map_err(|e| match (script, e) {
                    (Some(script), CliError::Command(message)) => {
                        CliError::Command(format!("{script}:{}: {message}", n + 1))
                    }
                    (_, e) => e,
                })?;
                if flow == Flow::Quit {
                    return Ok(Flow::Quit);
                }
                pending_line = n + 2;
                continue;
            }
            if pending.is_empty() {
                pending_line = n + 1;
            }
            pending.push_str(line);
            if is_complete(&pending) {
                if self.run_statements(&pending, script, pending_line, &mut index)? == Flow::Quit {
                    return Ok(Flow::Quit);
                }
                pending.clear();
            }
        }
        self.run_statements(&pending, script, pending_line, &mut index)
    }

    /// Runs the statements of `text`, which starts on line `first_line` of `script`; `index`
    /// counts the script's statements so far.
    fn run_statements(
        &self,
        text: &str,
        script: Option<&str>,
        first_line: usize,
        index: &mut usize,
    ) -> Result<Flow, CliError> {
        for statement in split_statements(text) {
            *index += 1;
            // Ctrl-C between two statements stops the script before the next one.
            let result = if interrupt::take() {
                Err(CliError::statement(cancelled()))
            } else if statement.unterminated_script && script.is_some() {
                // In a script file the body would otherwise swallow everything after it.
                Err(CliError::statement(EngineError::ScriptDefinition {
                    message: "this CREATE … SCRIPT has no closing line holding only '/'; its body \
                              runs to the end of the file"
                        .into(),
                }))
            } else {
                self.execute(&statement.text)
            };
            result.map_err(|e| match script {
                Some(script) => e.at(StatementLocation {
                    script: script.to_string(),
                    line: first_line + statement.line - 1,
                    index: *index,
                }),
                None => e,
            })?;
        }
        Ok(Flow::Continue)
    }

    /// Carries out a backslash command.
    pub(crate) fn meta(&self, command: MetaCommand) -> Result<Flow, CliError> {
        let switched = |cell: &Cell<bool>, value: Option<bool>, what: &str| {
            let on = value.unwrap_or(!cell.get());
            cell.set(on);
            println!("{what} is {}.", if on { "on" } else { "off" });
        };
        match command {
            MetaCommand::Quit => return Ok(Flow::Quit),
            MetaCommand::Help => println!("{}", meta::HELP),
            MetaCommand::Timing(value) => switched(&self.timing, value, "Timing"),
            MetaCommand::Expanded(value) => switched(&self.expanded, value, "Expanded display"),
            MetaCommand::Output(path) => self.send_output_to(path.map(PathBuf::from))?,
            MetaCommand::Include(path) => {
                if self.depth.get() >= MAX_INCLUDE_DEPTH {
                    return Err(CliError::Command(format!(
                        "\\i {path}: files include each other more than {MAX_INCLUDE_DEPTH} deep"
                    )));
                }
                let text = std::fs::read_to_string(&path).map_err(|source| CliError::Script {
                    path: PathBuf::from(&path),
                    source,
                })?;
                self.depth.set(self.depth.get() + 1);
                let flow = self.run_script(&text, Some(&path));
                self.depth.set(self.depth.get() - 1);
                return flow;
            }
            MetaCommand::Tables => self.execute(meta::TABLES_SQL)?,
            MetaCommand::Functions => self.execute(meta::FUNCTIONS_SQL)?,
            MetaCommand::Describe(None) => {
                self.execute(meta::TABLES_SQL)?;
                self.execute(meta::FUNCTIONS_SQL)?;
            }
            MetaCommand::Describe(Some(name)) => self.describe(&name)?,
            MetaCommand::Invalid(message) => return Err(CliError::Command(message)),
        }
        Ok(Flow::Continue)
    }

    /// `\d NAME`: a table's columns with their types, else the scripts of that name.
    fn describe(&self, name: &str) -> Result<(), CliError> {
        let described = self.collect(&format!("DESCRIBE {name}"));
        if let Ok((schema, batches)) = described {
            return self.print(&schema, &batches, None);
        }
        let (schema, batches) = self
            .collect(&meta::script_sql(name))
            .map_err(CliError::statement)?;
        if batches.iter().all(|b| b.num_rows() == 0) {
            return Err(CliError::Command(format!(
                "\\d: no table or script named {name}"
            )));
        }
        self.print(&schema, &batches, None)
    }

    /// Sends results to `path` (made anew now), or back to standard output.
    fn send_output_to(&self, path: Option<PathBuf>) -> Result<(), CliError> {
        if let Some(path) = &path {
            std::fs::File::create(path)
                .map_err(|e| CliError::Command(format!("cannot write {}: {e}", path.display())))?;
        }
        *self.output.borrow_mut() = path;
        Ok(())
    }

    /// Runs one statement and prints its result (and, with `--timing`, its row count and time).
    pub(crate) fn execute(&self, sql: &str) -> Result<(), CliError> {
        let started = Instant::now();
        let (schema, batches) = self.collect(sql).map_err(CliError::statement)?;
        let elapsed = started.elapsed();
        self.print(&schema, &batches, self.timing.get().then_some(elapsed))
    }

    /// Runs one statement and collects its result; on a terminal, a statement that runs longer
    /// than [`PROGRESS_AFTER`] shows a progress line on standard error (elapsed time, rows so
    /// far, the GPU lease's state) until it ends. Ctrl-C cancels it.
    fn collect(&self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), EngineError> {
        let started = Instant::now();
        let rows = AtomicUsize::new(0);
        let drawn = Cell::new(false);
        let result = self.runtime.block_on(async {
            let work = async {
                let mut stream = self.session.sql_stream(sql).await?;
                let schema = stream.schema();
                let mut batches = Vec::new();
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    rows.fetch_add(batch.num_rows(), Ordering::Relaxed);
                    batches.push(batch);
                }
                Ok::<_, EngineError>((schema, batches))
            };
            let progress = async {
                if !self.progress {
                    return std::future::pending::<()>().await;
                }
                tokio::time::sleep(PROGRESS_AFTER).await;
                loop {
                    let line = progress_line(
                        started.elapsed(),
                        rows.load(Ordering::Relaxed),
                        self.lease_state().as_deref(),
                    );
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[K{line}");
                    let _ = err.flush();
                    drawn.set(true);
                    tokio::time::sleep(PROGRESS_EVERY).await;
                }
            };
            // Ctrl-C drops the statement's future: its stream, and with it its lease.
            tokio::select! {
                result = work => result,
                () = interrupt::wait() => Err(cancelled()),
                () = progress => unreachable!("the progress line never ends"),
            }
        });
        if drawn.get() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        result
    }

    /// This session's place at the node's GPU lease: `holding GPU 0,1`, `waiting for the GPU
    /// lease (2 ahead)`, or `None` when it neither holds nor waits.
    fn lease_state(&self) -> Option<String> {
        Some(match self.session.gpu_lease_place()? {
            LeasePlace::Holding { devices } => {
                let gpus: Vec<String> = (0..devices).map(|i| i.to_string()).collect();
                format!("holding GPU {}", gpus.join(","))
            }
            // Our turn, but another process holds a device (its lock).
            LeasePlace::Waiting {
                blocked_on: Some(device),
                ..
            } => format!("waiting for the GPU lease ({device} is held by another process)"),
            LeasePlace::Waiting { ahead, .. } => {
                format!("waiting for the GPU lease ({ahead} ahead)")
            }
        })
    }

    /// Prints a result where results go, then (with `elapsed`) the timing lines on standard
    /// output.
    fn print(
        &self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
        elapsed: Option<Duration>,
    ) -> Result<(), CliError> {
        let target = self.output.borrow().clone();
        let written = match &target {
            Some(path) => self.print_to_file(path, schema, batches),
            None => {
                let mut out = Stdout {
                    out: std::io::stdout().lock(),
                    closed: false,
                };
                let written = self.render(schema, batches, &mut out);
                match written {
                    Err(_) if out.closed => return Err(CliError::OutputClosed),
                    other => other,
                }
            }
        };
        written.map_err(CliError::Output)?;
        if let Some(elapsed) = elapsed {
            // DDL and SET have no columns, and no row count to speak of.
            let rows = (!schema.fields().is_empty())
                .then(|| batches.iter().map(RecordBatch::num_rows).sum());
            let mut out = Stdout {
                out: std::io::stdout().lock(),
                closed: false,
            };
            let done = out
                .write_all(timing_lines(rows, elapsed).as_bytes())
                .and_then(|()| out.flush());
            match done {
                Err(_) if out.closed => return Err(CliError::OutputClosed),
                Err(e) => return Err(CliError::Output(e.to_string())),
                Ok(()) => {}
            }
        }
        Ok(())
    }

    /// Appends a result to `path` (a Parquet file is written anew with each result that has
    /// columns: it holds the last).
    fn print_to_file(
        &self,
        path: &Path,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<(), String> {
        if schema.fields().is_empty() {
            return Ok(());
        }
        let file = if self.format == OutputFormat::Parquet {
            std::fs::File::create(path)
        } else {
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
        }
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        self.render(schema, batches, &mut out)
    }

    /// Writes a result in the shell's format (expanded display for the table format under `\x`).
    fn render(
        &self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
        out: &mut dyn Write,
    ) -> Result<(), String> {
        let written = if self.expanded.get() && self.format == OutputFormat::Table {
            format::write_expanded(schema, batches, out)
        } else {
            format::write_result(self.format, schema, batches, out)
        };
        written
            .map_err(|e| e.to_string())
            .and_then(|()| out.flush().map_err(|e| e.to_string()))
    }
}

/// The progress line: `… 3.2 s · 1,200 rows · waiting for the GPU lease (2 ahead)`.
fn progress_line(elapsed: Duration, rows: usize, lease: Option<&str>) -> String {
    let mut line = format!(
        "… {:.1} s · {} row{}",
        elapsed.as_secs_f64(),
        grouped(rows),
        if rows == 1 { "" } else { "s" }
    );
    if let Some(lease) = lease {
        line.push_str(" · ");
        line.push_str(lease);
    }
    line
}

/// `n` with a `,` between groups of three digits.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn cancelled() -> EngineError {
    EngineError::Cancelled {
        reason: "interrupted by Ctrl-C (SIGINT)".to_string(),
    }
}

/// Standard output that notes when its reader has gone away (`accelsql … | head`).
struct Stdout<'a> {
    out: std::io::StdoutLock<'a>,
    closed: bool,
}

impl Stdout<'_> {
    fn note<T>(&mut self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result {
            self.closed |= e.kind() == std::io::ErrorKind::BrokenPipe;
        }
        result
    }
}

impl Write for Stdout<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let result = self.out.write(buf);
        self.note(result)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.out.flush();
        self.note(result)
    }
}

/// `--timing`'s lines: `3 row(s)` (for a result with columns) and `Time: 12.345 ms`.
fn timing_lines(rows: Option<usize>, elapsed: Duration) -> String {
    let rows = rows.map(|n| format!("{n} row(s)\n")).unwrap_or_default();
    format!("{rows}Time: {:.3} ms\n", elapsed.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_says_time_rows_and_the_lease() {
        assert_eq!(
            progress_line(
                Duration::from_millis(3_240),
                1_234_567,
                Some("holding GPU 0,1")
            ),
            "… 3.2 s · 1,234,567 rows · holding GPU 0,1"
        );
        assert_eq!(
            progress_line(Duration::from_secs(2), 1, None),
            "… 2.0 s · 1 row"
        );
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
    }

    #[test]
    fn timing_shows_rows_and_milliseconds() {
        assert_eq!(
            timing_lines(Some(3), Duration::from_micros(12_345)),
            "3 row(s)\nTime: 12.345 ms\n"
        );
        assert_eq!(
            timing_lines(None, Duration::from_micros(500)),
            "Time: 0.500 ms\n"
        );
    }
}
