//! Runs `.slt` files: a fresh engine and session per file, every record run (a failure does not
//! stop the file), and a report per file with each failing record's location.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accelsql_engine::{Engine, EngineOptions, SchedulerConfig, testing};
use futures::StreamExt;
use sqllogictest::{Condition, Record, Runner, parse_file, strict_column_validator};

use crate::database::AccelsqlDb;
use crate::directives::Directives;
use crate::flavor::Flavor;
use crate::upstream::differences::Differences;
use crate::upstream::fixtures;
use crate::upstream::output::DFColumnType;
use crate::upstream::validator::{df_value_validator, value_normalizer};

/// How a run goes.
#[derive(Clone)]
pub struct RunOptions {
    /// Files run at the same time.
    pub threads: usize,
    /// A file still running after this long fails.
    pub file_timeout: Duration,
    /// At most this many failing records are reported per file (the rest are counted).
    pub max_failures_shown: usize,
    /// Changes each file's engine options before the engine is made: e.g. a cluster client's
    /// [`engine_options`](https://docs.rs/accelsql-cluster), so that every file runs through a
    /// cluster.
    pub engine_hook: Option<EngineHook>,
    /// A label besides the flavor's, for `skipif`/`onlyif` (`cluster` for a cluster run).
    pub extra_label: Option<String>,
    /// Skip the files that say `# accelsql: single_node = true` (a run through a cluster).
    pub skip_single_node: bool,
}

/// See [`RunOptions::engine_hook`].
pub type EngineHook = std::sync::Arc<dyn Fn(EngineOptions) -> EngineOptions + Send + Sync>;

impl fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("threads", &self.threads)
            .field("file_timeout", &self.file_timeout)
            .field("max_failures_shown", &self.max_failures_shown)
            .field("engine_hook", &self.engine_hook.is_some())
            .field("extra_label", &self.extra_label)
            .field("skip_single_node", &self.skip_single_node)
            .finish()
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            threads: std::thread::available_parallelism().map_or(1, usize::from),
            file_timeout: Duration::from_secs(600),
            max_failures_shown: 10,
            engine_hook: None,
            extra_label: None,
            skip_single_node: false,
        }
    }
}

/// What running one file gave.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// The rules it ran under.
    pub flavor: Flavor,
    /// Statement and query records run (those not skipped by `onlyif`/`skipif`).
    pub records: usize,
    /// Records that failed.
    pub failed_records: usize,
    /// Records that `differences.txt` lists (accelsql changes their result on purpose) and that
    /// failed, as listed: they are not failures.
    pub differences: usize,
    /// The first failing records' errors, locations included (see
    /// [`RunOptions::max_failures_shown`]); or why the file could not run.
    pub failures: Vec<String>,
    /// How long it took.
    pub elapsed: Duration,
}

impl FileReport {
    /// Whether every record passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    fn failed(path: &Path, flavor: Flavor, why: String, start: Instant) -> Self {
        Self {
            path: path.to_path_buf(),
            flavor,
            records: 0,
            failed_records: 0,
            differences: 0,
            failures: vec![why],
            elapsed: start.elapsed(),
        }
    }
}

impl fmt::Display for FileReport {
    /// `ok   path (N records, 1.2s)`, or `FAIL path …` followed by the failures.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        let differences = match self.differences {
            0 => String::new(),
            n => format!(", {n} listed differences"),
        };
        if self.passed() {
            return write!(
                f,
                "ok   {} ({} records{differences}, {secs:.1}s)",
                self.path.display(),
                self.records
            );
        }
        if self.failed_records == 0 {
            writeln!(
                f,
                "FAIL {} (could not run, {secs:.1}s)",
                self.path.display()
            )?;
        } else {
            writeln!(
                f,
                "FAIL {} ({} of {} records failed, {secs:.1}s)",
                self.path.display(),
                self.failed_records,
                self.records
            )?;
        }
        for (i, failure) in self.failures.iter().enumerate() {
            writeln!(
                f,
                "  {}. {}",
                i + 1,
                failure.trim_end().replace('\n', "\n     ")
            )?;
        }
        Ok(())
    }
}

