//! What a single call asks for: which function ([`SingleCall`]) and, for the IMPORT and EXPORT
//! ones, Exasol's specification object ([`ImportSpec`], [`ExportSpec`]).

use super::ConnectionInfo;

/// What `IMPORT FROM SCRIPT s [AT connection] WITH k = 'v' …` tells
/// `generate_sql_for_import_spec(import_spec)`. In Python the object allows attribute and
/// `[key]` access; `parameters` is a `dict`, `connection` an `exa.ConnectionInformation` or
/// `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSpec {
    /// Whether the IMPORT is a subselect (`SELECT * FROM (IMPORT …)`), whose columns are then
    /// given.
    pub is_subselect: bool,
    /// The subselect's column names (`None` when it is no subselect).
    pub subselect_column_names: Option<Vec<String>>,
    /// The subselect's column types as SQL writes them, e.g. `DECIMAL(18,0)` (`None` when it is
    /// no subselect).
    pub subselect_column_types: Option<Vec<String>>,
    /// The connection named by `AT name`.
    pub connection_name: Option<String>,
    /// The connection given inline (`AT 'address' USER … IDENTIFIED BY …`), or the one named.
    pub connection: Option<ConnectionInfo>,
    /// The `WITH` parameters, in order; keys as SQL resolves identifiers (unquoted ones
    /// upper-case: the engine folds them), values as written. Passed verbatim.
    pub parameters: Vec<(String, String)>,
}

/// What `EXPORT … INTO SCRIPT s [AT connection] WITH k = 'v' …` tells
/// `generate_sql_for_export_spec(export_spec)` (in Python as for [`ImportSpec`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportSpec {
    /// The `WITH` parameters, as in [`ImportSpec::parameters`].
    pub parameters: Vec<(String, String)>,
    /// The connection named by `AT name`.
    pub connection_name: Option<String>,
    /// The connection given inline, or the one named.
    pub connection: Option<ConnectionInfo>,
    /// Whether the EXPORT says `TRUNCATE`.
    pub has_truncate: bool,
    /// Whether the EXPORT says `REPLACE`.
    pub has_replace: bool,
    /// The `CREATED BY` text.
    pub created_by: Option<String>,
    /// The exported columns, quoted and qualified as Exasol writes them (`"T"."A"`).
    pub source_column_names: Option<Vec<String>>,
}

/// Which function a [`single_call`](super::single_call()) calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SingleCall {
    /// `default_output_columns()`: the EMITS columns of a call that gives none, as SQL text
    /// (`"a varchar(123), b double"`). `exa.meta.input_columns` are the script's parameters;
    /// `exa.meta.output_columns` is empty.
    DefaultOutputColumns,
    /// `generate_sql_for_import_spec(import_spec)`: the SELECT an `IMPORT FROM SCRIPT` runs.
    ImportSpec(ImportSpec),
    /// `generate_sql_for_export_spec(export_spec)`: the SQL an `EXPORT INTO SCRIPT` runs.
    ExportSpec(ExportSpec),
}

impl SingleCall {
    /// The Python function's name.
    pub fn function(&self) -> &'static str {
        match self {
            SingleCall::DefaultOutputColumns => "default_output_columns",
            SingleCall::ImportSpec(_) => "generate_sql_for_import_spec",
            SingleCall::ExportSpec(_) => "generate_sql_for_export_spec",
        }
    }
}
