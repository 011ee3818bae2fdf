//! `udf-overhead`: the same Rust UDF (`3x² + 2x + 1` per row, summed) through plain DataFusion (a
//! `ScalarUDF`) and through accelsql (a `GpuNvidia|None` UDF placed on the CPU: zero devices).
//! The goal of the engine issue: accelsql within 5% of DataFusion.

use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::{Engine, InstanceContext, ScalarUdf};

use crate::data::Dataset;
use crate::error::Result;
use crate::peers::accelsql::session;
use crate::peers::datafusion::plain_datafusion;
use crate::peers::kernels::poly;
use crate::results::{SuiteResult, Table};

use super::Context;
use super::sql::{self, Comparison, Contender};

/// Rows at `--scale 1` (the largest size; the suite also runs a quarter and a sixteenth).
pub const BASE_ROWS: u64 = 10_000_000;
/// The goal: accelsql's time ÷ DataFusion's at most this.
pub const GOAL: f64 = 1.05;

const REFERENCE: &str = "DataFusion ScalarUDF";
const ACCELSQL: &str = "accelsql CPU (GpuNvidia|None)";

/// Registers `poly(x DOUBLE) → DOUBLE`, `GpuNvidia|None`, in `engine` (once).
pub fn register_poly(engine: &Engine) -> Result<()> {
    let udf = ScalarUdf::builder("poly")
        .inputs([DataType::Float64])
        .returns(DataType::Float64)
        .accelerator("GpuNvidia|None")?
        .cpu(
            |_: &InstanceContext,
             rows: usize,
             args: &[accelsql_engine::datafusion::logical_expr::ColumnarValue]| {
                poly(args, rows)
            },
        )
        .build()?;
    match engine.register_scalar_udf(udf) {
        Ok(()) => Ok(()),
        // Registered by an earlier run in this process.
        Err(e) if e.to_string().contains("already registered") => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "udf-overhead: the same Rust UDF, accelsql vs plain DataFusion".into();
    result.what = "`SELECT sum(poly(x)) FROM doubles`, poly = 3x² + 2x + 1 in Rust, registered as \
                   a plain DataFusion ScalarUDF and as an accelsql `GpuNvidia|None` UDF (placed on \
                   the CPU: the engine has zero devices). Measures what accelsql adds around a \
                   UDF call (placement, instances, bookkeeping)."
        .into();
    let sizes = ctx.sizes(BASE_ROWS);
    result.notes.push(format!(
        "Sizes: {sizes:?} rows (base {BASE_ROWS} × scale {}). Goal: accelsql ≤ {GOAL} × \
         DataFusion.",
        ctx.scale
    ));
    result
        .notes
        .push(super::sql::engines_note(ctx, "one row (the sum)"));
    register_poly(&ctx.accelsql.cpu)?;
    let contenders = vec![
        Contender::new(
            REFERENCE,
            plain_datafusion(ctx.partitions),
            "SELECT sum(poly_udf(x)) FROM {table}",
        ),
        Contender::new(
            ACCELSQL,
            session(&ctx.accelsql.cpu, ctx.partitions).await?,
            "SELECT sum(poly(x)) FROM {table}",
        ),
    ];
    let cmp = Comparison {
        case: "sum(poly(x))".into(),
        dataset: Dataset::Doubles,
        contenders,
        duckdb: Vec::new(),
        reference: REFERENCE.into(),
        check: |a, r| sql::cells_close(a, r, 1e-9),
    };
    let mut table = Table::new("udf-overhead: sum(poly(x))", "rows", Some(REFERENCE));
    sql::run(ctx, cmp, &sizes, &mut table, &mut result.notes).await?;
    table.fill_ratios();
    for f in table.figures.iter().filter(|f| f.engine == ACCELSQL) {
        if let Some(r) = f.ratio {
            let verdict = if r <= GOAL { "met" } else { "MISSED" };
            result.notes.push(format!(
                "{} rows: accelsql ÷ DataFusion = {r:.3} (goal ≤ {GOAL}: {verdict})",
                f.rows
            ));
        }
    }
    result.tables.push(table);
    Ok(())
}