/// The engine a file of `flavor` runs on.
fn engine_for(
    path: &Path,
    flavor: Flavor,
    directives: &Directives,
    hook: Option<&EngineHook>,
    data_dir: Option<&Path>,
) -> Result<Engine, String> {
    let config = match flavor {
        // Parity files need no devices; do not probe NVML for each of them.
        Flavor::Upstream => SchedulerConfig::default().with_simulated_gpus(0),
        // A file that names its device count is hermetic: no environment variable changes it
        // (not CUDA_VISIBLE_DEVICES, nor a lock folder shared with other files running at once).
        Flavor::Accelsql => match directives.simulated_gpus {
            Some(n) => SchedulerConfig::default().with_simulated_gpus(n),
            None => SchedulerConfig::from_env().map_err(|e| e.to_string())?,
        },
    };
    let config = match directives.gpu_sharing {
        Some(sharing) => config.with_gpu_sharing(sharing, None),
        None => config,
    };
    let mut options = EngineOptions {
        scheduler: config,
        url_tables: directives.url_tables
            || (flavor == Flavor::Upstream && fixtures::needs_url_tables(path)),
        // CREATE USER's hashes: the default's 600,000 PBKDF2 rounds take seconds in a debug
        // build; what the suites check does not depend on the count.
        password_rounds: 10_000,
        data_dir: data_dir.map(Path::to_path_buf),
        ..EngineOptions::default()
    };
    if let Some(hook) = hook {
        options = hook(options);
    }
    let engine = Engine::with_options(options).map_err(|e| e.to_string())?;
    if flavor == Flavor::Accelsql {
        testing::register_fixtures(&engine).map_err(|e| e.to_string())?;
    }
    Ok(engine)
}

/// A file's own data directory (`# accelsql: data_dir = true`), removed when dropped.
struct FileDataDir(std::path::PathBuf);

impl FileDataDir {
    /// A new folder under the system's temporary folder, named after the file and this process.
    fn new(file: &Path) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!("accelsql-slt-{stem}-{}-{n}", std::process::id())))
    }
}

