//! A system table: its rows made from the engine's state at each scan ([`SystemTable`]), and
//! what the system views of `system.rs` and `security_views.rs` are built from.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session as CatalogSession, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::scripts::ScriptCatalog;
use crate::core::EngineState;
use crate::core::names::{exasol_name, swap_case};
use crate::core::options::SqlDialect;

/// What a system table reads at scan time: the engine's state and its script catalog, and the
/// scanning session's dialect.
#[derive(Debug, Clone)]
pub(crate) struct SystemContext {
    /// Devices, node, lease queue, call log.
    pub(crate) state: Arc<EngineState>,
    /// Scripts and connections.
    pub(crate) scripts: Arc<ScriptCatalog>,
    /// The dialect of the session that scans (set at each scan).
    pub(crate) dialect: SqlDialect,
}

impl SystemContext {
    /// An engine name (of a script, a schema) as the scanning session's dialect shows it: the
    /// Exasol dialect's name for it (`core/names.rs`: `"MixedCase"` made there is `MixedCase`),
    /// else Exasol's name of a name the engine folded.
    pub(crate) fn shown_name(&self, name: &str) -> String {
        match self.dialect {
            SqlDialect::Exasol => swap_case(name),
            SqlDialect::Datafusion => exasol_name(name),
        }
    }
}

/// Makes a system table's columns from the engine's state at scan time.
pub(crate) type Producer = dyn Fn(&SystemContext) -> DfResult<Vec<ArrayRef>> + Send + Sync;

/// Makes a system table from its columns and producer.
pub(crate) type TableMaker<'a> =
    dyn Fn(&[(&str, DataType)], Box<Producer>) -> Arc<SystemTable> + 'a;

/// A table whose rows are produced from the engine's state at scan time.
pub(crate) struct SystemTable {
    schema: SchemaRef,
    engine: SystemContext,
    produce: Box<Producer>,
    /// Read the newest snapshot of every stored table before producing (views of tables).
    refresh_tables: std::sync::atomic::AtomicBool,
}

impl SystemTable {
    /// A table of `schema` whose rows `produce` makes from `engine` at each scan.
    pub(crate) fn new(schema: SchemaRef, engine: SystemContext, produce: Box<Producer>) -> Self {
        Self {
            schema,
            engine,
            produce,
            refresh_tables: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// This table, reading the newest snapshot of every stored table before each scan (so
    /// that its producer finds them without waiting).
    pub(crate) fn refreshing_tables(self: Arc<Self>) -> Arc<Self> {
        self.refresh_tables
            .store(true, std::sync::atomic::Ordering::Release);
        self
    }
}

impl fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemTable")
            .field("schema", &self.schema)
            .finish()
    }
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let engine = SystemContext {
            dialect: SqlDialect::of(state.config_options()),
            ..self.engine.clone()
        };
        if self
            .refresh_tables
            .load(std::sync::atomic::Ordering::Acquire)
            && let Some(store) = engine.state.tables.store()
        {
            store.snapshots().await;
        }
        let columns = (self.produce)(&engine)?;
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let exec: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}
