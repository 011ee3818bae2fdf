//! `geo`: great-circle distance per row (`haversine_km`) averaged per region (GROUP BY over 64
//! regions) — accelsql's built-in on CPU and GPU beside plain DataFusion (a plain `ScalarUDF`
//! running the same Rust function, and the formula as a SQL expression) and DuckDB (the formula
//! as a SQL expression).

use crate::data::{Dataset, REGIONS};
use crate::error::Result;
use crate::peers::datafusion::plain_datafusion;
use crate::results::{SuiteResult, Table};

use super::Context;
use super::sql::{self, Comparison, Contender, DuckDbContender};

/// Rows at `--scale 1` (the largest size; the suite also runs a quarter and a sixteenth).
pub const BASE_ROWS: u64 = 10_000_000;

/// The haversine formula as a SQL expression both DataFusion and DuckDB run.
pub const HAVERSINE_SQL: &str = "2 * 6371.0088 * asin(least(1.0, sqrt(\
    power(sin(radians(lat2 - lat1) / 2), 2) + \
    cos(radians(lat1)) * cos(radians(lat2)) * power(sin(radians(lon2 - lon1) / 2), 2))))";

fn query(distance: &str) -> String {
    format!(
        "SELECT region, count(*) AS n, avg({distance}) AS km FROM {{table}} \
         GROUP BY region ORDER BY region"
    )
}

/// The reference engine: the plain `ScalarUDF` running accelsql's own Rust function.
const REFERENCE: &str = "DataFusion ScalarUDF";

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "geo: haversine_km per row + GROUP BY".into();
    result.what = format!(
        "`SELECT region, count(*), avg(haversine_km(lat1, lon1, lat2, lon2)) FROM points GROUP BY \
         region` over random point pairs in {REGIONS} regions; time per query (memory tables, no I/O)."
    );
    let sizes = ctx.sizes(BASE_ROWS);
    result.notes.push(format!(
        "Sizes: {sizes:?} rows (base {BASE_ROWS} × scale {}).",
        ctx.scale
    ));
    result.notes.push(sql::engines_note(
        ctx,
        &format!("{REGIONS} rows (one per region)"),
    ));
    let df = plain_datafusion(ctx.partitions);
    let mut contenders = vec![
        Contender::new(
            REFERENCE,
            df.clone(),
            query("haversine_udf(lat1, lon1, lat2, lon2)"),
        ),
        Contender::new("DataFusion SQL expression", df, query(HAVERSINE_SQL)),
    ];
    contenders.extend(
        sql::accelsql_pair(
            ctx,
            "accelsql",
            &query("haversine_km(lat1, lon1, lat2, lon2)"),
        )
        .await?,
    );
    let cmp = Comparison {
        case: "haversine + GROUP BY".into(),
        dataset: Dataset::Points,
        contenders,
        duckdb: vec![DuckDbContender {
            engine: "DuckDB SQL expression".into(),
            sql: query(HAVERSINE_SQL),
        }],
        reference: REFERENCE.into(),
        check: |a, r| sql::cells_close(a, r, 1e-9),
    };
    let mut table = Table::new("geo: haversine + GROUP BY", "rows", Some(REFERENCE));
    sql::run(ctx, cmp, &sizes, &mut table, &mut result.notes).await?;
    result.tables.push(table);
    Ok(())
}
