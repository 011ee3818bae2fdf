//! The `accelsql-slt` command: runs sqllogictest files against accelsql and reports each file and
//! a summary (its binary, src/bin/accelsql-slt.rs, only calls [`main`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::discover;
use crate::runner::{RunOptions, Summary, run_files};
use clap::Parser;

/// Runs `.slt` files against accelsql; exits non-zero when a record fails.
///
/// Files under `upstream/datafusion-<version>/` run as upstream DataFusion parity files (see
/// sql-tests/upstream/README.md); all others as accelsql suites (see sql-tests/README.md).
#[derive(Debug, Parser)]
#[command(name = "accelsql-slt", version)]
struct Cli {
    /// `.slt` files, or folders searched recursively for them [default: sql-tests/slt]
    paths: Vec<PathBuf>,

    /// Run upstream DataFusion's files (sql-tests/upstream/datafusion-55.2.0), besides any PATHs
    #[arg(long)]
    upstream: bool,

    /// Also run the files an excluded.txt lists
    #[arg(long)]
    include_excluded: bool,

    /// Files run at the same time [default: number of cores]
    #[arg(long)]
    threads: Option<usize>,

    /// Fail a file still running after this many seconds
    #[arg(long, default_value_t = 600)]
    timeout: u64,

    /// Show at most N failing records per file
    #[arg(long, value_name = "N", default_value_t = 10)]
    max_failures: usize,

    /// Print only failing files and the summary
    #[arg(long, short)]
    quiet: bool,

    /// Also print the N slowest files
    #[arg(long, value_name = "N")]
    slowest: Option<usize>,
}

/// The command: parses the arguments, runs the files, prints the summary.
pub fn main() -> ExitCode {
    // `accelsql-slt | head`: end quietly when the reader goes away, as command-line tools do,
    // instead of panicking in println!.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let mut paths = cli.paths.clone();
    if cli.upstream {
        paths.push(discover::upstream_dir());
    }
    if paths.is_empty() {
        paths.push(discover::suite_dir());
    }
    let selection = match discover::select(&paths, cli.include_excluded) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("accelsql-slt: {e}");
            return ExitCode::from(2);
        }
    };
    if selection.files.is_empty() {
        eprintln!("accelsql-slt: no .slt files under {paths:?}");
        return ExitCode::from(2);
    }
    let mut options = RunOptions {
        file_timeout: Duration::from_secs(cli.timeout),
        max_failures_shown: cli.max_failures,
        ..RunOptions::default()
    };
    if let Some(threads) = cli.threads {
        options.threads = threads.max(1);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("accelsql-slt: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let quiet = cli.quiet;
    let reports = runtime.block_on(run_files(selection.files, &options, |report| {
        if !quiet || !report.passed() {
            println!("{report}");
        }
    }));

    if let Some(n) = cli.slowest {
        let mut by_time: Vec<_> = reports.iter().collect();
        by_time.sort_by_key(|r| std::cmp::Reverse(r.elapsed));
        println!("\nslowest files:");
        for r in by_time.into_iter().take(n) {
            println!("  {:>7.1}s  {}", r.elapsed.as_secs_f64(), r.path.display());
        }
    }
    let failed: Vec<_> = reports.iter().filter(|r| !r.passed()).collect();
    if !failed.is_empty() {
        println!("\nfailed files:");
        for r in &failed {
            println!("  {}", r.path.display());
        }
    }
    let summary = Summary::of(&reports, selection.excluded.len());
    println!("\n{summary} in {:.1}s", start.elapsed().as_secs_f64());
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
