//! The storage layer's error type: a stable code for every failure a user can see, and the
//! classification of delta-rs, object-store and I/O failures into them.

use std::error::Error as StdError;

use datafusion::error::DataFusionError;
use deltalake::DeltaTableError;
use deltalake::kernel::transaction::TransactionError;

/// Result type of this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Everything a table operation can fail with. [`StorageError::code`] gives the stable code
/// that also starts the message, e.g. `[40001] serialization failure on table …`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// Another transaction changed what this one read or rewrote (Exasol's and SQL's 40001):
    /// nothing of this statement or transaction was kept; running it again is safe.
    #[error(
        "[{}] serialization failure on table {table}: {detail}; nothing was written, run the \
         statement (or the transaction) again",
        Self::CONFLICT
    )]
    Conflict {
        /// The table.
        table: String,
        /// What the other transaction did.
        detail: String,
    },

    /// The disk (or the process's file-size limit) is full: the table is unchanged.
    #[error(
        "[{}] disk full while writing table {table}: {detail}; the table is unchanged",
        Self::DISK_FULL
    )]
    DiskFull {
        /// The table.
        table: String,
        /// The operating system's words.
        detail: String,
    },

    /// A file of the table (its log or its data) cannot be read as what it should be.
    #[error("[{}] table {table} is damaged: {detail}", Self::CORRUPT)]
    Corrupt {
        /// The table.
        table: String,
        /// Which file, and what is wrong with it.
        detail: String,
    },

    /// Another I/O failure on a table's files.
    #[error("[{}] I/O error on table {table}: {detail}", Self::IO_ERROR)]
    Io {
        /// The table.
        table: String,
        /// What failed.
        detail: String,
    },

    /// A table, version or file that is not there.
    #[error("[{}] {what} does not exist", Self::NOT_FOUND)]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// A table or schema of that name exists already.
    #[error("[{}] {what} already exists", Self::EXISTS)]
    Exists {
        /// What exists.
        what: String,
    },

    /// Something tables cannot do (a column type Delta Lake cannot hold, a table feature
    /// delta-rs does not support).
    #[error("[{}] {what}", Self::UNSUPPORTED)]
    Unsupported {
        /// What, and why.
        what: String,
    },

    /// A value that does not fit the column it goes into.
    #[error("[{}] {detail}", Self::DATA)]
    Data {
        /// Which value, which column.
        detail: String,
    },

    /// A NULL for a NOT NULL column.
    #[error(
        "[{}] NULL in column {column} of table {table}, which is NOT NULL",
        Self::NOT_NULL
    )]
    NotNull {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },

    /// A statement the transaction's state does not allow.
    #[error("[{}] {detail}", Self::TRANSACTION_STATE)]
    TransactionState {
        /// What, and why.
        detail: String,
    },

    /// A failure inside the query engine while reading or writing rows.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),

    /// Any other failure of delta-rs on a table.
    #[error("[{}] table {table}: {detail}", Self::INTERNAL)]
    Internal {
        /// The table.
        table: String,
        /// What delta-rs said.
        detail: String,
    },
}

impl StorageError {
    /// [`StorageError::Conflict`] (SQLSTATE `serialization_failure`, Exasol's 40001).
    pub const CONFLICT: &'static str = "40001";
    /// [`StorageError::DiskFull`] (SQLSTATE `disk_full`).
    pub const DISK_FULL: &'static str = "53100";
    /// [`StorageError::Corrupt`] (SQLSTATE `data_corrupted`).
    pub const CORRUPT: &'static str = "XX001";
    /// [`StorageError::Io`] (SQLSTATE `io_error`).
    pub const IO_ERROR: &'static str = "58030";
    /// [`StorageError::NotFound`] (SQLSTATE `undefined_object`).
    pub const NOT_FOUND: &'static str = "42704";
    /// [`StorageError::Exists`] (SQLSTATE `duplicate_object`).
    pub const EXISTS: &'static str = "42710";
    /// [`StorageError::Unsupported`] (SQLSTATE `feature_not_supported`).
    pub const UNSUPPORTED: &'static str = "0A000";
    /// [`StorageError::Data`] (SQLSTATE `data_exception`).
    pub const DATA: &'static str = "22000";
    /// [`StorageError::NotNull`] (SQLSTATE `not_null_violation`).
    pub const NOT_NULL: &'static str = "23502";
    /// [`StorageError::TransactionState`] (SQLSTATE `invalid_transaction_state`).
    pub const TRANSACTION_STATE: &'static str = "25000";
    /// [`StorageError::Internal`].
    pub const INTERNAL: &'static str = "XX000";

