//! A fuzzer for every parser that takes user text or bytes, and for SQL generated from a grammar,
//! on stable Rust: seeded mutations and generated statements, each checked for the property
//! "a result or a clear coded error — never a panic, a hang or a leaked GPU lease".
//!
//! `accelsql-fuzz fuzz --minutes 30` runs it long; `sql-tests/tests/fuzz.rs` runs it briefly as
//! part of the test suite. Findings are reported with their input, to become regression tests.

pub mod grammar;
pub mod mutate;
pub mod soak;
mod targets;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accelsql_engine::{Engine, EngineError, EngineOptions, SchedulerConfig, Session, testing};
use futures::FutureExt;

use self::mutate::Rng;
pub use self::targets::TARGETS;

/// How long a fuzz run goes on and what it covers.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// The random seed: the same seed gives the same inputs.
    pub seed: u64,
    /// Stop after this many rounds (one input per target each)…
    pub rounds: Option<u64>,
    /// …or after this long, whichever comes first.
    pub duration: Option<Duration>,
    /// Whether generated SQL calls Python scripts (slower: each call starts a worker).
    pub python: bool,
    /// A statement still running after this long is a hang.
    pub statement_timeout: Duration,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            rounds: Some(200),
            duration: None,
            python: true,
            statement_timeout: Duration::from_secs(60),
        }
    }
}

/// What went wrong with one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindingKind {
    /// A panic (in our code or DataFusion's).
    Panic,
    /// Still running after the statement timeout.
    Hang,
    /// The GPU lease was still held, or waited for, after the statement ended.
    LeakedLease,
    /// An error without a 5-character code, or with the internal-error code XX000.
    UncodedError,
}

/// One input that broke the property.
#[derive(Debug, Clone)]
pub struct Finding {
    /// What broke.
    pub kind: FindingKind,
    /// The target that was fed the input.
    pub target: &'static str,
    /// The input (text, or bytes written as escaped text).
    pub input: String,
    /// The panic message or error.
    pub message: String,
}

/// What a fuzz run did and found.
#[derive(Debug, Default)]
pub struct FuzzReport {
    /// Inputs run, by target.
    pub executions: BTreeMap<&'static str, u64>,
    /// Error codes seen, by code (a sign of what the inputs reached).
    pub codes: BTreeMap<String, u64>,
    /// Inputs that broke the property.
    pub findings: Vec<Finding>,
    /// Internal errors DataFusion itself reports as its own bug ("likely caused by a bug in
    /// DataFusion's code"): coded (XX000), not accelsql's, listed once per message.
    pub upstream: BTreeMap<String, String>,
    /// How long it ran.
    pub elapsed: Duration,
}

impl FuzzReport {
    /// Inputs run over all targets.
    pub fn total(&self) -> u64 {
        self.executions.values().sum()
    }
}

impl fmt::Display for FuzzReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fuzz: {} executions in {:.1} s, {} finding(s)",
            self.total(),
            self.elapsed.as_secs_f64(),
            self.findings.len()
        )?;
        for (target, n) in &self.executions {
            writeln!(f, "  {target:<18} {n}")?;
        }
        let codes: Vec<String> = self.codes.iter().map(|(c, n)| format!("{c}×{n}")).collect();
        writeln!(f, "  error codes seen: {}", codes.join(" "))?;
        for (message, input) in &self.upstream {
            writeln!(
                f,
                "UPSTREAM (DataFusion's own internal error): {message}\n  input: {input:?}"
            )?;
        }
        for finding in &self.findings {
            writeln!(
                f,
                "FINDING {:?} in {}: {}\n  input: {:?}",
                finding.kind, finding.target, finding.message, finding.input
            )?;
        }
        Ok(())
    }
}

/// The engine the fuzzer's SQL runs on: two simulated GPUs, the test fixtures, files as tables
/// off, and (for the grammar's sessions) restricted, so that no input can touch the host.
pub fn fuzz_engine() -> accelsql_engine::Result<Engine> {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(2),
        ..EngineOptions::default()
    })?;
    testing::register_fixtures(&engine)?;
    Ok(engine)
}

/// The last panic's message, caught by the fuzzer's quiet panic hook.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Runs `work` with panics caught and recorded quietly; `Err(message)` if it panicked.
pub(crate) fn catch<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|_| last_panic())
}

fn last_panic() -> String {
    LAST_PANIC
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| "a panic".to_string())
}

type PanicHook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send>;

/// Installs the quiet panic hook for the fuzzer's lifetime and puts the old one back after.
struct QuietPanics(Option<PanicHook>);

impl QuietPanics {
    fn install() -> Self {
        let old = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(info.to_string());
        }));
        Self(Some(old))
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            std::panic::set_hook(old);
        }
    }
}

