//! accelsql's tables: Delta Lake tables (through delta-rs) under a data directory, shared by
//! every session, durable, each statement atomic.
//!
//! - [`store::TableStore`]: the tables under one folder — a schema is a folder, a table a Delta
//!   table in it — and [`catalog::StoreCatalog`], the same as DataFusion's catalog.
//! - [`table::StoredTable`]: one table's log and the newest state read of it;
//!   [`table::TableSnapshot`]: one version (columns, data files, owner).
//! - [`provider::DeltaProvider`]: a table for DataFusion — scans are DataFusion's own Parquet
//!   scans of the statement's files; `INSERT`, `DELETE`, `UPDATE`, `TRUNCATE` are the plans of
//!   [`dml`].
//! - [`txn::Transaction`]: a session's transaction — one snapshot per statement (autocommit) or
//!   per transaction (`SET AUTOCOMMIT OFF`), its own uncommitted writes, Delta's optimistic
//!   commits with delta-rs's conflict checks (40001).
//! - [`maintenance`]: `OPTIMIZE` (and automatic compaction of many small files), `VACUUM`.
//! - [`types::TableSchema`]: a table's columns as the engine sees them and as Delta holds them.
//! - [`cache::FileCache`]: decoded data files kept in memory (the buffer cache).
//!
//! Nothing here writes a storage format of its own: the files are Parquet, the log is Delta's,
//! and both are written by delta-rs, so DuckDB, Polars, pandas and Spark read the tables.

pub mod cache;
pub mod catalog;
pub mod ddl;
pub mod dml;
pub mod error;
pub mod maintenance;
pub mod merge;
pub mod names;
pub mod provider;
pub mod scan;
pub mod store;
pub mod table;
pub mod txn;
pub mod types;
pub mod write;

pub use crate::cache::FileCache;
pub use crate::catalog::{AsOf, StoreCatalog};
pub use crate::error::{Result, StorageError};
pub use crate::provider::DeltaProvider;
pub use crate::store::{CreateMode, Created, InitialRows, TableStore};
pub use crate::table::{DataFile, StoredTable, TableSnapshot};
pub use crate::txn::{Change, ChangeKind, Transaction};
pub use crate::types::TableSchema;

#[cfg(test)]
mod tests;
