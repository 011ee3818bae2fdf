//! The two kinds of `.slt` file the runner knows: accelsql's own suites and upstream
//! DataFusion's files run for parity, told apart by where the file lies.

use std::path::Path;

/// Which rules a `.slt` file runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// accelsql's own suites (`sql-tests/slt`): fixture UDFs registered, simulated devices from
    /// the file's directive or the environment, errors printed with their code
    /// (`[22069] …`), the `accelsql` label set for `onlyif`/`skipif`.
    Accelsql,
    /// Upstream DataFusion's files (any file under `upstream/datafusion-<version>/`): the
    /// session configured as upstream's runner configures its own, no fixtures and no devices,
    /// errors printed as upstream prints them (`DataFusion error: …`), the `Datafusion` label
    /// set, and the `no accelsql UDF calls` rows accelsql adds to EXPLAIN (ANALYZE) left out.
    Upstream,
}

impl Flavor {
    /// The flavor of the file at `path`: [`Flavor::Upstream`] when a folder named `upstream`
    /// holds a folder named `datafusion-…` on the way to it.
    pub fn of_path(path: &Path) -> Self {
        let names: Vec<_> = path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let upstream = names
            .windows(2)
            .any(|w| w[0] == "upstream" && w[1].starts_with("datafusion-"));
        if upstream {
            Self::Upstream
        } else {
            Self::Accelsql
        }
    }

    /// The label `onlyif`/`skipif` conditions test.
    pub fn label(self) -> &'static str {
        match self {
            Self::Accelsql => "accelsql",
            // The label upstream's runner sets (`runner.add_label("Datafusion")`).
            Self::Upstream => "Datafusion",
        }
    }

    /// Statements run on each new session before the file's own records.
    ///
    /// Upstream's runner (`TestContext::try_new_for_test_file`) builds its context from
    /// `SessionConfig::new().with_target_partitions(4)`, information_schema off; an accelsql
    /// session has information_schema on and as many partitions as cores.
    pub fn session_setup(self) -> &'static [&'static str] {
        match self {
            Self::Accelsql => &[],
            Self::Upstream => &[
                "SET datafusion.execution.target_partitions = 4",
                "SET datafusion.catalog.information_schema = false",
                // DataFusion's CREATE SCHEMA leaves the current schema alone.
                "SET accelsql.create_schema_opens = false",
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_under_upstream_datafusion_are_parity_files() {
        assert_eq!(
            Flavor::of_path(Path::new(
                "sql-tests/upstream/datafusion-55.2.0/array/x.slt"
            )),
            Flavor::Upstream
        );
        assert_eq!(
            Flavor::of_path(Path::new("sql-tests/slt/placement.slt")),
            Flavor::Accelsql
        );
        assert_eq!(
            Flavor::of_path(Path::new("upstream/notes.slt")),
            Flavor::Accelsql
        );
    }
}
