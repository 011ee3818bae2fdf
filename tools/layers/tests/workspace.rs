//! The workspace's import structure: checks every tree in `tools/layers/layers.txt`.

use std::path::Path;

#[test]
fn no_import_cycles_and_no_upward_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let report = match accelsql_layers::check_workspace(&root) {
        Ok(report) => report,
        Err(e) => panic!("tools/layers could not check the workspace: {e}"),
    };
    println!("{report}");
    assert!(
        report.is_clean(),
        "the import structure has problems (see tools/layers/layers.txt):\n\n{report}"
    );
}
