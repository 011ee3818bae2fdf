//! Files as tables: a file, directory or glob named where a table goes (`SELECT * FROM
//! 'data/x.parquet'`, `'logs/*.csv'`), on when [`EngineOptions::url_tables`] is.
//!
//! DataFusion's dynamic file catalog does the work (as `SessionContext::enable_url_table` sets
//! it up); [`FileTableFactory`] stands in for its `DynamicListTableFactory` so that a name that
//! looks like a path fails with a coded error that says what is wrong (no such file, no file
//! matches the glob, no format for the extension) instead of "table not found".
//!
//! [`EngineOptions::url_tables`]: crate::EngineOptions::url_tables

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::catalog::{DynamicFileCatalog, TableProvider, UrlTableFactory};
use datafusion::datasource::listing::{
    ListingTable, ListingTableConfig, ListingTableConfigExt, ListingTableUrl,
};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::session_state::SessionState;
use datafusion::prelude::SessionContext;

use crate::core::error::EngineError;
use crate::core::owners::SessionIdentity;
use crate::core::privileges::SystemPrivilege;

/// Returns `ctx` with its catalogs wrapped in DataFusion's dynamic file catalog, so that a table
/// name no catalog knows is tried as a file, directory or glob. Done once, when the session is
/// built: the context is rebuilt from its state (settings, functions and rules are kept).
///
/// Unless the session `who` holds `READ SERVER FILES`, a name that looks like a path is
/// refused with 42501 instead of read.
pub(crate) fn enable_url_tables(
    ctx: SessionContext,
    who: Arc<SessionIdentity>,
    data_dir: Option<std::path::PathBuf>,
) -> SessionContext {
    let factory = Arc::new(FileTableFactory {
        state: OnceLock::new(),
        who,
        data_dir,
    });
    let catalogs = Arc::clone(ctx.state_ref().read().catalog_list());
    let catalogs = Arc::new(DynamicFileCatalog::new(
        catalogs,
        Arc::clone(&factory) as Arc<dyn UrlTableFactory>,
    ));
    let session_id = ctx.session_id();
    let ctx: SessionContext = ctx
        .into_state_builder()
        .with_session_id(session_id)
        .with_catalog_list(catalogs)
        .build()
        .into();
    let weak = ctx.state_weak_ref();
    // A fresh factory: the cell is empty, so this cannot fail.
    let _ = factory
        .state
        .set(Box::new(move || weak.upgrade().map(|s| s.read().clone())));
    ctx
}

/// The session's current state, read when a file table is resolved.
type StateSource = Box<dyn Fn() -> Option<SessionState> + Send + Sync>;

/// Makes a listing table (format from the extension, schema inferred, `key=value/` folders as
/// partition columns) from a table name that is a path, a folder or a glob.
struct FileTableFactory {
    /// Set once the context exists; held weakly (the context owns the catalog that owns us).
    state: OnceLock<StateSource>,
    /// The session, whose grants say whether it may read files (`READ SERVER FILES`).
    who: Arc<SessionIdentity>,
    /// The engine's data directory, whose files are never read as tables (but by SYS).
    data_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for FileTableFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTableFactory").finish_non_exhaustive()
    }
}

#[async_trait]
impl UrlTableFactory for FileTableFactory {
    async fn try_new(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Ok(url) = ListingTableUrl::parse(name) else {
            return Ok(None);
        };
        let state = self
            .state
            .get()
            .and_then(|state| state())
            .ok_or_else(|| DataFusionError::Internal("the session is gone".into()))?;
        // A plain name (`t`, `target`) is a table name, never a file: otherwise a folder that
        // happens to sit in the working directory would shadow `CREATE TABLE target` ("already
        // exists") or a table's "not found". A folder is named with its slash: `'data/'`.
        if !looks_like_path(name) {
            return Ok(None);
        }
        let grants = self.who.grants();
        if !grants.is_all() {
            crate::core::privileges::check_outside_data_dir(name, self.data_dir.as_deref())
                .map_err(EngineError::into_datafusion)?;
        }
        if let Err(denial) = grants.check_system(SystemPrivilege::ReadServerFiles) {
            return Err(denial
                .refusal(
                    &format!("reading files on the server as tables ('{name}')"),
                    "the READ SERVER FILES privilege",
                )
                .into_datafusion());
        }
        let config = match ListingTableConfig::new(url).infer_options(&state).await {
            Ok(config) => config,
            Err(e) => return Err(file_error(name, e, &state).into_datafusion()),
        };
        let config = config
            .infer_partitions_from_path(&state)
            .await?
            .infer_schema(&state)
            .await?;
        Ok(Some(Arc::new(ListingTable::try_new(config)?)))
    }
}

/// Whether a table name is meant as a file: it has a folder, an extension, a glob or a scheme.
fn looks_like_path(name: &str) -> bool {
    name.contains(['/', '\\', '.', '*', '?', '['])
}

/// The coded error for a name that looks like a path but cannot be read as a table.
fn file_error(name: &str, e: DataFusionError, state: &SessionState) -> EngineError {
    match e.find_root() {
        // No file format is registered for the extension.
        DataFusionError::Configuration(message) => {
            let known: Vec<&str> = ["arrow", "avro", "csv", "json", "parquet"]
                .into_iter()
                .filter(|ext| state.get_file_format_factory(ext).is_some())
                .collect();
            EngineError::UnknownFileFormat {
                path: name.to_string(),
                message: format!(
                    "{message}; known extensions: {} (give a file one, or use CREATE EXTERNAL \
                     TABLE … STORED AS …)",
                    known.join(", ")
                ),
            }
        }
        // The listing found nothing (`No files for table`), or the object store has no object.
        DataFusionError::Internal(_) => EngineError::FileNotFound {
            path: name.to_string(),
            message: "no such file or directory, or no file matches".into(),
        },
        DataFusionError::ObjectStore(inner)
            if matches!(**inner, datafusion::object_store::Error::NotFound { .. }) =>
        {
            EngineError::FileNotFound {
                path: name.to_string(),
                message: "no such file or directory".into(),
            }
        }
        _ => EngineError::Sql(DataFusionError::Context(
            format!("reading {name} as a table"),
            Box::new(e),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_like_names_are_told_from_table_names() {
        for name in ["x.parquet", "data/", "data/*.csv", "s3://b/k", "a\\b"] {
            assert!(looks_like_path(name), "{name}");
        }
        for name in ["t", "docs", "my_table"] {
            assert!(!looks_like_path(name), "{name}");
        }
    }
}