impl Drop for FileDataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether a `skipif LABEL` skips the record (an `onlyif` for another label does not: the
/// flavor's label decides those).
fn skipped_by_label(conditions: &[Condition], label: &str) -> bool {
    conditions
        .iter()
        .any(|c| matches!(c, Condition::SkipIf { label: l } if l == label))
}

/// The file and line where a statement or query record starts.
fn record_loc(record: &Record<DFColumnType>) -> Option<(&str, u32)> {
    match record {
        Record::Statement { loc, .. } | Record::Query { loc, .. } => Some((loc.file(), loc.line())),
        _ => None,
    }
}

/// Where `record` starts, as `file:line`, for a statement or query.
fn record_location(record: &Record<DFColumnType>) -> Option<String> {
    match record {
        Record::Statement { loc, .. } | Record::Query { loc, .. } => Some(loc.to_string()),
        _ => None,
    }
}

fn skipped(conditions: &[Condition], label: &str) -> bool {
    conditions.iter().any(|c| match c {
        Condition::OnlyIf { label: l } => l != label,
        Condition::SkipIf { label: l } => l == label,
    })
}

/// Runs one file: a fresh engine (devices from the file's `# accelsql:` directive, else the
/// environment), a fresh session per connection, every record to the end or to `halt`.
pub async fn run_file(path: &Path, options: &RunOptions) -> FileReport {
    run_file_tracked(path, options, &Mutex::new(String::new())).await
}

/// [`run_file`], keeping in `current` where the record being run starts (`file:line`), so that
/// a file that times out says which record hung.
async fn run_file_tracked(
    path: &Path,
    options: &RunOptions,
    current: &Mutex<String>,
) -> FileReport {
    let start = Instant::now();
    let flavor = Flavor::of_path(path);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return FileReport::failed(path, flavor, format!("cannot read: {e}"), start),
    };
    let directives = match Directives::parse(&text) {
        Ok(d) => d,
        Err(e) => return FileReport::failed(path, flavor, format!("bad directive: {e}"), start),
    };
    if directives.single_node && options.skip_single_node {
        return FileReport {
            path: path.to_path_buf(),
            flavor,
            records: 0,
            failed_records: 0,
            differences: 0,
            failures: Vec::new(),
            elapsed: start.elapsed(),
        };
    }
    // `data_dir = true`: a fresh data directory, removed when the file ends.
    let data_dir = directives.data_dir.then(|| FileDataDir::new(path));
    let engine = match engine_for(
        path,
        flavor,
        &directives,
        options.engine_hook.as_ref(),
        data_dir.as_ref().map(|d| d.0.as_path()),
    ) {
        Ok(engine) => engine,
        Err(e) => return FileReport::failed(path, flavor, format!("no engine: {e}"), start),
    };
    let records = match parse_file::<DFColumnType>(path) {
        Ok(records) => records,
        Err(e) => return FileReport::failed(path, flavor, format!("cannot parse: {e}"), start),
    };
    // Upstream's files write under test_files/scratch/<stem>/, empty when the file starts.
    let scratch = match flavor {
        Flavor::Upstream => match crate::workspace::setup(path) {
            Ok(dir) => Some(dir),
            Err(e) => {
                return FileReport::failed(path, flavor, format!("no scratch folder: {e}"), start);
            }
        },
        Flavor::Accelsql => None,
    };
    let differences = match flavor {
        Flavor::Upstream => match Differences::for_file(path) {
            Ok(d) => d,
            Err(e) => return FileReport::failed(path, flavor, e.to_string(), start),
        },
        Flavor::Accelsql => Differences::default(),
    };
    let fixture_path = path.to_path_buf();
    let mut runner = Runner::new(move || {
        let session = engine.session();
        let path = fixture_path.clone();
        async move {
            let db = AccelsqlDb::connect(session, flavor).await?;
            if flavor == Flavor::Upstream {
                let dir = fixtures::fixture_dir(&path);
                fixtures::register(&path, db.session().context(), &dir)
                    .await
                    .map_err(|e| crate::database::SltError::harness(format!("fixture: {e}")))?;
            }
            Ok(db)
        }
    });
    runner.add_label(flavor.label());
    if let Some(label) = &options.extra_label {
        runner.add_label(label);
    }
    runner.with_column_validator(strict_column_validator);
    runner.with_normalizer(value_normalizer);
    runner.with_validator(df_value_validator);

    let mut report = FileReport {
        path: path.to_path_buf(),
        flavor,
        records: 0,
        failed_records: 0,
        differences: 0,
        failures: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let mut listed_seen = Vec::new();
    for record in records {
        match &record {
            Record::Halt { .. } => break,
            Record::Statement { conditions, .. } | Record::Query { conditions, .. }
                if !skipped(conditions, flavor.label())
                    && options
                        .extra_label
                        .as_deref()
                        .is_none_or(|l| !skipped_by_label(conditions, l)) =>
            {
                report.records += 1;
            }
            _ => {}
        }
        if let Some(location) = record_location(&record) {
            *current.lock().unwrap_or_else(|e| e.into_inner()) = location;
        }
        let listed = record_loc(&record).and_then(|(file, line)| {
            let reason = differences.reason(Path::new(file), line)?;
            listed_seen.push((file.to_string(), line));
            Some((format!("{file}:{line}"), reason.to_string()))
        });
        let result = runner.run_async(record).await;
        let failure = match (result, listed) {
            (Err(_), Some(_)) => {
                report.differences += 1;
                None
            }
            (Ok(_), Some((at, reason))) => Some(format!(
                "{at} passes now, but differences.txt lists it ({reason}): remove its line"
            )),
            (Err(e), None) => Some(e.to_string()),
            (Ok(_), None) => None,
        };
        if let Some(failure) = failure {
            report.failed_records += 1;
            if report.failures.len() < options.max_failures_shown {
                report.failures.push(failure);
            }
        }
    }
    for line in differences.lines_of(path) {
        let seen = listed_seen.iter().any(|(file, at)| {
            *at == line && differences.key(Path::new(file)) == differences.key(path)
        });
        if !seen {
            report.failed_records += 1;
            report.failures.push(format!(
                "differences.txt lists {}:{line}, where no record of this file starts",
                path.display()
            ));
        }
    }
    if report.failed_records > report.failures.len() {
        report.failures.push(format!(
            "… and {} more failing records",
            report.failed_records - report.failures.len()
        ));
    }
    runner.shutdown_async().await;
    if let Some(dir) = scratch {
        // Best effort: a leftover folder is emptied by the next run of the file.
        let _ = std::fs::remove_dir_all(dir);
    }
    report.elapsed = start.elapsed();
    report
}

/// Runs `files`, `options.threads` at a time, each in its own task (a panic or a timeout fails
/// that file only); calls `on_report` with each report as its file finishes, and returns the
/// reports in the order of `files`.
///
/// The biggest files start first and a slot is refilled as soon as any file ends, so one slow
/// file does not hold the others back (the longest-first rule keeps the run near the total work
/// divided by the threads).
pub async fn run_files(
    files: Vec<PathBuf>,
    options: &RunOptions,
    mut on_report: impl FnMut(&FileReport),
) -> Vec<FileReport> {
    let mut order: Vec<(usize, PathBuf)> = files.into_iter().enumerate().collect();
    // Longest first, judged by size: a file's run time grows with its records.
    order.sort_by_key(|(_, path)| {
        std::cmp::Reverse(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
    });
    let count = order.len();
    let tasks = order.into_iter().map(|(index, path)| {
        let options = options.clone();
        let report = async move {
            let start = Instant::now();
            let flavor = Flavor::of_path(&path);
            let task_path = path.clone();
            let timeout = options.file_timeout;
            let current = Arc::new(Mutex::new(String::new()));
            let tracked = Arc::clone(&current);
            let task = tokio::spawn(async move {
                tokio::time::timeout(
                    options.file_timeout,
                    run_file_tracked(&task_path, &options, &tracked),
                )
                .await
            });
            match task.await {
                Ok(Ok(report)) => report,
                Ok(Err(_)) => {
                    let at = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    FileReport::failed(
                        &path,
                        flavor,
                        format!(
                            "timed out after {timeout:?} in the record at {at} (a statement hung?)"
                        ),
                        start,
                    )
                }
                Err(e) => FileReport::failed(&path, flavor, format!("panicked: {e}"), start),
            }
        };
        async move { (index, report.await) }
    });
    let mut stream = futures::stream::iter(tasks).buffer_unordered(options.threads.max(1));
    let mut reports: Vec<Option<FileReport>> = (0..count).map(|_| None).collect();
    while let Some((index, report)) = stream.next().await {
        on_report(&report);
        reports[index] = Some(report);
    }
    reports.into_iter().flatten().collect()
}

/// Totals of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Files that passed.
    pub passed: usize,
    /// Files with a failing record.
    pub failed: usize,
    /// Files an `excluded.txt` left out.
    pub excluded: usize,
    /// Records run.
    pub records: usize,
    /// Records that failed as `differences.txt` lists them.
    pub differences: usize,
}

impl Summary {
    /// Totals of `reports`, with `excluded` files left out.
    pub fn of(reports: &[FileReport], excluded: usize) -> Self {
        Self {
            passed: reports.iter().filter(|r| r.passed()).count(),
            failed: reports.iter().filter(|r| !r.passed()).count(),
            excluded,
            records: reports.iter().map(|r| r.records).sum(),
            differences: reports.iter().map(|r| r.differences).sum(),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} files passed, {} failed, {} excluded; {} records",
            self.passed, self.failed, self.excluded, self.records
        )?;
        if self.differences > 0 {
            write!(f, " ({} listed differences)", self.differences)?;
        }
        Ok(())
    }
}
