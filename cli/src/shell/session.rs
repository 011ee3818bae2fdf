//! The shell's session: one engine session that runs statements one at a time and prints each
//! result (`Shell`), whatever the input mode.

use std::io::Write;
use std::time::{Duration, Instant};

use accelsql_engine::splitter::split_statements;
use accelsql_engine::{Engine, EngineError, EngineOptions, SchedulerConfig, Session};
use arrow::array::RecordBatch;
use futures::TryStreamExt;
use tokio::runtime::Runtime;

use super::args::ShellArgs;
use super::{OutputFormat, format, interrupt};
use crate::error::{CliError, StatementLocation};

/// One session and how to print its results: what every input mode runs statements through.
pub(crate) struct Shell {
    runtime: Runtime,
    session: Session,
    format: OutputFormat,
    timing: bool,
}

impl Shell {
    /// Starts the async runtime and the engine (devices from `--simulated-gpus`, else the
    /// environment) and opens a session: SYS's, or `--user`'s.
    pub(super) fn start(args: &ShellArgs) -> Result<Self, CliError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
        let engine = runtime.block_on(async {
            let mut scheduler = SchedulerConfig::from_env()?;
            if let Some(n) = args.simulated_gpus {
                scheduler = scheduler.with_simulated_gpus(n);
            }
            let options = EngineOptions {
                scheduler,
                data_dir: args.data_dir.clone(),
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
        Ok(Self {
            runtime,
            session,
            format: args.format,
            timing: args.timing,
        })
    }

    /// The session's engine (for the prompt's banner).
    pub(crate) fn engine(&self) -> &Engine {
        self.session.engine()
    }

    /// Runs the statements of `text` in order, stopping at the first that fails. With a script
    /// name, the error says where the statement starts: `ERROR at NAME:LINE (statement N): …`.
    pub(crate) fn run_script(&self, text: &str, script: Option<&str>) -> Result<(), CliError> {
        for statement in split_statements(text) {
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
                    line: statement.line,
                    index: statement.index,
                }),
                None => e,
            })?;
        }
        Ok(())
    }

    /// Runs one statement and prints its result (and, with `--timing`, its row count and time).
    pub(crate) fn execute(&self, sql: &str) -> Result<(), CliError> {
        let started = Instant::now();
        let (schema, batches) = self
            .runtime
            .block_on(async {
                let work = async {
                    let stream = self.session.sql_stream(sql).await?;
                    let schema = stream.schema();
                    let batches: Vec<RecordBatch> = stream.try_collect().await?;
                    Ok::<_, EngineError>((schema, batches))
                };
                // Ctrl-C drops the statement's future: its stream, and with it its lease.
                tokio::select! {
                    result = work => result,
                    () = interrupt::wait() => Err(cancelled()),
                }
            })
            .map_err(CliError::statement)?;
        let elapsed = started.elapsed();
        let mut out = Stdout {
            out: std::io::stdout().lock(),
            closed: false,
        };
        let written = format::write_result(self.format, &schema, &batches, &mut out)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                if self.timing {
                    // DDL and SET have no columns, and no row count to speak of.
                    let rows = (!schema.fields().is_empty())
                        .then(|| batches.iter().map(RecordBatch::num_rows).sum());
                    out.write_all(timing_lines(rows, elapsed).as_bytes())
                        .map_err(|e| e.to_string())?;
                }
                out.flush().map_err(|e| e.to_string())
            });
        match written {
            Ok(()) => Ok(()),
            Err(_) if out.closed => Err(CliError::OutputClosed),
            Err(message) => Err(CliError::Output(message)),
        }
    }
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
