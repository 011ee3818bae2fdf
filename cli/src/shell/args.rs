//! The options of the SQL shell (`-c`, `-f`, `--format`, …): what `accelsql` takes without a
//! subcommand.

use std::path::PathBuf;

use clap::Args;

use super::OutputFormat;

/// Options of the SQL shell.
#[derive(Debug, Args)]
pub(crate) struct ShellArgs {
    /// Run the statement(s) in SQL (`;`-separated) and exit; stops at the first error (exit 1).
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SQL",
        conflicts_with = "file"
    )]
    pub(crate) sql: Option<String>,
    /// Run the statements of FILE in order and exit; stops at the first error (exit 1) and says
    /// which statement failed and on which line it starts.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
    /// How results are printed: an aligned table, CSV with a header, one JSON object per row, a
    /// Markdown table, or a Parquet file (with `-o FILE`; it holds the last result).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = OutputFormat::Table)]
    pub(crate) format: OutputFormat,
    /// Write results to FILE (made anew) instead of standard output, as `\o FILE` does.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// After each statement, print its row count and how long it took.
    #[arg(long)]
    pub(crate) timing: bool,
    /// Use N simulated GPUs instead of NVML (overrides ACCELSQL_SIMULATED_GPUS).
    #[arg(long, value_name = "N")]
    pub(crate) simulated_gpus: Option<usize>,

    /// Keep tables, scripts, users and connections in DIR, shared with every process that
    /// opens it and there after a restart [default: $ACCELSQL_DATA_DIR, else
    /// ~/.local/share/accelsql]
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<std::path::PathBuf>,

    /// Keep tables, scripts and users in memory only (gone when the shell ends)
    #[arg(long, conflicts_with = "data_dir")]
    pub(crate) in_memory: bool,

    /// Run the SQL as an untrusted user's: no script DDL, no SCRIPT_LANGUAGES change, no
    /// CREATE/DROP CONNECTION, no file access (files as tables, CREATE EXTERNAL TABLE, COPY … TO)
    /// and no settings that could lift a resource limit; each is refused with error 42501.
    /// Existing scripts and UDFs can still be called.
    #[arg(long)]
    pub(crate) restricted: bool,

    /// Run the SQL as catalog user NAME (`CREATE USER`, `accelsql users import`), with that
    /// user's privileges (found as written, else in upper case); it needs CREATE SESSION.
    /// Without it the session is SYS's (every privilege).
    #[arg(long, value_name = "NAME")]
    pub(crate) user: Option<String>,

    /// Run queries on the cluster whose scheduler is at HOST:PORT (`accelsql cluster local`
    /// prints it) instead of in this process.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) cluster: Option<String>,

    /// The number of executors (nodes) of --cluster (by default the scheduler's): `nproc()`,
    /// and how many partitions each query is planned with.
    #[arg(long, value_name = "N", requires = "cluster")]
    pub(crate) nodes: Option<usize>,

    /// The cluster's secret or certificates (with --cluster).
    #[command(flatten)]
    pub(crate) cluster_auth: crate::cluster::ClusterAuthArgs,
}
