//! `options`: Black–Scholes call prices summed over N options — accelsql's built-in
//! `black_scholes_call` on CPU and GPU beside plain DataFusion (a plain `ScalarUDF` with the
//! textbook formula, and the formula as a SQL expression) and DuckDB (the SQL expression).

use crate::data::Dataset;
use crate::error::Result;
use crate::peers::datafusion::plain_datafusion;
use crate::results::{SuiteResult, Table};

use super::Context;
use super::sql::{self, Comparison, Contender, DuckDbContender};

/// Rows at `--scale 1` (the largest size; the suite also runs a quarter and a sixteenth).
pub const BASE_ROWS: u64 = 10_000_000;

/// The standard normal CDF of the SQL expression `x` (Abramowitz–Stegun 26.2.17, absolute
/// error below 7.5e-8): SQL engines have no `erf`.
fn normal_cdf_sql(x: &str) -> String {
    let t = format!("(1.0 / (1.0 + 0.2316419 * abs({x})))");
    let poly = format!(
        "{t} * (0.319381530 + {t} * (-0.356563782 + {t} * (1.781477937 + {t} * \
         (-1.821255978 + {t} * 1.330274429))))"
    );
    let tail = format!("(0.3989422804014327 * exp(-0.5 * ({x}) * ({x})) * {poly})");
    format!("(CASE WHEN ({x}) >= 0 THEN 1.0 - {tail} ELSE {tail} END)")
}

/// Black–Scholes as a SQL query both DataFusion and DuckDB run.
pub fn black_scholes_sql() -> String {
    format!(
        "SELECT sum(spot * {} - strike * exp(-rate * years) * {}) FROM (SELECT spot, strike, \
         years, rate, volatility * sqrt(years) AS vs, (ln(spot / strike) + (rate + volatility * \
         volatility / 2) * years) / (volatility * sqrt(years)) AS d1 FROM {{table}}) AS o",
        normal_cdf_sql("d1"),
        normal_cdf_sql("d1 - vs")
    )
}

fn query(function: &str) -> String {
    format!("SELECT sum({function}(spot, strike, years, rate, volatility)) FROM {{table}}")
}

const REFERENCE: &str = "DataFusion ScalarUDF";

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "options: black_scholes_call".into();
    result.what = "`SELECT sum(black_scholes_call(spot, strike, years, rate, volatility)) FROM \
                   options` over random European options; time per query (memory tables)."
        .into();
    let sizes = ctx.sizes(BASE_ROWS);
    result.notes.push(format!(
        "Sizes: {sizes:?} rows (base {BASE_ROWS} × scale {}). The SQL-expression peers use the \
         Abramowitz–Stegun normal CDF (error < 7.5e-8): answers agree to 1e-6 relative.",
        ctx.scale
    ));
    result
        .notes
        .push(sql::engines_note(ctx, "one row (the prices summed)"));
    let df = plain_datafusion(ctx.partitions);
    let mut contenders = vec![
        Contender::new(REFERENCE, df.clone(), query("black_scholes_call_udf")),
        Contender::new("DataFusion SQL expression", df, black_scholes_sql()),
    ];
    contenders.extend(sql::accelsql_pair(ctx, "accelsql", &query("black_scholes_call")).await?);
    let cmp = Comparison {
        case: "Black–Scholes call, sum".into(),
        dataset: Dataset::Options,
        contenders,
        duckdb: vec![DuckDbContender {
            engine: "DuckDB SQL expression".into(),
            sql: black_scholes_sql(),
        }],
        reference: REFERENCE.into(),
        check: |a, r| sql::cells_close(a, r, 1e-6),
    };
    let mut table = Table::new("options: Black–Scholes call", "rows", Some(REFERENCE));
    sql::run(ctx, cmp, &sizes, &mut table, &mut result.notes).await?;
    result.tables.push(table);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::kernels::normal_cdf;

    #[test]
    fn the_sql_normal_cdf_is_close_to_erfc() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let df = plain_datafusion(1);
        for x in [-3.0, -0.7, 0.0, 0.4, 2.5] {
            let sql = format!("SELECT {}", normal_cdf_sql(&format!("({x})")));
            let got = crate::peers::numbers(&rt.block_on(df.query(&sql)).unwrap()).unwrap()[0][0];
            assert!((got - normal_cdf(x)).abs() < 1e-7, "{x}: {got}");
        }
    }
}
