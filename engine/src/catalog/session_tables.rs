//! A session's view of the engine's catalog ([`SessionCatalog`]): the engine's schemas and
//! tables, shared by every session, with the session's own temporary tables (`CREATE TEMPORARY
//! TABLE`, memory tables gone with the session) in front of them, and the session's own system
//! schemas (`sys`, `accelsql`: their tables answer for the session that reads them).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DfResult;

/// A session's temporary tables, by (schema, table).
#[derive(Debug, Default)]
pub(crate) struct TemporaryTables {
    tables: RwLock<HashMap<(String, String), Arc<dyn TableProvider>>>,
}

impl TemporaryTables {
    /// Adds (or replaces) temporary table `schema.table`.
    pub(crate) fn insert(&self, schema: &str, table: &str, provider: Arc<dyn TableProvider>) {
        self.tables
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((schema.to_string(), table.to_string()), provider);
    }

    /// Temporary table `schema.table`, if there is one.
    pub(crate) fn get(&self, schema: &str, table: &str) -> Option<Arc<dyn TableProvider>> {
        self.tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(schema.to_string(), table.to_string()))
            .cloned()
    }

    /// Removes temporary table `schema.table`; what it was.
    pub(crate) fn remove(&self, schema: &str, table: &str) -> Option<Arc<dyn TableProvider>> {
        self.tables
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(schema.to_string(), table.to_string()))
    }

    /// The temporary tables of schema `schema`.
    fn names_in(&self, schema: &str) -> Vec<String> {
        self.tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|(s, _)| s == schema)
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// Forgets every temporary table of schema `schema` (it was dropped).
    fn forget_schema(&self, schema: &str) {
        self.tables
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(s, _), _| s != schema);
    }
}

/// The schemas each session has of its own: its system tables.
pub(crate) const SESSION_SCHEMAS: [&str; 2] = ["accelsql", "sys"];

/// The engine's catalog as one session sees it.
#[derive(Debug)]
pub(crate) struct SessionCatalog {
    shared: Arc<dyn CatalogProvider>,
    temporary: Arc<TemporaryTables>,
    /// The session's own schemas ([`SESSION_SCHEMAS`]).
    own: RwLock<HashMap<String, Arc<dyn SchemaProvider>>>,
}

impl SessionCatalog {
    /// `shared` with `temporary` in front.
    pub(crate) fn new(shared: Arc<dyn CatalogProvider>, temporary: Arc<TemporaryTables>) -> Self {
        Self {
            shared,
            temporary,
            own: RwLock::default(),
        }
    }
}

impl CatalogProvider for SessionCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.shared.schema_names();
        names.extend(
            self.own
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned(),
        );
        names.sort();
        names.dedup();
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if let Some(own) = self.own.read().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Some(Arc::clone(own));
        }
        let shared = self.shared.schema(name)?;
        Some(Arc::new(SessionSchema {
            shared,
            schema: name.to_string(),
            temporary: Arc::clone(&self.temporary),
        }))
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        if SESSION_SCHEMAS.contains(&name) {
            return Ok(self
                .own
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.to_string(), schema));
        }
        self.shared.register_schema(name, schema)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        if SESSION_SCHEMAS.contains(&name) {
            return datafusion::common::plan_err!("schema {name} holds system tables: it stays");
        }
        let dropped = self.shared.deregister_schema(name, cascade)?;
        if dropped.is_some() {
            self.temporary.forget_schema(name);
        }
        Ok(dropped)
    }
}

/// One schema as one session sees it.
#[derive(Debug)]
struct SessionSchema {
    shared: Arc<dyn SchemaProvider>,
    schema: String,
    temporary: Arc<TemporaryTables>,
}

#[async_trait]
impl SchemaProvider for SessionSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.shared.table_names();
        names.extend(self.temporary.names_in(&self.schema));
        names.sort();
        names.dedup();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(table) = self.temporary.get(&self.schema, name) {
            return Ok(Some(table));
        }
        self.shared.table(name).await
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DfResult<Option<Arc<dyn TableProvider>>> {
        self.shared.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(table) = self.temporary.remove(&self.schema, name) {
            return Ok(Some(table));
        }
        self.shared.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.temporary.get(&self.schema, name).is_some() || self.shared.table_exist(name)
    }
}
