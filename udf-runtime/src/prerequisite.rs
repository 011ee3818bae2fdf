//! Tests whose prerequisite (NVRTC, pandas, numpy) is missing: a visible skip on a developer's
//! machine, a failure in CI, so that a green CI run means every test ran.

/// Whether test prerequisites are required: the `CI` variable is set to anything but empty,
/// `0` or `false` (`.ci/run` sets it; so do most CI services).
pub fn prerequisites_required() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// Reports that `test` cannot run because `missing` is: prints `SKIPPED <test>: <missing>`
/// straight to stderr (past the test harness's capture, so the skip shows), for the test to
/// return.
///
/// # Panics
///
/// Under CI ([`prerequisites_required`]): there the README's test command installs every
/// prerequisite, so a missing one is a broken run, not a skip.
pub fn skip_test(test: &str, missing: &str) {
    if prerequisites_required() {
        panic!("CI is set, so {test} must run, but {missing} (scripts/test-all.sh installs it)");
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {missing}");
}
