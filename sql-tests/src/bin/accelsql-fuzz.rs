//! `accelsql-fuzz`: the fuzzer and the soak test, for runs longer than the test suite's.
//!
//! ```text
//! cargo run -p accelsql-sql-tests --release --bin accelsql-fuzz -- fuzz --minutes 30
//! cargo run -p accelsql-sql-tests --release --bin accelsql-fuzz -- soak --minutes 5 --sessions 16
//! ```

use std::process::ExitCode;
use std::time::Duration;

use accelsql_sql_tests::fuzz::soak::{self, SoakConfig};
use accelsql_sql_tests::fuzz::{self, FuzzConfig};
use clap::{Parser, Subcommand};

/// Fuzzes accelsql's parsers and generated SQL, or soaks it under chaos; exits 1 on a finding.
#[derive(Debug, Parser)]
#[command(name = "accelsql-fuzz", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Mutated inputs for every parser and grammar-generated SQL: a panic, a hang, a leaked lease
    /// or an uncoded error is a finding.
    Fuzz {
        /// Run this many minutes.
        #[arg(long, default_value_t = 1.0)]
        minutes: f64,
        /// The random seed (the same seed replays the same inputs).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Generated SQL does not call Python scripts (faster).
        #[arg(long)]
        no_python: bool,
    },
    /// Sessions running scripts and Rust UDFs while workers are killed and statements cancelled.
    Soak {
        /// Run this many minutes.
        #[arg(long, default_value_t = 3.0)]
        minutes: f64,
        /// Sessions at once.
        #[arg(long, default_value_t = 16)]
        sessions: usize,
        /// The random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Statements are polled on this thread (`block_on`) and on the runtime's: give both the
    // stack a statement may need.
    let worker = std::thread::Builder::new()
        .stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .spawn(move || run(cli));
    match worker.map(|w| w.join()) {
        Ok(Ok(code)) => code,
        _ => ExitCode::FAILURE,
    }
}

/// Runs what the command line asks.
fn run(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("accelsql-fuzz: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let minutes = |m: f64| Duration::from_secs_f64((m * 60.0).max(0.0));
    let passed = match cli.command {
        Command::Fuzz {
            minutes: m,
            seed,
            no_python,
        } => {
            let config = FuzzConfig {
                seed,
                rounds: None,
                duration: Some(minutes(m)),
                python: !no_python,
                ..FuzzConfig::default()
            };
            match runtime.block_on(fuzz::run(&config)) {
                Ok(report) => {
                    print!("{report}");
                    report.findings.is_empty()
                }
                Err(e) => {
                    eprintln!("accelsql-fuzz: {e}");
                    false
                }
            }
        }
        Command::Soak {
            minutes: m,
            sessions,
            seed,
        } => {
            let config = SoakConfig {
                sessions,
                duration: minutes(m),
                seed,
            };
            match runtime.block_on(soak::run(&config)) {
                Ok(report) => {
                    print!("{report}");
                    report.problems.is_empty()
                }
                Err(e) => {
                    eprintln!("accelsql-fuzz: {e}");
                    false
                }
            }
        }
    };
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
