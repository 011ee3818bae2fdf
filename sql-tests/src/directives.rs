//! Per-file settings written as comments at the top of a `.slt` file:
//! `# accelsql: simulated_gpus = 2`.

/// The settings a file asks for in its leading comments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    /// `simulated_gpus = N`: the file's engine simulates N devices, whatever
    /// `ACCELSQL_SIMULATED_GPUS` says.
    pub simulated_gpus: Option<usize>,
    /// `url_tables = true`: the file's engine resolves a file, folder or glob named as a table
    /// (`SELECT * FROM '$__TEST_DIR__/x.parquet'`), as `EngineOptions::url_tables` does.
    pub url_tables: bool,
    /// `single_node = true`: the file's answers are those of one node with the devices it
    /// names (e.g. a node without GPUs); a run through a cluster, whose nodes have their own
    /// devices, skips it.
    pub single_node: bool,
    /// `gpu_sharing = memory`: the file's engine shares its GPUs by memory (see
    /// `SchedulerConfig::gpu_sharing`).
    pub gpu_sharing: Option<accelsql_engine::gpu_scheduler::GpuSharing>,
    /// `data_dir = true`: the file's engine keeps its tables (Delta Lake tables), scripts and
    /// users in a fresh data directory of its own, removed after the file.
    pub data_dir: bool,
}

/// The prefix of a directive line.
pub const DIRECTIVE_PREFIX: &str = "# accelsql:";

impl Directives {
    /// Reads the directives of a file: lines `# accelsql: key = value` among the comments and
    /// blank lines before its first record. An unknown key or a bad value is an error, so that a
    /// typo cannot silently run a file with the wrong devices.
    ///
    /// ```
    /// use accelsql_sql_tests::directives::Directives;
    ///
    /// let d = Directives::parse("# Placement with two devices.\n# accelsql: simulated_gpus = 2\n\nquery T\nSELECT 1\n").unwrap();
    /// assert_eq!(d.simulated_gpus, Some(2));
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut directives = Self::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if !line.starts_with('#') {
                break;
            }
            let Some(body) = line.strip_prefix(DIRECTIVE_PREFIX) else {
                continue;
            };
            let at = number + 1;
            let (key, value) = body
                .split_once('=')
                .ok_or_else(|| format!("line {at}: write `{DIRECTIVE_PREFIX} key = value`"))?;
            match key.trim() {
                "simulated_gpus" => {
                    let value = value.trim();
                    let n = value.parse::<usize>().map_err(|_| {
                        format!("line {at}: simulated_gpus = {value:?} is not a device count")
                    })?;
                    directives.simulated_gpus = Some(n);
                }
                "url_tables" => {
                    let value = value.trim();
                    directives.url_tables = value.parse::<bool>().map_err(|_| {
                        format!("line {at}: url_tables = {value:?} is not true or false")
                    })?;
                }
                "single_node" => {
                    let value = value.trim();
                    directives.single_node = value.parse::<bool>().map_err(|_| {
                        format!("line {at}: single_node = {value:?} is not true or false")
                    })?;
                }
                "gpu_sharing" => {
                    let value = value.trim();
                    directives.gpu_sharing = Some(
                        accelsql_engine::gpu_scheduler::GpuSharing::parse(value)
                            .map_err(|e| format!("line {at}: {e}"))?,
                    );
                }
                "data_dir" => {
                    let value = value.trim();
                    directives.data_dir = value.parse::<bool>().map_err(|_| {
                        format!("line {at}: data_dir = {value:?} is not true or false")
                    })?;
                }
                other => {
                    return Err(format!(
                        "line {at}: unknown directive {other:?} (known: simulated_gpus, \
                         url_tables, single_node, gpu_sharing, data_dir)"
                    ));
                }
            }
        }
        Ok(directives)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_read_until_the_first_record() {
        let d = Directives::parse("# accelsql: simulated_gpus = 1\nstatement ok\nSELECT 1\n# accelsql: simulated_gpus = 3\n").unwrap();
        assert_eq!(d.simulated_gpus, Some(1));
        assert!(!d.url_tables);
        assert!(
            Directives::parse("# accelsql: url_tables = true\n")
                .unwrap()
                .url_tables
        );
        assert!(
            Directives::parse("# accelsql: single_node = true\n")
                .unwrap()
                .single_node
        );
        assert_eq!(
            Directives::parse("query I\nSELECT 1\n").unwrap(),
            Directives::default()
        );
    }

    #[test]
    fn typos_are_errors() {
        assert!(
            Directives::parse("# accelsql: simulated_gpu = 2")
                .unwrap_err()
                .contains("unknown directive")
        );
        assert!(
            Directives::parse("# accelsql: simulated_gpus = two")
                .unwrap_err()
                .contains("not a device count")
        );
        assert!(Directives::parse("# accelsql: simulated_gpus").is_err());
        assert!(
            Directives::parse("# accelsql: url_tables = yes")
                .unwrap_err()
                .contains("not true or false")
        );
    }
}
