//! `accelsql serve`: starts the Flight SQL server over one engine; `accelsql serve add-user`
//! adds a user to a users file.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};
use accelsql_server::{Server, ServerAuth, ServerOptions};
use clap::{Args, Subcommand};

use crate::error::CliError;

/// Options of `accelsql serve`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,
    /// Address and port to listen on (port 0: any free port; the first line of output says
    /// which).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Also speak Exasol's WebSocket API on this port of the --listen host (0: any free port),
    /// so that pyexasol and the tools built on it connect (`pyexasol.connect(dsn='HOST:PORT',
    /// user=…, password=…, encryption=False)`): the same engine, sessions, users and limits.
    /// The output's lines `exasol: HOST:PORT` and `exasol-fingerprint: HEX` say where and
    /// which TLS certificate it shows (--tls-cert, else a self-signed one made at start:
    /// `dsn='HOST/HEX:PORT'`). Plain WebSocket beside TLS on loopback only (or with
    /// --allow-cleartext-passwords). `--exasol-port` alone: Exasol's own port, 8563.
    #[arg(long, value_name = "PORT", num_args = 0..=1, default_missing_value = "8563")]
    exasol_port: Option<u16>,
    /// Open the operator's HTTP endpoint at HOST:PORT (HTTPS with --tls-cert/--tls-key; else
    /// loopback, unless --allow-cleartext-passwords): `/metrics` for Prometheus, `/healthz` and
    /// `/readyz`, and a live dashboard at `/` of the GPUs, the lease queue, running statements,
    /// sessions and UDF calls. It asks for
    /// the same login (HTTP basic: a user with SELECT ANY DICTIONARY, or any name with the
    /// token; or `Authorization: Bearer TOKEN`). The output's line `http: HOST:PORT` says where.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<SocketAddr>,
    /// How statement log lines are written: `text` (key=value) or `json` (one object a line).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Keep tables, scripts, users and connections in DIR, so that they survive a restart
    /// [default: $ACCELSQL_DATA_DIR, else ~/.local/share/accelsql].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Keep tables, scripts and users in memory only (gone when the server stops).
    #[arg(long, conflicts_with = "data_dir")]
    in_memory: bool,
    /// Users allowed in (made by `accelsql serve add-user`; the file must be owner-only;
    /// SIGHUP reloads it). Without it the server makes a random token, prints it as the second
    /// line (`token: …`) and writes it owner-only to DATA_DIR/server-token: clients pass it as
    /// their password, with any user name.
    #[arg(long, value_name = "FILE", conflicts_with = "no_auth")]
    users: Option<PathBuf>,
    /// No authentication at all: any local process gets an unrestricted session (it can run
    /// code as this server's user). Loopback addresses only.
    #[arg(long)]
    no_auth: bool,
    /// Let passwords (and the token) cross a non-loopback address without TLS.
    #[arg(long)]
    allow_cleartext_passwords: bool,
    /// TLS certificate (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Use N simulated GPUs instead of NVML (overrides ACCELSQL_SIMULATED_GPUS).
    #[arg(long, value_name = "N")]
    simulated_gpus: Option<usize>,
    #[command(flatten)]
    gpu_sharing: crate::gpu::sharing::GpuSharingArgs,
    #[command(flatten)]
    script_user: crate::script_user::ScriptUserArgs,
    /// The longest a statement may hold the GPU lease, in seconds (a client that stops reading
    /// its result cannot pin the GPUs longer; the statement then fails with 57G03).
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    max_lease_hold: f64,
    /// Every session's statement timeout, in seconds: a statement still running after it is
    /// stopped with error 57T01 (its lease and workers freed). Sessions may lower it (`ALTER
    /// SESSION SET QUERY_TIMEOUT`); restricted sessions may not raise it. 0: no bound.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    statement_timeout: f64,
    /// The engine's memory pool, shared by every session (e.g. 8GiB): sorts, joins and
    /// aggregations spill under DATA_DIR/tmp when it is full, and a statement that still does
    /// not fit fails with 53200 while the others go on. Default: half the machine's memory.
    #[arg(long, value_name = "SIZE")]
    memory_limit: Option<String>,
    /// Every session's memory budget within the pool (e.g. 1GiB; 0: none of its own). Values,
    /// result batches, prepared statements and bound parameters count against it; sessions may
    /// lower it (SET accelsql.memory_limit), restricted ones may not raise it. Default: an eighth
    /// of the pool.
    #[arg(long, value_name = "SIZE")]
    session_memory_limit: Option<String>,
    /// The most all sessions together may spill to disk under DATA_DIR/tmp (e.g. 50GiB); a
    /// user's sessions together may spill half of it, one session a quarter, and a statement
    /// past any of these fails with 53400. Default: half the disk's free space at start, at
    /// most 100 GiB.
    #[arg(long, value_name = "SIZE")]
    spill_limit: Option<String>,
    /// Every session's SQL dialect to start with: `datafusion` (unquoted names fold to lower
    /// case) or `exasol` (unquoted names fold to upper case, '' is NULL, Exasol's literals,
    /// conversions and type names). A session may change it (SET accelsql.sql_dialect).
    #[arg(long, value_name = "DIALECT", default_value = "datafusion")]
    sql_dialect: String,
    /// End a client's session after it has been idle this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    session_idle_timeout: u64,
    /// The most client sessions at once (a client beyond it gets error 53300).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_sessions: usize,
    /// The most sessions of one user (53S01).
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_sessions_per_user: usize,
    /// The most statements one user may run, or hold unfetched results of, at once (53S02).
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_statements_per_user: usize,
    /// The user whose sessions (unrestricted) see every session's SQL and calls in
    /// accelsql.gpu_leases and accelsql.udf_calls; others see their own only.
    #[arg(long, value_name = "NAME")]
    admin_user: Option<String>,
    /// The most connections at once; more are closed as soon as they are accepted.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_connections: usize,
    /// Seconds a new connection has to log in before it is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    handshake_timeout: f64,
    /// Seconds a session outlives its last connection.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    session_grace: f64,
    /// Every session is restricted (SQL from untrusted users): no script DDL, no file access,
    /// no settings that lift a limit (error 42501).
    #[arg(long)]
    restricted: bool,
    /// Run every client's queries on the cluster whose scheduler is at HOST:PORT
    /// (`accelsql cluster local` prints it).
    #[arg(long, value_name = "HOST:PORT")]
    cluster: Option<String>,
    /// The number of executors (nodes) of --cluster (by default the scheduler's).
    #[arg(long, value_name = "N", requires = "cluster")]
    nodes: Option<usize>,
    /// The secret of --cluster (its processes' --secret-file).
    #[arg(long, value_name = "FILE", requires = "cluster")]
    cluster_secret_file: Option<PathBuf>,
    /// Mutual TLS with --cluster from your own certificates: this server's certificate (see
    /// `accelsql cluster executor --help`).
    #[arg(long, value_name = "FILE", requires_all = ["cluster", "cluster_tls_key", "cluster_tls_ca"])]
    cluster_tls_cert: Option<PathBuf>,
    /// The key of --cluster-tls-cert.
    #[arg(long, value_name = "FILE", requires = "cluster_tls_cert")]
    cluster_tls_key: Option<PathBuf>,
    /// The authority of --cluster's certificates.
    #[arg(long, value_name = "FILE", requires = "cluster_tls_cert")]
    cluster_tls_ca: Option<PathBuf>,
    /// Do not log one line per statement on standard error.
    #[arg(long, short = 'q')]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum ServeCommand {
    /// Add a user (or change a user's password) in a users file; the password is read from
    /// standard input (one line) or asked for on the terminal.
    AddUser {
        /// The users file (created, owner-only, if missing).
        #[arg(long, value_name = "FILE")]
        users: PathBuf,
        /// The user's name.
        name: String,
        /// PBKDF2 rounds (more is slower to check and to guess).
        #[arg(long, default_value_t = accelsql_server::DEFAULT_ROUNDS, hide = true)]
        rounds: u32,
    },
}

