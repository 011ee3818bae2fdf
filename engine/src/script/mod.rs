//! UDF scripts (`CREATE <LANG> SCALAR|SET SCRIPT … AS <body> /`): the DDL accelsql parses
//! itself, the script catalog, and the adapters that run scripts as UDFs.

mod catalog;
mod ddl;
mod dynamic;
mod languages;
mod names;
mod options;
mod travel;
mod udf;

pub(crate) use catalog::{ConnectionEntry, ScriptCatalog, ScriptEntry, StoredOutput};
pub(crate) use ddl::is_script_ddl;
pub(crate) use languages::SessionScripts;
pub(crate) use names::{NameScope, resolve_script_calls};
pub(crate) use options::logical_line_starts;
pub(crate) use travel::ScriptOrigin;
pub(crate) use udf::{ScriptUdf, finish_workers};
