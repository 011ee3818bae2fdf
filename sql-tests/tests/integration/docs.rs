//! The book's error-code table against the code: every code an error type of accelsql's crates
//! declares (`pub const NAME: &'static str = "CODE"` in their `error.rs`) is listed in
//! `docs/src/error-codes.md`, so the table cannot drift from the code silently.

use std::path::Path;

/// The codes declared in `file` (relative to the workspace).
fn declared_codes(root: &Path, file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub const ")?;
            let (_, value) = rest.split_once("&'static str = \"")?;
            let code = value.strip_suffix("\";")?;
            (code.len() == 5 && code.chars().all(|c| c.is_ascii_alphanumeric()))
                .then(|| code.to_string())
        })
        .collect()
}

#[test]
fn every_declared_error_code_is_in_the_books_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table = std::fs::read_to_string(root.join("docs/src/error-codes.md")).unwrap();
    let listed = |code: &str| {
        table.lines().any(|l| {
            l.starts_with('|')
                && l.split('|')
                    .nth(1)
                    .is_some_and(|cell| cell.split('/').any(|c| c.trim() == code))
        })
    };
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in [
        "engine/src/core/error.rs",
        "udf-runtime/src/error.rs",
        "server/src/error.rs",
        "gpu-scheduler/src/error.rs",
        "cluster/src/error.rs",
        "ops/src/error.rs",
    ] {
        for code in declared_codes(&root, file) {
            seen += 1;
            if !listed(&code) {
                missing.push(format!("{code} ({file})"));
            }
        }
    }
    assert!(
        seen > 30,
        "found only {seen} declared codes: has the declaration form changed?"
    );
    assert!(
        missing.is_empty(),
        "docs/src/error-codes.md lacks: {missing:?}"
    );
}