/// Checks one statement's outcome: `None` if it kept the property.
pub(crate) fn judge(
    outcome: Result<accelsql_engine::Result<()>, String>,
    engine: &Engine,
    report: &mut FuzzReport,
    input: &str,
) -> Option<(FindingKind, String)> {
    let finding = match outcome {
        Err(panic) => Some((FindingKind::Panic, panic)),
        Ok(Ok(())) => None,
        Ok(Err(e)) => judge_error(&e, report, input),
    };
    if finding.is_some() {
        return finding;
    }
    let queue = engine.lease_queue().snapshot();
    if queue.holder.is_some() || !queue.waiting.is_empty() {
        return Some((
            FindingKind::LeakedLease,
            format!(
                "after the statement: holder {:?}, {} waiting",
                queue.holder,
                queue.waiting.len()
            ),
        ));
    }
    None
}

fn judge_error(
    e: &EngineError,
    report: &mut FuzzReport,
    input: &str,
) -> Option<(FindingKind, String)> {
    let code = e.code();
    *report.codes.entry(code.to_string()).or_default() += 1;
    let message = e.to_string();
    if message.contains("panicked") || matches!(e, EngineError::Internal { .. }) {
        Some((FindingKind::Panic, message))
    } else if code == "XX000" && message.contains("bug in DataFusion's code") {
        let first_line = message.lines().next().unwrap_or_default().to_string();
        report
            .upstream
            .entry(first_line)
            .or_insert_with(|| input.to_string());
        None
    } else if code.len() != 5 || code == "XX000" || !message.starts_with(&format!("[{code}]")) {
        Some((FindingKind::UncodedError, message))
    } else {
        None
    }
}

/// Runs `sql` in `session` to the end, within `timeout`, with panics caught.
pub(crate) async fn run_statement(
    session: &Session,
    sql: &str,
    timeout: Duration,
) -> Result<Result<accelsql_engine::Result<()>, String>, ()> {
    let work = AssertUnwindSafe(async { session.sql(sql).await.map(drop) }).catch_unwind();
    match tokio::time::timeout(timeout, work).await {
        Err(_) => Err(()),
        Ok(Ok(result)) => Ok(Ok(result)),
        Ok(Err(_)) => Ok(Err(last_panic())),
    }
}

/// Runs the fuzzer as `config` says and reports what it found.
pub async fn run(config: &FuzzConfig) -> accelsql_engine::Result<FuzzReport> {
    let _quiet = QuietPanics::install();
    let started = Instant::now();
    let mut rng = Rng::new(config.seed);
    let mut report = FuzzReport::default();
    let engine = fuzz_engine()?;
    let admin = engine.session();
    for sql in grammar::SETUP.iter().chain(grammar::SCRIPTS) {
        admin.sql(sql).await?;
    }
    // Text targets that go through SQL run in their own session (they may change its
    // settings); the grammar's statements in a restricted one that has the table.
    let text_session = engine.session();
    let grammar_session = Arc::new(engine.session());
    for sql in grammar::SETUP {
        grammar_session.sql(sql).await?;
    }
    grammar_session.restrict();
    let mut round = 0u64;
    loop {
        if config.rounds.is_some_and(|n| round >= n)
            || config.duration.is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
        round += 1;
        for target in TARGETS {
            let input = (target.input)(&mut rng);
            let outcome = match &target.run {
                targets::Run::Direct(run) => Ok(catch(|| run(&input))),
                targets::Run::Sql => {
                    run_statement(&text_session, input.text(), config.statement_timeout).await
                }
                targets::Run::Grammar => {
                    let sql = if rng.chance(25) {
                        mutate::mutate(input.text(), &mut rng)
                    } else {
                        input.text().to_string()
                    };
                    let sql = if config.python {
                        sql
                    } else {
                        sql.replace("py_", "no_such_")
                    };
                    let outcome =
                        run_statement(&grammar_session, &sql, config.statement_timeout).await;
                    *report.executions.entry(target.name).or_default() += 1;
                    record(&mut report, target.name, &sql, outcome, &engine);
                    continue;
                }
            };
            *report.executions.entry(target.name).or_default() += 1;
            record(
                &mut report,
                target.name,
                &input.describe(),
                outcome,
                &engine,
            );
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

fn record(
    report: &mut FuzzReport,
    target: &'static str,
    input: &str,
    outcome: Result<Result<accelsql_engine::Result<()>, String>, ()>,
    engine: &Engine,
) {
    let finding = match outcome {
        Err(()) => Some((
            FindingKind::Hang,
            "still running at the statement timeout".to_string(),
        )),
        Ok(outcome) => judge(outcome, engine, report, input),
    };
    if let Some((kind, message)) = finding {
        report.findings.push(Finding {
            kind,
            target,
            input: input.to_string(),
            message,
        });
    }
}
