//! Runs accelsql's own sqllogictest suites (`sql-tests/slt`); any failing record fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use accelsql_sql_tests::discover;
use accelsql_sql_tests::runner::{RunOptions, Summary, run_files};

#[test]
fn accelsql_suites_pass() {
    let selection = discover::select(&[discover::suite_dir()], false).unwrap();
    assert!(
        !selection.files.is_empty(),
        "no .slt files in {}",
        discover::suite_dir().display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let reports = runtime.block_on(run_files(selection.files, &RunOptions::default(), |r| {
        println!("{r}")
    }));
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(ToString::to_string)
        .collect();
    let summary = Summary::of(&reports, selection.excluded.len());
    assert!(failed.is_empty(), "{summary}\n\n{}", failed.join("\n"));
    println!("{summary}");
}
