//! The "GPU Resource Considerations" notebook, end to end, as a program: Python script UDFs with
//! Exasol's accelerator annotations, run on simulated GPUs by default (real ones where present:
//! set `ACCELSQL_SIMULATED_GPUS=0` on a GPU server).
//!
//! It runs as the user `NOTEBOOK`, granted `CREATE SESSION, CREATE SCRIPT, CREATE TABLE, USE GPU`
//! and nothing more.
//!
//! Run: `cargo run -p accelsql-examples --example gpu_resource_considerations`.
//! Needs `python3` on PATH.

use accelsql_engine::datafusion::arrow::util::pretty::pretty_format_batches;
use accelsql_engine::{Engine, SchedulerConfig, Session};

/// The notebook's scripts, as SQL (each ends with a line holding only `/`).
const SCRIPTS: &str = r#"
CREATE OR REPLACE PYTHON3 SCALAR SCRIPT long_running_gpu(seconds DOUBLE)
EMITS (device VARCHAR(200), start_time TIMESTAMP, end_time TIMESTAMP) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
import datetime, os, time
def run(ctx):
    start = datetime.datetime.now()
    time.sleep(ctx.seconds)
    ctx.emit(os.environ.get("CUDA_VISIBLE_DEVICES", ""), start, datetime.datetime.now())
/

CREATE OR REPLACE PYTHON3 SCALAR SCRIPT gpu_required() RETURNS VARCHAR(200) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
import os
def run(ctx):
    return os.environ.get("CUDA_VISIBLE_DEVICES") or "<invalid>"
/

CREATE OR REPLACE PYTHON3 SCALAR SCRIPT gpu_optional() RETURNS VARCHAR(200) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;
import os
def run(ctx):
    return os.environ.get("CUDA_VISIBLE_DEVICES") or "<invalid>"
/

CREATE OR REPLACE PYTHON3 SCALAR SCRIPT nvidia_smi() RETURNS VARCHAR(2000) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;
import shutil, subprocess
def run(ctx):
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not installed on this machine (no NVIDIA driver here)"
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
/

CREATE OR REPLACE PYTHON3 SET SCRIPT population_per_country(country VARCHAR(100), population BIGINT)
EMITS (country VARCHAR(100), population BIGINT, device VARCHAR(200)) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;
%perNodeAndCallInstanceLimit 2;
import os
def run(ctx):
    totals = {}
    while True:
        totals[ctx.country] = totals.get(ctx.country, 0) + ctx.population
        if not ctx.next():
            break
    for country, total in totals.items():
        ctx.emit(country, total, os.environ.get("CUDA_VISIBLE_DEVICES") or "<invalid>")
/
"#;

async fn show(session: &Session, title: &str, sql: &str) {
    println!("-- {title}\n{sql}");
    match session.sql(sql).await {
        Ok(batches) => match pretty_format_batches(&batches) {
            Ok(table) => println!("{table}\n"),
            Err(e) => println!("cannot print: {e}\n"),
        },
        Err(e) => println!("ERROR {e}\n"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = SchedulerConfig::from_env()?;
    if config.simulated_gpus.is_none() {
        config = config.with_simulated_gpus(2);
    }
    let engine = Engine::with_config(config)?;
    println!("GPUs: {}\n", engine.devices().len());
    // The notebook runs as a user granted just what it needs (the embedding program's own
    // sessions are SYS, with every privilege): to log in, create its scripts and its table, and
    // use the GPUs.
    engine
        .session()
        .sql(
            "CREATE USER notebook IDENTIFIED BY \"notebook-pw\"; \
             GRANT CREATE SESSION, CREATE SCRIPT, CREATE TABLE, USE GPU TO notebook",
        )
        .await?;
    let setup = engine.session_as("notebook")?;
    setup.sql(SCRIPTS).await?;
    setup
        .sql(
            "CREATE TABLE cities(name VARCHAR, country VARCHAR, population BIGINT) AS VALUES \
             ('Berlin', 'DE', 3645000), ('Hamburg', 'DE', 1841000), ('Munich', 'DE', 1472000), \
             ('Paris', 'FR', 2161000), ('Lyon', 'FR', 513000), ('Madrid', 'ES', 3223000), \
             ('Barcelona', 'ES', 1620000), ('Rome', 'IT', 2873000)",
        )
        .await?;

    // Two sessions run the GPU-required script at once: the node lease serializes them, so one
    // call's START comes after the other's END.
    println!("-- two sessions, each SELECT long_running_gpu(1.0), at the same time");
    let (a, b) = (
        engine.session_as("notebook")?,
        engine.session_as("notebook")?,
    );
    let query = "SELECT long_running_gpu(1.0)";
    let (ra, rb) = tokio::join!(a.sql(query), b.sql(query));
    for (name, result) in [("session A", ra), ("session B", rb)] {
        match result {
            Ok(batches) => println!("{name}:\n{}", pretty_format_batches(&batches)?),
            Err(e) => println!("{name}: ERROR {e}"),
        }
    }
    println!();

    show(
        &setup,
        "two GPU-required calls in one select: 22069",
        "SELECT gpu_required() AS a, gpu_required() AS b",
    )
    .await;
    show(
        &setup,
        "four optional calls: exactly one gets a device, the others run on the CPU",
        "SELECT gpu_optional() AS a, gpu_optional() AS b, gpu_optional() AS c, gpu_optional() AS d",
    )
    .await;
    show(&setup, "the nvidia-smi probe", "SELECT nvidia_smi()").await;
    show(
        &setup,
        "population per country, one group per node (GROUP BY iproc())",
        "SELECT population_per_country(country, population) FROM cities GROUP BY iproc() ORDER BY country",
    )
    .await;
    show(
        &setup,
        "the same with %perNodeAndCallInstanceLimit 2, grouped by country: two instances, each pinned to its own GPU",
        "SELECT population_per_country(country, population) FROM cities GROUP BY iproc(), country ORDER BY country",
    )
    .await;
    show(
        &setup,
        "where each call ran",
        "SELECT udf, placement, reason, devices, instances FROM accelsql.udf_calls ORDER BY statement_id",
    )
    .await;
    Ok(())
}
