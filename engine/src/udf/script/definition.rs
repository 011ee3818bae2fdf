//! What a script is, as the catalog stores it and a UDF is built from it: [`ScriptEntry`] (its
//! definition, options taken out of the body) and [`ConnectionEntry`] (a `CREATE CONNECTION`
//! that scripts read with `exa.get_connection`).

use serde::{Deserialize, Serialize};

/// One stored script: its definition as parsed, options already taken out of the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScriptEntry {
    pub(crate) schema: String,
    pub(crate) name: String,
    /// The language alias it was created with (e.g. `PYTHON3`).
    pub(crate) language: String,
    /// SET (else SCALAR).
    pub(crate) set: bool,
    /// Parameters as (name, type); `None`: `...`.
    pub(crate) params: Option<Vec<(String, String)>>,
    /// `RETURNS type`, `EMITS (cols)`, or `EMITS (...)`.
    pub(crate) output: StoredOutput,
    /// `%perInstanceRequiredAcceleratorDevices`, as written (`None` when absent).
    pub(crate) accelerator: Option<String>,
    /// `%perNodeAndCallInstanceLimit`.
    pub(crate) instance_limit: Option<usize>,
    /// `%perInstanceRequiredAcceleratorMemory`, in bytes.
    #[serde(default)]
    pub(crate) device_memory: Option<u64>,
    /// `%env NAME=value` pairs, in order.
    pub(crate) env: Vec<(String, String)>,
    /// The code to run: the body with option lines blanked (line numbers unchanged).
    pub(crate) code: String,
    /// The statement as the user wrote it.
    pub(crate) text: String,
    /// The body after `AS` as written, options included (`None`: scripts stored before it was
    /// kept; their text is shown as written).
    #[serde(default)]
    pub(crate) body: Option<String>,
    /// Its owner, the user who created it (`None`: SYS, and scripts stored before owners).
    #[serde(default)]
    pub(crate) owner: Option<String>,
}

/// The output clause of a stored script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum StoredOutput {
    /// `RETURNS type`.
    Returns(String),
    /// `EMITS (col type, …)`.
    Emits(Vec<(String, String)>),
    /// `EMITS (...)`.
    DynamicEmits,
}

impl ScriptEntry {
    /// `SCALAR RETURNS`, `SET EMITS`, …
    pub(crate) fn kind(&self) -> &'static str {
        match (self.set, &self.output) {
            (false, StoredOutput::Returns(_)) => "SCALAR RETURNS",
            (false, _) => "SCALAR EMITS",
            (true, StoredOutput::Returns(_)) => "SET RETURNS",
            (true, _) => "SET EMITS",
        }
    }

    /// The parameters as written: `x DOUBLE, y VARCHAR(10)`, or `...`.
    pub(crate) fn inputs_text(&self) -> String {
        match &self.params {
            None => "...".to_string(),
            Some(params) => columns_text(params),
        }
    }

    /// `RETURNS type` or `EMITS (…)`.
    pub(crate) fn output_text(&self) -> String {
        match &self.output {
            StoredOutput::Returns(t) => format!("RETURNS {t}"),
            StoredOutput::Emits(cols) => format!("EMITS ({})", columns_text(cols)),
            StoredOutput::DynamicEmits => "EMITS (...)".to_string(),
        }
    }

    /// The text Exasol stores for the script (`SCRIPT_TEXT`), normalized from its definition:
    /// `CREATE PYTHON3 SCALAR SCRIPT "F" ("X" DECIMAL(18,0)) RETURNS DOUBLE AS` and the body as
    /// written on the lines after it; `shown` gives a name as the reader's dialect shows it.
    /// Tools find scripts by it with `LIKE`.
    pub(crate) fn normalized_text(&self, shown: &dyn Fn(&str) -> String) -> String {
        let Some(body) = &self.body else {
            return self.text.clone();
        };
        let quoted = |name: &str| format!("\"{}\"", shown(name).replace('"', "\"\""));
        let typed = |cols: &[(String, String)]| {
            cols.iter()
                .map(|(n, t)| format!("{} {}", quoted(n), exasol_type_text(t)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let inputs = match &self.params {
            None => "...".to_string(),
            Some(params) => typed(params),
        };
        let output = match &self.output {
            StoredOutput::Returns(t) => format!("RETURNS {}", exasol_type_text(t)),
            StoredOutput::Emits(cols) => format!("EMITS ({})", typed(cols)),
            StoredOutput::DynamicEmits => "EMITS (...)".to_string(),
        };
        format!(
            "CREATE {} {} SCRIPT {} ({inputs}) {output} AS\n{body}",
            self.language,
            if self.set { "SET" } else { "SCALAR" },
            quoted(&self.name),
        )
    }

    /// The options, as `%key value;` lines joined by spaces.
    pub(crate) fn options_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(a) = &self.accelerator {
            parts.push(format!("%perInstanceRequiredAcceleratorDevices {a};"));
        }
        if let Some(n) = self.instance_limit {
            parts.push(format!("%perNodeAndCallInstanceLimit {n};"));
        }
        if let Some(bytes) = self.device_memory {
            parts.push(format!(
                "%perInstanceRequiredAcceleratorMemory {};",
                exact_size(bytes)
            ));
        }
        for (k, v) in &self.env {
            parts.push(format!("%env {k}={v};"));
        }
        parts.join(" ")
    }
}

/// `bytes` in the largest binary unit that writes it exactly (`6GiB`, `1536MiB`, `1000`).
fn exact_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A type as Exasol writes it (`INT` is `DECIMAL(18,0)`, `VARCHAR(10)` is `VARCHAR(10) UTF8`).
fn exasol_type_text(text: &str) -> String {
    crate::udf_runtime::script::SqlType::parse(text)
        .map(|t| t.exasol_name())
        .unwrap_or_else(|_| text.to_uppercase())
}

fn columns_text(columns: &[(String, String)]) -> String {
    columns
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A connection (`CREATE CONNECTION`): what `exa.get_connection(name)` gives a script.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConnectionEntry {
    /// The name, folded as Exasol folds it (unquoted: upper case).
    pub(crate) name: String,
    /// `TO 'address'`.
    pub(crate) address: String,
    /// `USER 'user'` (empty when absent).
    pub(crate) user: String,
    /// `IDENTIFIED BY 'password'` (empty when absent); never shown by a system table.
    pub(crate) password: String,
    /// When it was created, in microseconds since the Unix epoch (`CREATED` of the system views).
    pub(crate) created_micros: i64,
    /// Its owner, the user who created it (`None`: SYS, and connections stored before owners).
    #[serde(default)]
    pub(crate) owner: Option<String>,
}

/// The password stays out of logs and debug output.
impl std::fmt::Debug for ConnectionEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionEntry")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// A connection name as Exasol folds it: a quoted name as written, an unquoted one in upper case
/// (`'my_conn'` finds `MY_CONN`).
pub(crate) fn folded_connection_name(name: &str) -> String {
    let trimmed = name.trim();
    match trimmed.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(quoted) => quoted.to_string(),
        None => trimmed.to_ascii_uppercase(),
    }
}
