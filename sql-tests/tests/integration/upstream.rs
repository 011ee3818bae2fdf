//! Upstream parity: runs the `.slt` files of DataFusion 55.2.0 copied into
//! `sql-tests/upstream/datafusion-55.2.0` through accelsql's session (all of them but those
//! `excluded.txt` lists; about four minutes in a debug build on two cores). A file that fails
//! is run again alone once; one that passes then is reported as flaky.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use accelsql_sql_tests::discover::{self, Exclusions};
use accelsql_sql_tests::runner::{RunOptions, Summary, run_files};
use accelsql_sql_tests::upstream::differences::Differences;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn upstream_datafusion_files_pass() {
    let dir = discover::upstream_dir();
    let selection = discover::select(std::slice::from_ref(&dir), false).unwrap();
    assert!(
        selection.files.len() > 100,
        "expected the copied upstream files in {}",
        dir.display()
    );
    let reports = runtime().block_on(run_files(selection.files, &RunOptions::default(), |r| {
        if !r.passed() {
            println!("{r}")
        }
    }));
    // A file that fails is run once more, alone: a few upstream records depend on timing
    // (`aggregate_memory_spill.slt` shares a 1 MB greedy pool among partitions running at
    // once, and failed once in dozens of runs while the files ran side by side). One that
    // passes then is reported as flaky, never silently.
    let again: Vec<_> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.path.clone())
        .collect();
    let retried = runtime().block_on(run_files(again, &RunOptions::default(), |_| {}));
    for r in retried.iter().filter(|r| r.passed()) {
        println!(
            "FLAKY {}: failed beside the other files, passed alone",
            r.path.display()
        );
    }
    let failed: Vec<String> = retried
        .iter()
        .filter(|r| !r.passed())
        .map(ToString::to_string)
        .collect();
    let summary = Summary::of(&reports, selection.excluded.len());
    assert!(failed.is_empty(), "{summary}\n\n{}", failed.join("\n"));
    println!("{summary}");
}

/// A copied file that excluded.txt lists must still fail: when an engine fix makes it pass, this
/// test says so, and its line in excluded.txt should go.
#[test]
fn excluded_copied_files_still_fail() {
    let dir = discover::upstream_dir();
    let exclusions = Exclusions::load(&dir).unwrap().expect("excluded.txt");
    let copied: Vec<_> = exclusions
        .entries
        .keys()
        .map(|relative| dir.join(relative))
        .filter(|path| path.is_file())
        .collect();
    let reports = runtime().block_on(run_files(copied, &RunOptions::default(), |_| {}));
    let passing: Vec<String> = reports
        .iter()
        .filter(|r| r.passed())
        .map(|r| r.path.display().to_string())
        .collect();
    assert!(
        passing.is_empty(),
        "these files pass now; remove them from excluded.txt: {passing:?}"
    );
}

/// Every entry of excluded.txt names an upstream file and gives a reason; outside `spark/`
/// (datafusion-spark's functions, not an accelsql dependency) at most 25 files are left out.
#[test]
fn excluded_txt_is_well_formed() {
    let dir = discover::upstream_dir();
    let exclusions = Exclusions::load(&dir).unwrap().expect("excluded.txt");
    for (path, reason) in &exclusions.entries {
        assert!(path.ends_with(".slt"), "{path}");
        assert!(reason.len() > 10, "{path}: {reason}");
    }
    let spark = exclusions
        .entries
        .keys()
        .filter(|path| path.starts_with("spark/"))
        .count();
    assert!(spark > 200, "the spark/ files are listed: {spark}");
    let others: Vec<&String> = exclusions
        .entries
        .keys()
        .filter(|path| !path.starts_with("spark/"))
        .collect();
    assert!(
        others.len() <= 25,
        "{} files outside spark/ are excluded (at most 25): {others:?}",
        others.len()
    );
}

/// Every record differences.txt lists lies in an upstream file that exists (that the record
/// starts there and still differs, the runner checks when it runs the file).
#[test]
fn differences_txt_is_well_formed() {
    let dir = discover::upstream_dir();
    let differences = Differences::load(&dir).unwrap().expect("differences.txt");
    assert!(!differences.entries.is_empty());
    for (file, line) in differences.entries.keys() {
        assert!(dir.join(file).is_file(), "{file}:{line}: no such file");
    }
}
