//! A short fuzz run and a short soak, as part of the test suite (longer runs: `accelsql-fuzz`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::time::Duration;

use accelsql_sql_tests::fuzz::soak::{self, SoakConfig};
use accelsql_sql_tests::fuzz::{self, FuzzConfig};

/// The soak counts and kills this process's Python workers: the two tests must not overlap.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .build()
        .unwrap()
}

/// Runs `work` on a thread with a statement's stack (`block_on` polls on the calling thread),
/// as the shell and servers do.
fn on_statement_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .spawn(work)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_short_fuzz_run_finds_nothing() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let config = FuzzConfig {
        seed: 20261123,
        rounds: Some(1000),
        duration: Some(Duration::from_secs(90)),
        ..FuzzConfig::default()
    };
    let report = on_statement_stack(move || runtime().block_on(fuzz::run(&config))).unwrap();
    println!("{report}");
    assert!(report.findings.is_empty(), "{report}");
    // Every target ran, and the inputs reached errors of several kinds.
    for target in fuzz::TARGETS {
        assert!(
            report.executions.get(target.name).copied().unwrap_or(0) > 0,
            "{}",
            target.name
        );
    }
    assert!(report.codes.len() >= 4, "{report}");
}

#[test]
fn a_short_soak_ends_clean() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let config = SoakConfig {
        sessions: 16,
        duration: Duration::from_secs(20),
        seed: 7,
    };
    let report = on_statement_stack(move || runtime().block_on(soak::run(&config))).unwrap();
    println!("{report}");
    assert!(report.problems.is_empty(), "{report}");
    assert!(report.statements > 0 && report.kills > 0, "{report}");
}
