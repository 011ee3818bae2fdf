//! The engines a suite measures: plain DataFusion and accelsql in this process, DuckDB as a
//! Python subprocess; and the Python virtualenv the Python peers need.

pub mod accelsql;
pub mod datafusion;
pub mod duckdb;
pub mod kernels;
pub mod python_env;

use std::sync::Arc;

use accelsql_engine::Session;
use accelsql_engine::datafusion::arrow::array::RecordBatch;
use accelsql_engine::datafusion::catalog::MemTable;
use accelsql_engine::datafusion::prelude::SessionContext;

use crate::error::Result;

/// An in-process engine: a plain DataFusion context or an accelsql session.
#[derive(Clone)]
pub enum Runner {
    /// Plain DataFusion (its built-ins and plain `ScalarUDF`s).
    DataFusion(SessionContext),
    /// An accelsql session (placement, leases, accelsql UDFs).
    Accelsql(Arc<Session>),
}

impl Runner {
    /// The DataFusion context underneath.
    pub fn context(&self) -> &SessionContext {
        match self {
            Self::DataFusion(ctx) => ctx,
            Self::Accelsql(session) => session.context(),
        }
    }

    /// Registers `table` as `name`, replacing a table of that name.
    pub fn register(&self, name: &str, table: &Arc<MemTable>) -> Result<()> {
        let ctx = self.context();
        ctx.deregister_table(name)?;
        ctx.register_table(name, Arc::clone(table) as _)?;
        Ok(())
    }

    /// Runs `sql` and collects its result.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        match self {
            Self::DataFusion(ctx) => Ok(ctx.sql(sql).await?.collect().await?),
            Self::Accelsql(session) => Ok(session.sql(sql).await?),
        }
    }
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DataFusion(_) => "Runner::DataFusion",
            Self::Accelsql(_) => "Runner::Accelsql",
        })
    }
}

/// A result's cells as text, row by row (`NULL` for nulls): how answers are compared.
pub fn cells(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>> {
    Ok(accelsql_engine::testing::cells(batches)?)
}

/// A result's cells as numbers (non-numbers and NULLs as NaN).
pub fn numbers(batches: &[RecordBatch]) -> Result<Vec<Vec<f64>>> {
    Ok(cells(batches)?
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|c| c.parse::<f64>().unwrap_or(f64::NAN))
                .collect()
        })
        .collect())
}

/// Whether `a` and `b` agree to a relative tolerance `rel` (NaN never agrees).
pub fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closeness_is_relative() {
        assert!(close(1000.0, 1000.0001, 1e-6));
        assert!(!close(1000.0, 1001.0, 1e-6));
        assert!(!close(f64::NAN, f64::NAN, 1.0));
        assert!(close(0.0, 0.0, 1e-9));
    }
}
