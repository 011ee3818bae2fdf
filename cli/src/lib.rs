//! The `accelsql` command: the SQL shell (the default), `accelsql gpu status|run`,
//! `accelsql serve` (the Flight SQL server), `accelsql cluster …` and `accelsql users import`
//! (a users file into a data directory's catalog). The binary (`src/main.rs`) and the GPU
//! verification kit's multi-call binary (`kit/`) both run [`main`].

mod cluster;
mod data_dir;
mod error;
mod gpu;
mod reference;
mod script_user;
mod serve;
mod shell;
mod users;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use crate::reference::configuration_reference;
use crate::shell::ShellArgs;

/// The process's allocator: mimalloc reuses freed memory where glibc's malloc maps (and the
/// kernel zeroes) fresh pages for each large buffer; a Flight result's encoding and decoding
/// allocate one per message (measured in the `server` suite: glibc's faults cost a third of a
/// wide fetch).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// accelsql: an embedded SQL engine whose user-defined functions run on NVIDIA GPUs.
///
/// Without a subcommand, accelsql is a SQL shell: `-c SQL` runs statements, `-f FILE` runs a
/// script, piped standard input is run as a script, and on a terminal it is interactive.
#[derive(Debug, Parser)]
#[command(
    name = "accelsql",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    after_help = "Without -c or -f: runs standard input as a script when it is piped in, else \
                  starts the interactive shell (\\? for help, \\q to quit; history in \
                  ~/.accelsql_history)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    shell: ShellArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect and hand out this server's GPUs.
    #[command(subcommand)]
    Gpu(gpu::GpuCommand),
    /// Serve SQL to many clients over Arrow Flight SQL (ADBC, `accelsql.connect("grpc://…")`, any Flight SQL client).
    Serve(Box<serve::ServeArgs>),
    /// Run a cluster on Apache DataFusion Ballista: a scheduler, executors (one accelsql node
    /// each), or a local cluster of both for trying it out.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Manage the catalog's users (`CREATE USER`'s): `accelsql users import FILE --data-dir DIR`
    /// moves a server's users file into it.
    #[command(subcommand)]
    Users(users::UsersCommand),
}

/// Runs the `accelsql` command with the process's arguments; its exit code.
pub fn main() -> ExitCode {
    // Diagnostics of the engine, Ballista and the server go to standard error as `RUST_LOG`
    // asks (none by default): `RUST_LOG=info accelsql cluster scheduler …`.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off"))
        .format_timestamp_millis()
        .init();
    // A file-size limit (`ulimit -f`) makes writes fail with EFBIG (a coded error, the
    // statement rolled back) instead of killing the process.
    // SAFETY: setting a signal's disposition to SIG_IGN has no handler to race with.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let cli = Cli::parse();
    // The shell runs statements on this thread (`block_on`): give it the stack a statement may
    // need (STATEMENT_STACK_BYTES), as the runtimes' threads have.
    let worker = std::thread::Builder::new()
        .name("accelsql-main".into())
        .stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .spawn(move || run_command(cli));
    match worker.map(|w| w.join()) {
        Ok(Ok(code)) => code,
        Ok(Err(_)) => ExitCode::from(101),
        Err(e) => {
            eprintln!("accelsql: cannot start the main thread: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs what the command line asks, on a thread with a statement's stack.
fn run_command(cli: Cli) -> ExitCode {
    let outcome = match cli.command {
        Some(Command::Gpu(command)) => gpu::run(command),
        Some(Command::Serve(args)) => serve::run(*args),
        Some(Command::Cluster(command)) => cluster::run(command),
        Some(Command::Users(command)) => users::run(command),
        None => shell::run(&cli.shell),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.report());
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::shell::OutputFormat;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn without_a_subcommand_the_shell_options_apply() {
        let cli = Cli::try_parse_from([
            "accelsql",
            "-c",
            "SELECT 1",
            "--format",
            "csv",
            "--timing",
            "--simulated-gpus",
            "2",
            "--user",
            "ann",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.shell.user.as_deref(), Some("ann"));
        assert_eq!(cli.shell.sql.as_deref(), Some("SELECT 1"));
        assert_eq!(cli.shell.format, OutputFormat::Csv);
        assert!(cli.shell.timing);
        assert_eq!(cli.shell.simulated_gpus, Some(2));
    }

    #[test]
    fn cluster_options_parse_and_the_node_count_is_optional() {
        let cli = Cli::try_parse_from([
            "accelsql",
            "cluster",
            "executor",
            "--scheduler",
            "h:50050",
            "--node-id",
            "2",
            "--nodes",
            "3",
            "--gpus",
            "1,0",
        ])
        .unwrap();
        let Some(Command::Cluster(cluster::ClusterCommand::Executor {
            node_id,
            nodes,
            gpus,
            ..
        })) = cli.command
        else {
            panic!("not an executor command");
        };
        assert_eq!((node_id, nodes, gpus.as_deref()), (2, Some(3), Some("1,0")));
        let cli = Cli::try_parse_from([
            "accelsql",
            "--cluster",
            "h:1",
            "--nodes",
            "3",
            "-c",
            "SELECT 1",
        ])
        .unwrap();
        assert_eq!(
            (cli.shell.cluster.as_deref(), cli.shell.nodes),
            (Some("h:1"), Some(3))
        );
        // The node count comes from the scheduler; a secret file goes with --cluster.
        let cli = Cli::try_parse_from([
            "accelsql",
            "--cluster",
            "h:1",
            "--secret-file",
            "s",
            "-c",
            "SELECT 1",
        ])
        .unwrap();
        assert_eq!(cli.shell.nodes, None);
        assert!(cli.shell.cluster_auth.secret_file.is_some());
        // Certificates come as all three files, and not with a secret.
        assert!(Cli::try_parse_from(["accelsql", "--cluster", "h:1", "--tls-cert", "c"]).is_err());
        assert!(
            Cli::try_parse_from([
                "accelsql",
                "--cluster",
                "h:1",
                "--secret-file",
                "s",
                "--tls-cert",
                "c",
                "--tls-key",
                "k",
                "--tls-ca",
                "a"
            ])
            .is_err()
        );
    }

    #[test]
    fn a_file_and_a_command_cannot_be_combined() {
        assert!(Cli::try_parse_from(["accelsql", "-c", "SELECT 1", "-f", "x.sql"]).is_err());
    }

    #[test]
    fn the_gpu_subcommands_still_parse() {
        let cli = Cli::try_parse_from(["accelsql", "gpu", "status", "--json"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Gpu(_))));
    }
}