/// Runs `accelsql serve …`.
pub(crate) fn run(args: ServeArgs) -> Result<ExitCode, CliError> {
    if let Some(ServeCommand::AddUser {
        users,
        name,
        rounds,
    }) = args.command
    {
        let password = read_password(&name)?;
        accelsql_server::add_user(&users, &name, &password, rounds)
            .map_err(|e| CliError::Server(Box::new(e)))?;
        eprintln!("accelsql serve: user {name} saved in {}", users.display());
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Statements plan and run on these threads (see STATEMENT_STACK_BYTES).
        .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .build()
        .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(args))
}

/// `value` seconds, when it is a positive number.
fn positive_seconds(flag: &str, value: f64) -> Result<Duration, CliError> {
    if value.is_finite() && value > 0.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(CliError::Terminal(format!(
            "{flag} must be a positive number of seconds, not {value}"
        )))
    }
}

/// A size flag's bytes (`8GiB`, `512MB`, a byte count).
fn size_flag(flag: &str, text: &str) -> Result<usize, CliError> {
    accelsql_engine::gpu_scheduler::units::parse_bytes(text)
        .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
        .map_err(|e| CliError::Terminal(format!("{flag}: {e}")))
}

async fn serve(args: ServeArgs) -> Result<ExitCode, CliError> {
    args.script_user.apply()?;
    let max_lease_hold = positive_seconds("--max-lease-hold", args.max_lease_hold)?;
    let handshake_timeout = positive_seconds("--handshake-timeout", args.handshake_timeout)?;
    let session_grace = positive_seconds("--session-grace", args.session_grace)?;
    if !(args.statement_timeout.is_finite() && args.statement_timeout >= 0.0) {
        return Err(CliError::Terminal(format!(
            "--statement-timeout must be a number of seconds (0: no bound), not {}",
            args.statement_timeout
        )));
    }
    let memory_limit = match &args.memory_limit {
        Some(text) => match size_flag("--memory-limit", text)? {
            0 => {
                return Err(CliError::Terminal(
                    "--memory-limit must be more than 0 bytes".into(),
                ));
            }
            n => n,
        },
        None => accelsql_engine::default_memory_limit(),
    };
    let session_memory_limit = match &args.session_memory_limit {
        Some(text) => Some(size_flag("--session-memory-limit", text)?).filter(|n| *n > 0),
        None => Some(memory_limit / 8),
    };
    let data_dir = crate::data_dir::resolve(args.data_dir.as_deref(), args.in_memory);
    let mut scheduler = args.gpu_sharing.apply(SchedulerConfig::from_env()?)?;
    if let Some(n) = args.simulated_gpus {
        scheduler = scheduler.with_simulated_gpus(n);
    }
    let mut options = EngineOptions {
        scheduler,
        data_dir: data_dir.clone(),
        url_tables: true,
        restricted: args.restricted,
        max_lease_hold: Some(max_lease_hold),
        statement_timeout: Some(Duration::from_secs_f64(args.statement_timeout))
            .filter(|t| !t.is_zero()),
        memory_limit: Some(memory_limit),
        session_memory_limit,
        spill_limit: match &args.spill_limit {
            Some(text) => Some(size_flag("--spill-limit", text)? as u64),
            None => None,
        },
        sql_dialect: accelsql_engine::SqlDialect::parse(&args.sql_dialect)
            .map_err(|e| CliError::Engine(Box::new(e)))?,
        ..EngineOptions::default()
    };
    if let Some(address) = &args.cluster {
        let auth = accelsql_cluster::ClusterAuth::from_options(
            args.cluster_secret_file.as_deref(),
            args.cluster_tls_cert.as_deref(),
            args.cluster_tls_key.as_deref(),
            args.cluster_tls_ca.as_deref(),
        )
        .map_err(|e| CliError::Cluster(Box::new(e)))?;
        options = accelsql_cluster::ClusterClient::connect(address, auth, args.nodes)
            .await
            .map_err(|e| CliError::Cluster(Box::new(e)))?
            .engine_options(options);
    }
    let engine = Engine::with_options(options).map_err(|e| CliError::Engine(Box::new(e)))?;
    let log: Option<accelsql_server::LogSink> = if args.quiet {
        None
    } else {
        // `--log-format json`: a statement's line is one JSON object, as it is.
        Some(Arc::new(|line: &str| {
            if line.starts_with('{') {
                eprintln!("{line}");
            } else {
                eprintln!("accelsql serve: {line}");
            }
        }))
    };
    let auth = match (&args.users, args.no_auth) {
        (Some(users), _) => ServerAuth::Users(users.clone()),
        (None, true) => ServerAuth::None,
        (None, false) => ServerAuth::Token(None),
    };
    let options = ServerOptions {
        listen: args.listen,
        auth,
        tls: args.tls_cert.clone().zip(args.tls_key.clone()),
        allow_cleartext_passwords: args.allow_cleartext_passwords,
        session_idle_timeout: Duration::from_secs(args.session_idle_timeout),
        session_grace,
        max_sessions: args.max_sessions,
        max_sessions_per_user: args.max_sessions_per_user,
        max_statements_per_user: args.max_statements_per_user,
        admin_user: args.admin_user.clone(),
        max_connections: args.max_connections,
        handshake_timeout,
        log,
        exasol_listen: args
            .exasol_port
            .map(|port| SocketAddr::new(args.listen.ip(), port)),
        http_listen: args.http,
        log_json: args.log_format == "json",
        ..ServerOptions::default()
    };
    let gpus = engine.devices().len();
    let server = Server::bind(engine, options)
        .await
        .map_err(|e| CliError::Server(Box::new(e)))?;
    let token_file = match (server.token(), &data_dir) {
        (Some(token), Some(dir)) => Some(write_token(dir, token)?),
        _ => None,
    };
    // The first lines of output: scripts and tests wait for them.
    let mut out = std::io::stdout().lock();
    let mut head = format!("listening: {}\n", server.url());
    if let Some(token) = server.token() {
        head.push_str(&format!("token: {token}\n"));
    }
    if let (Some(exasol), Some(fingerprint)) = (server.exasol_addr(), server.exasol_fingerprint()) {
        head.push_str(&format!(
            "exasol: {exasol}\nexasol-fingerprint: {fingerprint}\n"
        ));
    }
    if let Some(http) = server.http_addr() {
        head.push_str(&format!("http: {http}\n"));
    }
    out.write_all(head.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Output(format!("cannot write to standard output: {e}")))?;
    drop(out);
    if !args.quiet {
        let auth = match (&args.users, server.token(), &token_file) {
            (Some(_), _, _) => "users from the users file only".to_string(),
            (None, Some(_), Some(file)) => format!(
                "clients log in with the token (any user name; also in {})",
                file.display()
            ),
            (None, Some(_), None) => "clients log in with the token (any user name)".to_string(),
            (None, None, _) => "no authentication (--no-auth), loopback only".to_string(),
        };
        let place = match (&args.cluster, args.nodes) {
            (Some(address), Some(nodes)) => {
                format!("queries run on the {nodes}-node cluster at {address}")
            }
            _ => format!("{gpus} GPU(s)"),
        };
        eprintln!("accelsql serve: {place}; {auth}; SIGINT/SIGTERM stops it");
        eprintln!(
            "accelsql serve: {}",
            accelsql_engine::udf_runtime::script::sandbox::status()
        );
    }
    server
        .serve_until(shutdown_signal())
        .await
        .map_err(|e| CliError::Server(Box::new(e)))?;
    if !args.quiet {
        eprintln!("accelsql serve: stopped (running statements cancelled, sessions ended)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the server's token to DIR/server-token, owner-only; the file's path.
fn write_token(dir: &std::path::Path, token: &str) -> Result<PathBuf, CliError> {
    let path = dir.join("server-token");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let _ = std::fs::remove_file(&path);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&path)?;
        file.write_all(format!("{token}\n").as_bytes())?;
        file.sync_all()
    };
    write().map_err(|e| {
        CliError::Output(format!("cannot write the token to {}: {e}", path.display()))
    })?;
    Ok(path)
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The new password: one line of standard input (without echo control: pipe it in, or type it).
fn read_password(name: &str) -> Result<String, CliError> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprint!("password for {name}: ");
        let _ = std::io::stderr().flush();
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::Terminal(format!("cannot read the password: {e}")))?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        return Err(CliError::Terminal(
            "empty password: give one line on standard input".into(),
        ));
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::Cli;

    #[test]
    fn serve_options_parse() {
        let cli = Cli::try_parse_from([
            "accelsql",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--simulated-gpus",
            "2",
            "--max-lease-hold",
            "1.5",
            "--statement-timeout",
            "0",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(crate::Command::Serve(_))));
        assert!(Cli::try_parse_from(["accelsql", "serve", "--tls-cert", "c.pem"]).is_err());
        let add = Cli::try_parse_from(["accelsql", "serve", "add-user", "--users", "u", "alice"])
            .unwrap();
        assert!(matches!(add.command, Some(crate::Command::Serve(_))));
    }

    #[test]
    fn the_exasol_port_alone_is_exasols_own() {
        let port = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["accelsql", "serve"], args].concat()).unwrap();
            match cli.command {
                Some(crate::Command::Serve(serve)) => serve.exasol_port,
                _ => panic!("not serve"),
            }
        };
        assert_eq!(port(&["--exasol-port"]), Some(8563));
        assert_eq!(port(&["--exasol-port", "9000"]), Some(9000));
        assert_eq!(port(&["--exasol-port", "--in-memory"]), Some(8563));
        assert_eq!(port(&[]), None);
    }
}