    /// The stable code of this error (for [`StorageError::DataFusion`], DataFusion's class:
    /// the engine above gives it its own).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Conflict { .. } => Self::CONFLICT,
            Self::DiskFull { .. } => Self::DISK_FULL,
            Self::Corrupt { .. } => Self::CORRUPT,
            Self::Io { .. } => Self::IO_ERROR,
            Self::NotFound { .. } => Self::NOT_FOUND,
            Self::Exists { .. } => Self::EXISTS,
            Self::Unsupported { .. } => Self::UNSUPPORTED,
            Self::Data { .. } => Self::DATA,
            Self::NotNull { .. } => Self::NOT_NULL,
            Self::TransactionState { .. } => Self::TRANSACTION_STATE,
            Self::DataFusion(_) => "XX000",
            Self::Internal { .. } => Self::INTERNAL,
        }
    }

    /// The same error again (for each of several statements a failed group commit held): the
    /// same code and message.
    pub fn duplicate(&self) -> Self {
        match self {
            Self::Conflict { table, detail } => Self::Conflict {
                table: table.clone(),
                detail: detail.clone(),
            },
            Self::DiskFull { table, detail } => Self::DiskFull {
                table: table.clone(),
                detail: detail.clone(),
            },
            Self::Corrupt { table, detail } => Self::Corrupt {
                table: table.clone(),
                detail: detail.clone(),
            },
            Self::Io { table, detail } => Self::Io {
                table: table.clone(),
                detail: detail.clone(),
            },
            Self::NotFound { what } => Self::NotFound { what: what.clone() },
            Self::Exists { what } => Self::Exists { what: what.clone() },
            Self::Unsupported { what } => Self::Unsupported { what: what.clone() },
            Self::Data { detail } => Self::Data {
                detail: detail.clone(),
            },
            Self::NotNull { table, column } => Self::NotNull {
                table: table.clone(),
                column: column.clone(),
            },
            Self::TransactionState { detail } => Self::TransactionState {
                detail: detail.clone(),
            },
            Self::DataFusion(e) => Self::Internal {
                table: String::new(),
                detail: e.to_string(),
            },
            Self::Internal { table, detail } => Self::Internal {
                table: table.clone(),
                detail: detail.clone(),
            },
        }
    }

    /// This error for DataFusion, which hands it back unchanged to whoever downcasts it.
    pub fn into_datafusion(self) -> DataFusionError {
        match self {
            Self::DataFusion(e) => e,
            other => DataFusionError::External(Box::new(other)),
        }
    }

    /// The error a failure of delta-rs on `table` stands for.
    pub fn from_delta(table: &str, e: DeltaTableError) -> Self {
        let table = table.to_string();
        if let Some(detail) = disk_full(&e) {
            return Self::DiskFull { table, detail };
        }
        match e {
            DeltaTableError::Transaction { source } => match source {
                TransactionError::CommitConflict(c) => Self::Conflict {
                    table,
                    detail: first_line(&c.to_string()),
                },
                TransactionError::VersionAlreadyExists(v) => Self::Conflict {
                    table,
                    detail: format!("another commit took version {v} first"),
                },
                TransactionError::MaxCommitAttempts(n) => Self::Conflict {
                    table,
                    detail: format!(
                        "{n} other commits won the race for the next version while this one tried"
                    ),
                },
                TransactionError::ObjectStore { source } => Self::Io {
                    table,
                    detail: source.to_string(),
                },
                other => Self::Internal {
                    table,
                    detail: other.to_string(),
                },
            },
            DeltaTableError::VersionAlreadyExists(v) => Self::Conflict {
                table,
                detail: format!("another commit took version {v} first"),
            },
            DeltaTableError::InvalidJsonLog {
                json_err,
                line,
                version,
            } => Self::Corrupt {
                table,
                detail: format!(
                    "log entry _delta_log/{version:020}.json is not valid JSON ({json_err}) at \
                     {line:?}"
                ),
            },
            DeltaTableError::InvalidStatsJson { json_err } => Self::Corrupt {
                table,
                detail: format!("a file's statistics in the log are not valid JSON: {json_err}"),
            },
            e @ (DeltaTableError::Parquet { .. }
            | DeltaTableError::KernelError(_)
            | DeltaTableError::Kernel { .. }
            | DeltaTableError::InvalidData { .. }
            | DeltaTableError::SerializeLogJson { .. }
            | DeltaTableError::MetadataError(_)
            | DeltaTableError::NoSchema) => Self::Corrupt {
                table,
                detail: first_line(&e.to_string()),
            },
            DeltaTableError::NotATable(path) => Self::Corrupt {
                table,
                detail: format!("no Delta log at {path}"),
            },
            DeltaTableError::InvalidVersion(v) => Self::NotFound {
                what: format!("version {v} of table {table}"),
            },
            DeltaTableError::ObjectStore { source } => Self::Io {
                table,
                detail: source.to_string(),
            },
            DeltaTableError::Io { source } => Self::Io {
                table,
                detail: source.to_string(),
            },
            e @ DeltaTableError::UnsupportedColumnMapping { .. } => Self::Unsupported {
                what: format!("table {table}: {e}"),
            },
            other => Self::Internal {
                table,
                detail: other.to_string(),
            },
        }
    }

    /// The error a DataFusion failure while writing `table` stands for: a full disk is
    /// [`StorageError::DiskFull`], anything else stays DataFusion's.
    pub fn from_write(table: &str, e: DataFusionError) -> Self {
        match disk_full(&e) {
            Some(detail) => Self::DiskFull {
                table: table.to_string(),
                detail,
            },
            None => Self::DataFusion(e),
        }
    }
}

