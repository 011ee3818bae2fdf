//! The book's configuration reference (`docs/src/configuration.md`), made from the code: the
//! environment variables (listed here, once), the session settings (the engine's
//! `AccelsqlOptions`) and every command's options (clap's definitions). A test fails when the
//! page and the code differ; `ACCELSQL_BLESS=1 cargo test -p accelsql-cli reference` rewrites it.

use accelsql_engine::datafusion::config::ExtensionOptions;
use clap::CommandFactory;

/// The environment variables a user sets: name, meaning.
pub(crate) const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "ACCELSQL_SIMULATED_GPUS",
        "`N`: use N simulated devices instead of NVML (tests, CI, laptops)",
    ),
    (
        "CUDA_VISIBLE_DEVICES",
        "limits and orders the devices accelsql sees (indices or UUIDs; a bad entry is an error, `\"\"`/`-1` hide all)",
    ),
    (
        "ACCELSQL_DEVICE_LOCK_DIR",
        "directory of cross-process device locks (opt-in for the engine; `gpu run` always locks)",
    ),
    (
        "ACCELSQL_GPU_WAIT_TIMEOUT",
        "default bound on waiting for the node lease, e.g. `30s`",
    ),
    (
        "ACCELSQL_GPU_SHARING",
        "`exclusive` (default: one statement owns every GPU) or `memory` (statements that declare their device memory share a GPU; see \"Sharing a GPU by memory\"); `serve` and `cluster executor` also take `--gpu-sharing`",
    ),
    (
        "ACCELSQL_GPU_MEMORY_HEADROOM",
        "under `memory` sharing, the share of each GPU's memory left unreserved, e.g. `10%` (the default); also `--gpu-memory-headroom`",
    ),
    (
        "ACCELSQL_GPU_UUIDS",
        "set by `accelsql gpu run` for the command it starts: the UUIDs of the devices it was given",
    ),
    (
        "ACCELSQL_DATA_DIR",
        "the shell's and `serve`'s data directory when `--data-dir` is not given (default `$XDG_DATA_HOME/accelsql`, else `~/.local/share/accelsql`); `:memory:` or empty: none (tables in memory)",
    ),
    (
        "ACCELSQL_AUTO_COMPACT",
        "`off`: stored tables are not compacted in the background after many small writes (`OPTIMIZE t` still does it)",
    ),
    (
        "ACCELSQL_TABLE_CACHE",
        "the size of the engine's cache of stored tables' recently read files, e.g. `2GiB`; `0`: off",
    ),
    (
        "ACCELSQL_NVML_LIBRARY",
        "path of `libnvidia-ml.so.1` when it is not on the loader path",
    ),
    (
        "ACCELSQL_KERNEL_CACHE_DIR",
        "on-disk cache of compiled CUDA kernels (CUBIN/PTX per source and architecture); default per user (`~/.cache/accelsql/kernels`), empty: none",
    ),
];

/// The variables the project's own tests and benchmarks read: name, meaning.
pub(crate) const TEST_ENVIRONMENT: &[(&str, &str)] = &[
    (
        "ACCELSQL_REQUIRE_GPU",
        "set: the GPU tests (`gpu_differential`, `gpu_sql`) fail instead of skipping when no CUDA device is found",
    ),
    (
        "ACCELSQL_SOAK_SECS",
        "how long the server soak's clients run (seconds; 30 in the test command)",
    ),
    (
        "ACCELSQL_CLUSTER_SOAK_SECS",
        "how long the cluster soak runs (seconds)",
    ),
    (
        "ACCELSQL_FAKE_CUDA_MEMORY_MIB",
        "the fake CUDA driver's (`scripts/fake-cuda/`) device memory, in MiB",
    ),
    (
        "ACCELSQL_FAKE_CUDA_FAIL_LAUNCH",
        "set: the fake CUDA driver fails kernel launches (the CPU fallback's tests)",
    ),
    (
        "ACCELSQL_BENCH_FAKE_GPU",
        "set: `benches/gpu_builtins.rs` runs its GPU paths on a fake-CUDA device as a smoke run, printing no GPU figures",
    ),
    (
        "ACCELSQL_BLESS",
        "set: `cargo test -p accelsql-cli reference` rewrites this page from the code",
    ),
    (
        "ACCELSQL_TOKEN",
        "the server token `benches/flight_clients.rs` logs in with (a server it did not start)",
    ),
    (
        "ACCELSQL_BENCH_MAX_ROWS",
        "the largest row count `benches/gpu_builtins.rs` measures",
    ),
    (
        "ACCELSQL_BENCH_SCALE",
        "the benchmark harness's scale when `--scale` is not given",
    ),
    (
        "ACCELSQL_BENCH_VENV",
        "the virtualenv of the benchmarks' Python peers (DuckDB, ADBC)",
    ),
    (
        "ACCELSQL_BENCH_TABLES",
        "`writes`, `bulk` or `scans`: the `tables` suite runs that part alone",
    ),
    (
        "ACCELSQL_BENCH_SERVER",
        "`metrics`: the `server` suite runs its metrics-scrape part alone",
    ),
    (
        "ACCELSQL_BENCH_RUSTC",
        "set by `benchmarks/build.rs`: the compiler version the report records",
    ),
    (
        "ACCELSQL_BENCH_LOCKED",
        "set by `benchmarks/build.rs`: the locked versions of the peers the report records",
    ),
];

