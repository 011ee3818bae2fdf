//! The sqllogictest database: an accelsql [`Session`] behind sqllogictest's [`AsyncDB`], with
//! results normalised as upstream DataFusion prints them and errors that carry the engine's code.

use std::fmt;
use std::time::Duration;

use accelsql_engine::datafusion::arrow::array::{Array, AsArray, RecordBatch};
use accelsql_engine::datafusion::arrow::datatypes::DataType;
use accelsql_engine::datafusion::error::DataFusionError;
use accelsql_engine::{EngineError, Session};
use async_trait::async_trait;
use futures::TryStreamExt;
use sqllogictest::{AsyncDB, DBOutput};

use crate::flavor::Flavor;
use crate::upstream::normalize::{convert_batches, convert_schema_to_types};
use crate::upstream::output::{DFColumnType, DFOutput};

/// A failed statement as a `.slt` file sees it: the engine's code (matched by `error(22069)`)
/// and the message that `statement error <regex>` searches.
///
/// In accelsql's own suites the message is the engine's, which starts with the code:
/// `[22069] Accelerator device request failed …`. In upstream parity files an error DataFusion
/// reported prints as upstream's runner prints it (`DataFusion error: Error during planning: …`),
/// so that upstream's expected messages, also multi-line exact ones, still match.
#[derive(Debug, Clone)]
pub struct SltError {
    code: String,
    message: String,
}

impl SltError {
    /// The error of a failed statement, formatted for `flavor`.
    pub fn from_engine(error: EngineError, flavor: Flavor) -> Self {
        let code = error.code().to_string();
        let message = match (&error, flavor) {
            (EngineError::Sql(e), Flavor::Upstream) => {
                crate::workspace::as_written(&format!("DataFusion error: {}", e.strip_backtrace()))
            }
            (_, Flavor::Upstream) => crate::workspace::as_written(&error.to_string()),
            _ => error.to_string(),
        };
        Self { code, message }
    }

    /// An error of the test harness itself (bad directive, unreadable result).
    pub fn harness(message: impl Into<String>) -> Self {
        Self {
            code: "XX000".into(),
            message: message.into(),
        }
    }

    /// The engine's code, e.g. `22069`.
    pub fn code(&self) -> &str {
        &self.code
    }
}

impl fmt::Display for SltError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SltError {}

/// One sqllogictest connection: an accelsql session.
pub struct AccelsqlDb {
    session: Session,
    flavor: Flavor,
}

impl fmt::Debug for AccelsqlDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccelsqlDb")
            .field("session", &self.session)
            .field("flavor", &self.flavor)
            .finish()
    }
}

impl AccelsqlDb {
    /// A connection on `session`. For [`Flavor::Upstream`] the session first gets the settings
    /// upstream's runner gives its own `SessionContext` (4 target partitions, no
    /// information_schema).
    pub async fn connect(session: Session, flavor: Flavor) -> Result<Self, SltError> {
        for setting in flavor.session_setup() {
            session
                .sql(setting)
                .await
                .map_err(|e| SltError::from_engine(e, flavor))?;
        }
        Ok(Self { session, flavor })
    }

    /// The session behind this connection.
    pub fn session(&self) -> &Session {
        &self.session
    }

    fn error(&self, e: EngineError) -> SltError {
        SltError::from_engine(e, self.flavor)
    }
}

#[async_trait]
impl AsyncDB for AccelsqlDb {
    type Error = SltError;
    type ColumnType = DFColumnType;

    async fn run(&mut self, sql: &str) -> Result<DFOutput, SltError> {
        let rewritten;
        let sql = if self.flavor == Flavor::Upstream {
            rewritten = crate::workspace::rewrite_sql(sql);
            rewritten.as_str()
        } else {
            sql
        };
        let stream = self
            .session
            .sql_stream(sql)
            .await
            .map_err(|e| self.error(e))?;
        let schema = stream.schema();
        let types = convert_schema_to_types(schema.fields());
        let mut batches: Vec<RecordBatch> = stream
            .try_collect()
            .await
            .map_err(|e: DataFusionError| self.error(EngineError::from(e)))?;
        if self.flavor == Flavor::Upstream {
            drop_empty_placement_row(&mut batches);
        }
        let rows = convert_batches(&schema, batches, false)
            .map_err(|e| self.error(EngineError::from(e)))?;
        if rows.is_empty() && types.is_empty() {
            Ok(DBOutput::StatementComplete(0))
        } else {
            Ok(DBOutput::Rows { types, rows })
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "accelsql"
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await;
    }

    fn error_sql_state(err: &SltError) -> Option<String> {
        Some(err.code.clone())
    }
}

/// The text of the `gpu_placement` row accelsql's EXPLAIN adds to a statement without
/// accelsql UDF calls.
const NO_CALLS: &str = "no accelsql UDF calls";

/// Drops the `gpu_placement | no accelsql UDF calls` row that accelsql appends to every EXPLAIN
/// (and the `gpu_calls | no accelsql UDF calls` row of EXPLAIN ANALYZE), so that upstream's
/// EXPLAIN expectations compare DataFusion's plans only. A placement row that
/// names calls is kept: upstream files have none.
fn drop_empty_placement_row(batches: &mut Vec<RecordBatch>) {
    let Some(last) = batches.last() else {
        return;
    };
    let is_text = |i: usize| last.column(i).data_type() == &DataType::Utf8;
    if last.num_rows() != 1 || last.num_columns() < 2 || !is_text(0) || !is_text(1) {
        return;
    }
    let kind = last.column(0).as_string::<i32>();
    let plan = last.column(1).as_string::<i32>();
    let accelsql_row = matches!(kind.value(0), "gpu_placement" | "gpu_calls");
    if !kind.is_null(0) && accelsql_row && plan.value(0) == NO_CALLS {
        batches.pop();
    }
}
