//! Where an engine's tables live ([`Tables`]): Delta tables under the data directory
//! (`DATA_DIR/tables`, through `accelsql-storage`), or — without a data directory — memory
//! tables. Either way one catalog, shared by every session of the engine.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use accelsql_storage::{FileCache, StoreCatalog, TableStore};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
use datafusion::execution::memory_pool::MemoryPool;

use super::error::Result;

/// The folder of the data directory that holds the tables.
pub(crate) const TABLES_FOLDER: &str = "tables";
/// The schema every engine has, where unqualified names start.
pub(crate) const DEFAULT_SCHEMA: &str = "public";

/// The table cache's size: `ACCELSQL_TABLE_CACHE` (a size such as `2GiB`; `0`: off), else a
/// quarter of the engine's memory pool (`pool_bytes`).
fn cache_budget(pool_bytes: usize) -> Result<usize> {
    match std::env::var("ACCELSQL_TABLE_CACHE") {
        Ok(text) if !text.trim().is_empty() => {
            Ok(super::options::parse_size("ACCELSQL_TABLE_CACHE", text.trim())?.unwrap_or(0))
        }
        _ => Ok(pool_bytes / 4),
    }
}

/// An engine's tables.
#[derive(Debug, Clone)]
pub(crate) enum Tables {
    /// No data directory: memory tables, shared by the engine's sessions, gone with the process.
    Memory {
        /// The schemas.
        catalog: Arc<MemoryCatalogProvider>,
        /// Who created each table (`schema.table`; absent: SYS).
        owners: Arc<Mutex<HashMap<String, String>>>,
    },
    /// Delta tables under the data directory: shared, durable, transactional.
    Stored {
        /// The folders.
        store: Arc<TableStore>,
        /// The same, as DataFusion's catalog.
        catalog: Arc<StoreCatalog>,
        /// Decoded data files kept in memory (`None`: off).
        cache: Option<Arc<FileCache>>,
    },
}

impl Tables {
    /// The tables of `data_dir` (its `tables` folder, made if absent, with the default schema),
    /// or memory tables without one.
    pub(crate) fn open(
        data_dir: Option<&Path>,
        pool: &Arc<dyn MemoryPool>,
        pool_bytes: usize,
    ) -> Result<Self> {
        let Some(dir) = data_dir else {
            let catalog = MemoryCatalogProvider::new();
            catalog.register_schema(DEFAULT_SCHEMA, Arc::new(MemorySchemaProvider::new()))?;
            return Ok(Self::Memory {
                catalog: Arc::new(catalog),
                owners: Arc::default(),
            });
        };
        let store = Arc::new(TableStore::open(&dir.join(TABLES_FOLDER))?);
        store.create_schema(DEFAULT_SCHEMA, None)?;
        let budget = cache_budget(pool_bytes)?;
        Ok(Self::Stored {
            catalog: Arc::new(StoreCatalog::new(Arc::clone(&store))),
            store,
            cache: (budget > 0).then(|| Arc::new(FileCache::new(pool, budget))),
        })
    }

    /// The catalog every session registers as its default one.
    pub(crate) fn catalog(&self) -> Arc<dyn CatalogProvider> {
        match self {
            Self::Memory { catalog, .. } => Arc::clone(catalog) as _,
            Self::Stored { catalog, .. } => Arc::clone(catalog) as _,
        }
    }

    /// The owner of table `key` (`schema.table`) when the tables are in memory (`None`: SYS).
    pub(crate) fn memory_owner(&self, key: &str) -> Option<String> {
        match self {
            Self::Memory { owners, .. } => owners
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .cloned(),
            Self::Stored { .. } => None,
        }
    }

    /// Records (or with `None` forgets) the owner of memory table `key`.
    pub(crate) fn set_memory_owner(&self, key: &str, owner: Option<&str>) {
        if let Self::Memory { owners, .. } = self {
            let mut owners = owners.lock().unwrap_or_else(|e| e.into_inner());
            match owner {
                Some(o) => owners.insert(key.to_string(), o.to_string()),
                None => owners.remove(key),
            };
        }
    }

    /// The table cache, when the tables are stored and it is on.
    pub(crate) fn cache(&self) -> Option<&Arc<FileCache>> {
        match self {
            Self::Stored { cache, .. } => cache.as_ref(),
            Self::Memory { .. } => None,
        }
    }

    /// The store, when the tables are stored.
    pub(crate) fn store(&self) -> Option<&Arc<TableStore>> {
        match self {
            Self::Memory { .. } => None,
            Self::Stored { store, .. } => Some(store),
        }
    }
}