/// The first line of `text` (delta-rs's conflict messages add a paragraph of help for Spark).
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or(text).trim().to_string()
}

/// The operating system's words when `e` (or an error it wraps) is a full disk, an exceeded
/// quota or an exceeded file-size limit.
pub(crate) fn disk_full(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(e);
    let mut depth = 0;
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(
                io.raw_os_error(),
                Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT)
            ) || io.kind() == std::io::ErrorKind::StorageFull
                || io.kind() == std::io::ErrorKind::FileTooLarge
                || io.kind() == std::io::ErrorKind::QuotaExceeded
            {
                return Some(io.to_string());
            }
        }
        // Some layers keep only the text of the I/O error they wrap.
        let text = err.to_string();
        for words in [
            "No space left on device",
            "File too large",
            "Disk quota exceeded",
        ] {
            if text.contains(words) {
                return Some(words.to_string());
            }
        }
        depth += 1;
        if depth > 16 {
            break;
        }
        current = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_start_the_messages() {
        let e = StorageError::Conflict {
            table: "public.t".into(),
            detail: "a concurrent transaction deleted the same data".into(),
        };
        assert_eq!(e.code(), "40001");
        assert!(
            e.to_string()
                .starts_with("[40001] serialization failure on table public.t")
        );
        let e = StorageError::from_delta("public.t", DeltaTableError::VersionAlreadyExists(3));
        assert_eq!(e.code(), "40001");
    }

    #[test]
    fn a_full_disk_is_found_inside_wrappers() {
        let io = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let wrapped = DataFusionError::External(Box::new(io));
        let e = StorageError::from_write("s.t", wrapped);
        assert_eq!(e.code(), "53100", "{e}");
        let big = std::io::Error::from_raw_os_error(libc::EFBIG);
        let e = StorageError::from_delta("s.t", DeltaTableError::Io { source: big });
        assert_eq!(e.code(), "53100", "{e}");
        let other = std::io::Error::from_raw_os_error(libc::EACCES);
        let e = StorageError::from_delta("s.t", DeltaTableError::Io { source: other });
        assert_eq!(e.code(), "58030", "{e}");
    }
}