/// Markdown table cells: `|` and line breaks escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// One command's options as a table (nothing when it has none).
fn options_table(command: &clap::Command) -> String {
    let mut rows = String::new();
    for arg in command.get_arguments() {
        if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        let name = match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            (None, None) => arg.get_id().to_string().to_uppercase(),
        };
        let value = arg
            .get_value_names()
            .map(|v| v.iter().map(|n| format!(" {n}")).collect::<String>())
            .filter(|_| arg.get_action().takes_values())
            .unwrap_or_default();
        let defaults: Vec<_> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        rows.push_str(&format!(
            "| `{name}{value}` | {} | {} |\n",
            if defaults.is_empty() {
                String::new()
            } else {
                format!("`{}`", defaults.join(","))
            },
            cell(&help)
        ));
    }
    if rows.is_empty() {
        return String::new();
    }
    format!("| option | default | meaning |\n| --- | --- | --- |\n{rows}")
}

/// The commands below `command` (itself included) with their full names, depth first.
fn commands<'a>(
    prefix: &str,
    command: &'a clap::Command,
    out: &mut Vec<(String, &'a clap::Command)>,
) {
    let name = if prefix.is_empty() {
        command.get_name().to_string()
    } else {
        format!("{prefix} {}", command.get_name())
    };
    out.push((name.clone(), command));
    for sub in command.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        commands(&name, sub, out);
    }
}

/// The book's configuration reference (`docs/src/configuration.md`), as Markdown: every
/// environment variable accelsql reads, every session setting with its default, and every
/// command's options.
pub fn configuration_reference() -> String {
    let mut page = String::from(
        "# Configuration\n\n<!-- Made from the code by cli/src/reference.rs: edit the code, then \
         `ACCELSQL_BLESS=1 cargo test -p accelsql-cli reference` rewrites this page (the test \
         command fails while they differ). -->\n\n\
         ## Environment variables\n\n| variable | meaning |\n| --- | --- |\n",
    );
    for (name, meaning) in ENVIRONMENT {
        page.push_str(&format!("| `{name}` | {} |\n", cell(meaning)));
    }
    page.push_str(
        "\nFor the project's own tests and benchmarks:\n\n| variable | meaning |\n| --- | --- |\n",
    );
    for (name, meaning) in TEST_ENVIRONMENT {
        page.push_str(&format!("| `{name}` | {} |\n", cell(meaning)));
    }
    page.push_str(
        "\n## Session settings\n\n`SET accelsql.<name> = <value>` in a session (`RESET` and \
         `SHOW` too); the value shown is the default.\n\n| setting | default | meaning |\n| --- \
         | --- | --- |\n",
    );
    for entry in accelsql_engine::AccelsqlOptions::default().entries() {
        page.push_str(&format!(
            "| `{}` | {} | {} |\n",
            entry.key,
            entry
                .value
                .filter(|v| !v.is_empty())
                .map_or_else(String::new, |v| format!("`{v}`")),
            cell(entry.description)
        ));
    }
    page.push_str("\n## Command-line options\n");
    let root = crate::Cli::command();
    let mut all = Vec::new();
    commands("", &root, &mut all);
    for (name, command) in all {
        let about = command
            .get_about()
            .map(|a| cell(&a.to_string()))
            .unwrap_or_default();
        let table = options_table(command);
        if table.is_empty() && command.get_subcommands().next().is_some() {
            continue;
        }
        page.push_str(&format!("\n### `{name}`\n\n"));
        if !about.is_empty() {
            page.push_str(&format!("{about}\n\n"));
        }
        page.push_str(if table.is_empty() {
            "No options.\n"
        } else {
            &table
        });
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/configuration.md")
    }

    #[test]
    fn the_books_configuration_reference_is_made_from_the_code() {
        let made = configuration_reference();
        if std::env::var_os("ACCELSQL_BLESS").is_some() {
            std::fs::write(page_path(), &made).unwrap();
        }
        let page = std::fs::read_to_string(page_path()).unwrap_or_default();
        assert!(
            page == made,
            "docs/src/configuration.md differs from the code's options: run \
             `ACCELSQL_BLESS=1 cargo test -p accelsql-cli reference` and commit the page"
        );
        for needed in [
            "--http",
            "accelsql.sql_dialect",
            "ACCELSQL_DATA_DIR",
            "### `accelsql cluster executor`",
        ] {
            assert!(made.contains(needed), "{needed} is not in the reference");
        }
    }

    #[test]
    fn every_environment_variable_the_code_reads_is_listed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let listed: std::collections::HashSet<&str> = ENVIRONMENT
            .iter()
            .chain(TEST_ENVIRONMENT)
            .map(|(name, _)| *name)
            .collect();
        // Markers one of the project's processes sets for a child it starts, not settings.
        let internal = |name: &str| {
            name == "ACCELSQL_"
                || name.ends_with("_CHILD")
                || name.contains("_TEST")
                || name.ends_with("_HELPER")
                || matches!(name, "ACCELSQL_CATALOG_DIR" | "ACCELSQL_TABLES_DIR")
        };
        let mut missing = std::collections::BTreeSet::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if path.is_dir() {
                    if !name.starts_with('.') && !matches!(name.as_str(), "target" | "vendor") {
                        stack.push(path);
                    }
                    continue;
                }
                if !name.ends_with(".rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for piece in text.split("\"ACCELSQL_").skip(1) {
                    let var: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    let var = format!("ACCELSQL_{var}");
                    if piece[var.len() - "ACCELSQL_".len()..].starts_with('"')
                        && !internal(&var)
                        && !listed.contains(var.as_str())
                    {
                        missing.insert(var);
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "read by the code, not in cli/src/reference.rs: {missing:?}"
        );
    }
}
