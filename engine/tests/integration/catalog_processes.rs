//! Two OS processes creating scripts at once in one data directory: none is lost. The test
//! binary runs itself twice as the two processes (`ACCELSQL_CATALOG_CHILD` says which).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::path::PathBuf;
use std::process::Command;

use accelsql_engine::datafusion::arrow::array::{Array, StringArray};
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};

const PER_CHILD: usize = 25;

fn engine(dir: PathBuf) -> Engine {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        data_dir: Some(dir),
        ..EngineOptions::default()
    })
    .unwrap()
}

/// In a child: creates its scripts. Elsewhere: does nothing (passes).
#[tokio::test]
async fn child_creates_scripts() {
    let (Ok(child), Ok(dir)) = (
        std::env::var("ACCELSQL_CATALOG_CHILD"),
        std::env::var("ACCELSQL_CATALOG_DIR"),
    ) else {
        return;
    };
    let session = engine(PathBuf::from(dir)).session();
    for i in 0..PER_CHILD {
        session
            .sql(&format!(
                "CREATE PYTHON3 SCALAR SCRIPT s_{child}_{i}(x INT) RETURNS INT AS\ndef run(ctx):\n    return ctx.x\n/"
            ))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn two_processes_creating_scripts_at_once_lose_none() {
    if std::env::var_os("ACCELSQL_CATALOG_CHILD").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    // The test's name as the harness knows it: its path within the test crate.
    let child_test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::child_creates_scripts"),
        None => "child_creates_scripts".to_string(),
    };
    let children: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            Command::new(&me)
                .args(["--exact", &child_test, "--test-threads", "1"])
                .env("ACCELSQL_CATALOG_CHILD", name)
                .env("ACCELSQL_CATALOG_DIR", dir.path())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child failed");
    }
    let batches = engine(dir.path().to_path_buf())
        .session()
        .sql("SELECT name FROM accelsql.scripts ORDER BY name")
        .await
        .unwrap();
    let mut names = Vec::new();
    for b in &batches {
        let col = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        names.extend((0..col.len()).map(|i| col.value(i).to_string()));
    }
    assert_eq!(names.len(), 2 * PER_CHILD, "{names:?}");
    for child in ["a", "b"] {
        for i in 0..PER_CHILD {
            assert!(
                names.contains(&format!("s_{child}_{i}")),
                "s_{child}_{i} lost: {names:?}"
            );
        }
    }
}
