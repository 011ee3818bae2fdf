//! The plain DataFusion peer: a `SessionContext` with the same partitions as accelsql's
//! sessions, and the plain `ScalarUDF`s of [`super::kernels`].

use accelsql_engine::datafusion::prelude::{SessionConfig, SessionContext};

use super::Runner;
use super::kernels::{black_scholes_call, cosine, haversine, plain_udf, poly};

/// A plain DataFusion context with `partitions` target partitions and the peers' UDFs:
/// `poly_udf(x)`, `haversine_udf(lat1, lon1, lat2, lon2)`,
/// `black_scholes_call_udf(spot, strike, years, rate, volatility)`, `cosine_udf(emb, query)`.
pub fn plain_datafusion(partitions: usize) -> Runner {
    let ctx =
        SessionContext::new_with_config(SessionConfig::new().with_target_partitions(partitions));
    ctx.register_udf(plain_udf("poly_udf", 1, poly));
    ctx.register_udf(plain_udf("haversine_udf", 4, haversine));
    ctx.register_udf(plain_udf("black_scholes_call_udf", 5, black_scholes_call));
    ctx.register_udf(plain_udf("cosine_udf", 2, cosine));
    Runner::DataFusion(ctx)
}

/// The version of DataFusion linked in.
pub fn version() -> &'static str {
    accelsql_engine::datafusion::DATAFUSION_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_udfs_run_in_sql() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let df = plain_datafusion(2);
        let out = rt
            .block_on(df.query(
                "SELECT poly_udf(1.0), haversine_udf(0.0, 0.0, 0.0, 1.0), \
                 cosine_udf(arrow_cast([1.0, 0.0], 'FixedSizeList(2, Float32)'), [1.0, 0.0])",
            ))
            .unwrap();
        let row = &crate::peers::numbers(&out).unwrap()[0];
        assert_eq!(row[0], 6.0);
        assert!((row[1] - 111.195).abs() < 0.01, "{row:?}");
        assert_eq!(row[2], 1.0);
    }
}
