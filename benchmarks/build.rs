//! Build facts for the machine section of the report: the compiler and the locked versions of
//! the engines and libraries measured (read from the workspace's Cargo.lock).

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
            text.strip_prefix("rustc ")
                .map_or(text.clone(), str::to_string)
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ACCELSQL_BENCH_RUSTC={version}");

    let lock = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let mut locked = Vec::new();
    for name in ["datafusion", "arrow", "parquet", "tokio", "plotters"] {
        let marker = format!("name = \"{name}\"\nversion = \"");
        let version = text
            .find(&marker)
            .map(|at| &text[at + marker.len()..])
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("unknown");
        locked.push(format!("{name}={version}"));
    }
    println!("cargo:rustc-env=ACCELSQL_BENCH_LOCKED={}", locked.join(";"));
    println!("cargo:rerun-if-changed=build.rs");
}
