//! A [`TableStore`] as DataFusion's catalog: [`StoreCatalog`] (its schemas) and
//! [`StoreSchema`] (a schema's tables). Stored tables come from the store's folders; other
//! providers a session registers in a shared schema (views, tables over files) are kept in
//! memory beside them, shared by every session of the engine, until the process ends.
//!
//! A name with a version suffix — `t@@version=3`, `t@@timestamp=2026-12-06T10:00:00Z`, as the
//! engine writes `t VERSION AS OF 3` — is that version of `t`, read only.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::common::{DataFusionError, Result as DfResult, exec_err};
use datafusion::datasource::TableProvider;

use crate::error::StorageError;
use crate::provider::DeltaProvider;
use crate::store::TableStore;

/// What separates a table's name from the version it asks for.
pub const VERSION_MARK: &str = "@@";

/// A version of a table, as a name's suffix asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsOf {
    /// `VERSION AS OF n`.
    Version(u64),
    /// `TIMESTAMP AS OF '…'`.
    Timestamp(DateTime<Utc>),
}

impl AsOf {
    /// The name that asks for this version of `table`.
    pub fn name_for(&self, table: &str) -> String {
        match self {
            Self::Version(v) => format!("{table}{VERSION_MARK}version={v}"),
            Self::Timestamp(t) => format!("{table}{VERSION_MARK}timestamp={}", t.to_rfc3339()),
        }
    }

    /// The table and version a suffixed name asks for, if it has a suffix.
    pub fn parse(name: &str) -> Option<(&str, Self)> {
        let (table, suffix) = name.rsplit_once(VERSION_MARK)?;
        let as_of = if let Some(v) = suffix.strip_prefix("version=") {
            Self::Version(v.parse().ok()?)
        } else {
            let t = suffix.strip_prefix("timestamp=")?;
            Self::Timestamp(DateTime::parse_from_rfc3339(t).ok()?.with_timezone(&Utc))
        };
        Some((table, as_of))
    }
}

/// The schemas of a table store.
#[derive(Debug)]
pub struct StoreCatalog {
    store: Arc<TableStore>,
    /// The in-memory providers of each schema (views, tables over files).
    others: Arc<RwLock<HashMap<String, Arc<OtherTables>>>>,
}

/// Providers registered in a schema that are not stored tables.
type OtherTables = RwLock<HashMap<String, Arc<dyn TableProvider>>>;

impl StoreCatalog {
    /// The catalog of `store`.
    pub fn new(store: Arc<TableStore>) -> Self {
        Self {
            store,
            others: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<TableStore> {
        &self.store
    }

    fn others_of(&self, schema: &str) -> Arc<OtherTables> {
        if let Some(o) = self
            .others
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(schema)
        {
            return Arc::clone(o);
        }
        let mut all = self.others.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(all.entry(schema.to_string()).or_default())
    }
}

impl CatalogProvider for StoreCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.store.schema_names()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if !self.store.schema_exists(name) {
            return None;
        }
        Some(Arc::new(StoreSchema {
            store: Arc::clone(&self.store),
            schema: name.to_string(),
            others: self.others_of(name),
        }))
    }

    fn register_schema(
        &self,
        name: &str,
        _schema: Arc<dyn SchemaProvider>,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        self.store
            .create_schema(name, None)
            .map_err(StorageError::into_datafusion)?;
        Ok(None)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        let existing = self.schema(name);
        if existing.is_none() {
            return Ok(None);
        }
        let others = self.others_of(name);
        let other_names: Vec<String> = others
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        if !cascade && !other_names.is_empty() {
            return exec_err!(
                "schema {name} holds views or tables ({}); drop them first or DROP SCHEMA \
                 {name} CASCADE",
                other_names.join(", ")
            );
        }
        self.store
            .drop_schema(name, cascade)
            .map_err(StorageError::into_datafusion)?;
        self.others
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        Ok(existing)
    }
}

/// One schema of a table store.
#[derive(Debug)]
pub struct StoreSchema {
    store: Arc<TableStore>,
    schema: String,
    others: Arc<OtherTables>,
}

impl StoreSchema {
    fn other(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.others
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

#[async_trait]
impl SchemaProvider for StoreSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.store.table_names(&self.schema);
        names.extend(
            self.others
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned(),
        );
        names.sort();
        names.dedup();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(other) = self.other(name) {
            return Ok(Some(other));
        }
        if let Some(table) = self
            .store
            .table(&self.schema, name)
            .map_err(StorageError::into_datafusion)?
        {
            let provider = DeltaProvider::latest(table)
                .await
                .map_err(StorageError::into_datafusion)?;
            return Ok(Some(Arc::new(provider)));
        }
        let Some((base, as_of)) = AsOf::parse(name) else {
            return Ok(None);
        };
        let Some(table) = self
            .store
            .table(&self.schema, base)
            .map_err(StorageError::into_datafusion)?
        else {
            return Ok(None);
        };
        let snapshot = match as_of {
            AsOf::Version(v) => table.at_version(v).await,
            AsOf::Timestamp(t) => table.as_of(t).await,
        }
        .map_err(StorageError::into_datafusion)?;
        Ok(Some(Arc::new(DeltaProvider::at(table, snapshot))))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if self.store.table_exists(&self.schema, &name) {
            return Err(DataFusionError::External(Box::new(StorageError::Exists {
                what: format!("table {}.{name}", self.schema),
            })));
        }
        Ok(self
            .others
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(other) = self
            .others
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
        {
            return Ok(Some(other));
        }
        let Some(table) = self
            .store
            .table(&self.schema, name)
            .map_err(StorageError::into_datafusion)?
        else {
            return Ok(None);
        };
        self.store
            .drop_table(&self.schema, name)
            .map_err(StorageError::into_datafusion)?;
        // What DataFusion gets back is only checked for presence.
        let gone: Arc<dyn TableProvider> =
            Arc::new(datafusion::datasource::empty::EmptyTable::new(Arc::new(
                arrow::datatypes::Schema::empty(),
            )));
        let _ = table;
        Ok(Some(gone))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.others
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(name)
            || self.store.table_exists(&self.schema, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_suffixes_round_trip() {
        let v = AsOf::Version(3);
        assert_eq!(AsOf::parse(&v.name_for("t")), Some(("t", v)));
        let at = DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let t = AsOf::Timestamp(at);
        assert_eq!(AsOf::parse(&t.name_for("a@@b")), Some(("a@@b", t)));
        assert_eq!(AsOf::parse("plain"), None);
        assert_eq!(AsOf::parse("t@@version=x"), None);
    }
}
