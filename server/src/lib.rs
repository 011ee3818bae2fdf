//! `accelsql serve`: an Arrow Flight SQL server over one accelsql [`Engine`], so that many
//! clients (ADBC, arrow-rs, the `accelsql` Python package: any Flight SQL client) share one GPU node.
//!
//! Every client connection is its own [`Session`](accelsql_engine::Session) (settings, script
//! languages, tables); all share the engine's GPUs, node lease queue and scripts, so GPU
//! statements of different clients run one at a time, in arrival order, as sessions of one
//! process do. A statement's result stream to the client owns the statement: its GPU lease is
//! released when the client has read it, cancels it, disconnects or dies, and
//! [`ServerOptions::max_lease_hold`] bounds how long a client that stops reading can keep it.
//!
//! Clients log in with a handshake (HTTP basic credentials: a user of the users file, or any
//! name with the server's token, made at random by default) and get a bearer token that names
//! their session; [`ServerAuth::None`] is for loopback only. Before a connection has logged in
//! it has a deadline and a small byte budget ([`ServerOptions::handshake_timeout`],
//! [`ServerOptions::pre_auth_max_bytes`]); connections, sessions and statements per user are
//! capped.
//!
//! Errors reach clients as gRPC statuses whose message starts with accelsql's code
//! (`[22069] …`) and whose trailing metadata carries the code (`x-accelsql-code`).
//!
//! ```no_run
//! # async fn run() -> Result<(), accelsql_server::ServerError> {
//! let engine = accelsql_engine::Engine::new()?;
//! let server = accelsql_server::Server::bind(engine, accelsql_server::ServerOptions::default()).await?;
//! println!("listening: {}", server.url());
//! server.serve_until(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod auth;
mod coded;
mod conn;
mod error;
mod exasol;
mod http;
mod login;
mod metadata;
mod metrics;
mod results;
mod service;
mod sessions;
mod sync;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use accelsql_engine::Engine;
use arrow_flight::flight_service_server::FlightServiceServer;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Identity, ServerTlsConfig};

use crate::conn::{ConnLimits, Connections};
use crate::login::{Gate, Login};
use crate::sessions::SessionLimits;

pub use auth::{DEFAULT_ROUNDS, Users, add_user, hash_entry, parse_basic};
pub use error::{CODE_METADATA_KEY, Result, ServerError, coded_status, grpc_code, status_code};
pub use exasol::read_request as read_exasol_request;
pub use results::LogSink;
pub use service::AccelsqlFlightSql;

/// How clients log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAuth {
    /// Any user name with this token as the password; `None` (the default): a random token made
    /// when the server binds ([`Server::token`]), as Jupyter does.
    Token(Option<String>),
    /// The users of a users file (`accelsql serve add-user`), which must be owner-only; SIGHUP
    /// reloads it.
    Users(PathBuf),
    /// No authentication (`--no-auth`): every local process gets an unrestricted session, so
    /// the server listens on loopback addresses only.
    None,
}

impl Default for ServerAuth {
    fn default() -> Self {
        Self::Token(None)
    }
}

/// How a server listens, whom it lets in and how long it keeps things.
#[derive(Clone)]
pub struct ServerOptions {
    /// Address and port to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// How clients log in (a random token by default).
    pub auth: ServerAuth,
    /// TLS certificate and key (PEM files); `None`: plain gRPC.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Whether passwords (or the token) may cross a non-loopback address without TLS.
    pub allow_cleartext_passwords: bool,
    /// A session unused this long (and streaming nothing) is ended; its token expires.
    pub session_idle_timeout: Duration,
    /// A session none of whose connections is open ends after this long.
    pub session_grace: Duration,
    /// The most sessions at once; a client beyond it gets error 53300.
    pub max_sessions: usize,
    /// The most sessions of one user (53S01).
    pub max_sessions_per_user: usize,
    /// The most statements one user may run, or hold unfetched results of, at once (53S02).
    pub max_statements_per_user: usize,
    /// The user whose (unrestricted) sessions see every session's SQL and calls in
    /// `accelsql.gpu_leases` and `accelsql.udf_calls`; everyone else sees their own only.
    pub admin_user: Option<String>,
    /// The most connections at once; one more is closed as soon as it is accepted (logged
    /// with 53C01).
    pub max_connections: usize,
    /// How long a new connection has to authenticate before it is closed (logged with 08T01).
    pub handshake_timeout: Duration,
    /// How many bytes a connection may send before it has authenticated; past them the server
    /// reads nothing more from it until it does.
    pub pre_auth_max_bytes: u64,
    /// The largest gRPC message the server accepts or sends (bulk ingestion, parameters).
    pub max_message_size: usize,
    /// How long to wait for running streams after a shutdown request before stopping anyway.
    pub shutdown_grace: Duration,
    /// Where the per-statement log lines go; `None`: nowhere.
    pub log: Option<LogSink>,
    /// A second address on which the server speaks Exasol's WebSocket API (pyexasol, the
    /// tools built on it) over the same engine, sessions and users; `None`: none.
    pub exasol_listen: Option<SocketAddr>,
    /// The operator's HTTP endpoint (`/metrics`, `/healthz`, `/readyz`, the dashboard), which
    /// asks for the same login; `None`: none. Loopback only, unless
    /// [`ServerOptions::allow_cleartext_passwords`].
    pub http_listen: Option<SocketAddr>,
    /// Statement log lines as one JSON object each (statement, session, user, duration,
    /// lease wait, outcome) instead of `key=value` text.
    pub log_json: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            auth: ServerAuth::default(),
            tls: None,
            allow_cleartext_passwords: false,
            session_idle_timeout: Duration::from_secs(3600),
            session_grace: Duration::from_secs(10),
            max_sessions: 1024,
            max_sessions_per_user: 64,
            max_statements_per_user: 64,
            admin_user: None,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            pre_auth_max_bytes: 1 << 20,
            max_message_size: 64 << 20,
            shutdown_grace: Duration::from_secs(5),
            log: None,
            exasol_listen: None,
            http_listen: None,
            log_json: false,
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            ServerAuth::Token(_) => "token".to_string(),
            ServerAuth::Users(path) => format!("users file {}", path.display()),
            ServerAuth::None => "none".to_string(),
        };
        f.debug_struct("ServerOptions")
            .field("listen", &self.listen)
            .field("auth", &auth)
            .field("tls", &self.tls)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("max_connections", &self.max_connections)
            .field("max_message_size", &self.max_message_size)
            .finish_non_exhaustive()
    }
}

/// A bound, not yet serving, Flight SQL server.
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    /// The Exasol-protocol listener, its address and login key.
    exasol: Option<(
        tokio::net::TcpListener,
        SocketAddr,
        Arc<exasol::LoginKey>,
        Arc<exasol::PortTls>,
    )>,
    /// The HTTP endpoint's listener and address.
    http: Option<(
        tokio::net::TcpListener,
        SocketAddr,
        Option<tokio_rustls::TlsAcceptor>,
    )>,
    service: AccelsqlFlightSql,
    tls: Option<Identity>,
    token: Option<String>,
    options: ServerOptions,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Loads the users file and TLS files (or makes the token) and binds the listening socket.
    /// Without authentication only a loopback address is allowed; with it, a non-loopback
    /// address needs TLS unless [`ServerOptions::allow_cleartext_passwords`].
    pub async fn bind(engine: Engine, options: ServerOptions) -> Result<Self> {
        let mut token = None;
        let gate = match &options.auth {
            ServerAuth::Users(path) => {
                // Its password hashes are out of the scripts' reach.
                accelsql_engine::udf_runtime::script::sandbox::deny_paths([path]);
                let users = Users::load(path)?;
                if users.is_empty() {
                    return Err(ServerError::Config {
                        message: format!("the users file {} has no users", path.display()),
                    });
                }
                Gate::Users {
                    path: path.clone(),
                    users: std::sync::RwLock::new(std::sync::Arc::new(users)),
                }
            }
            ServerAuth::Token(given) => {
                let t = match given {
                    Some(t) if t.len() >= 16 => t.clone(),
                    Some(_) => {
                        return Err(ServerError::Config {
                            message: "a server token must have at least 16 characters".into(),
                        });
                    }
                    None => auth::new_token()?,
                };
                token = Some(t.clone());
                Gate::Token(t)
            }
            ServerAuth::None => {
                if !options.listen.ip().is_loopback() {
                    return Err(ServerError::Config {
                        message: format!(
                            "without authentication (--no-auth) the server listens on loopback \
                             only, not {}: drop --no-auth (a token is made), or give --users",
                            options.listen
                        ),
                    });
                }
                Gate::Open
            }
        };
        if !matches!(gate, Gate::Open)
            && !options.listen.ip().is_loopback()
            && options.tls.is_none()
            && !options.allow_cleartext_passwords
        {
            return Err(ServerError::Config {
                message: format!(
                    "passwords (and the token) would cross {} in clear text: give \
                     --tls-cert/--tls-key, listen on a loopback address, or pass \
                     --allow-cleartext-passwords on a network you trust",
                    options.listen
                ),
            });
        }
        let tls = match &options.tls {
            Some((cert, key)) => {
                // The private key is out of the scripts' reach.
                accelsql_engine::udf_runtime::script::sandbox::deny_paths([key]);
                let read = |p: &PathBuf| {
                    std::fs::read(p).map_err(|e| ServerError::Config {
                        message: format!("cannot read TLS file {}: {e}", p.display()),
                    })
                };
                Some(Identity::from_pem(read(cert)?, read(key)?))
            }
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|e| ServerError::Network {
                message: format!("cannot listen on {}: {e}", options.listen),
            })?;
        let addr = listener.local_addr().map_err(|e| ServerError::Network {
            message: format!("no local address: {e}"),
        })?;
        let exasol = match options.exasol_listen {
            Some(at) => {
                let listener =
                    tokio::net::TcpListener::bind(at)
                        .await
                        .map_err(|e| ServerError::Network {
                            message: format!("cannot listen on {at} (Exasol protocol): {e}"),
                        })?;
                let bound = listener.local_addr().map_err(|e| ServerError::Network {
                    message: format!("no local address: {e}"),
                })?;
                let key = tokio::task::spawn_blocking(exasol::LoginKey::new)
                    .await
                    .map_err(|e| ServerError::Config {
                        message: e.to_string(),
                    })?
                    .map_err(|message| ServerError::Config { message })?;
                // TLS always; plain WebSocket too on loopback (or where clear text is allowed):
                // its passwords are encrypted, its statements and results are not.
                let files = options
                    .tls
                    .as_ref()
                    .map(|(cert, key)| (cert.as_path(), key.as_path()));
                let plain = bound.ip().is_loopback() || options.allow_cleartext_passwords;
                let tls = exasol::PortTls::new(files, bound, plain)
                    .map_err(|message| ServerError::Config { message })?;
                Some((listener, bound, Arc::new(key), Arc::new(tls)))
            }
            None => None,
        };
        results::LOG_JSON.store(options.log_json, std::sync::atomic::Ordering::Relaxed);
        let http =
            match options.http_listen {
                Some(at) => {
                    if !at.ip().is_loopback()
                        && options.tls.is_none()
                        && !options.allow_cleartext_passwords
                    {
                        return Err(ServerError::Config {
                            message: format!(
                                "the HTTP endpoint would take credentials at {at} in clear text: \
                             give the server --tls-cert/--tls-key (the endpoint is then HTTPS), \
                             a loopback address (--http 127.0.0.1:PORT), or pass \
                             --allow-cleartext-passwords on a network you trust"
                            ),
                        });
                    }
                    // HTTPS with the data port's certificate where the server has one.
                    let acceptor = match &options.tls {
                        Some((cert, key)) => {
                            let read = |p: &PathBuf| {
                                std::fs::read(p).map_err(|e| ServerError::Config {
                                    message: format!("cannot read TLS file {}: {e}", p.display()),
                                })
                            };
                            Some(
                                accelsql_ops::tls_acceptor(&read(cert)?, &read(key)?, None)
                                    .map_err(|e| ServerError::Config {
                                        message: e.to_string(),
                                    })?,
                            )
                        }
                        None => None,
                    };
                    let listener = tokio::net::TcpListener::bind(at).await.map_err(|e| {
                        ServerError::Network {
                            message: format!("cannot listen on {at} (HTTP): {e}"),
                        }
                    })?;
                    let bound = listener.local_addr().map_err(|e| ServerError::Network {
                        message: format!("no local address: {e}"),
                    })?;
                    Some((listener, bound, acceptor))
                }
                None => None,
            };
        let connections = Connections::new(
            ConnLimits {
                handshake_timeout: options.handshake_timeout,
                pre_auth_bytes: options.pre_auth_max_bytes.max(4096),
                max_connections: connections_within_fd_limit(options.max_connections.max(1)),
                open: matches!(gate, Gate::Open),
            },
            options.log.clone(),
        );
        let limits = SessionLimits {
            idle_timeout: options.session_idle_timeout,
            grace: options.session_grace,
            max_sessions: options.max_sessions.max(1),
            max_per_user: options.max_sessions_per_user.max(1),
        };
        let login = match gate {
            // Without authentication every local process is trusted as before.
            Gate::Open => Login::new(gate),
            gate => Login::new(gate).with_catalog(engine.clone()),
        };
        let service = AccelsqlFlightSql::new(
            engine,
            login,
            limits,
            connections,
            options.max_statements_per_user,
            options
                .admin_user
                .as_deref()
                .map(accelsql_engine::canonical_account),
            options.log.clone(),
        );
        Ok(Self {
            listener,
            addr,
            exasol,
            http,
            service,
            tls,
            token,
            options,
        })
    }

    /// The address of the HTTP endpoint (`--http`), when the server has one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|(_, addr, _)| *addr)
    }

    /// The address of the Exasol-protocol port, when the server has one.
    pub fn exasol_addr(&self) -> Option<SocketAddr> {
        self.exasol.as_ref().map(|(_, addr, _, _)| *addr)
    }

    /// The SHA-256 fingerprint of the Exasol port's TLS certificate (pyexasol's
    /// `dsn='HOST/FINGERPRINT:PORT'`), when the server has that port.
    pub fn exasol_fingerprint(&self) -> Option<&str> {
        self.exasol.as_ref().map(|(_, _, _, tls)| tls.fingerprint())
    }

    /// The address the server listens on (with the chosen port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients connect to: `grpc://HOST:PORT`, or `grpc+tls://…` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "grpc+tls"
        } else {
            "grpc"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Whether clients must authenticate.
    pub fn requires_auth(&self) -> bool {
        self.service.inner().login.required()
    }

    /// The token clients pass as their password (any user name), when the server
    /// authenticates with one ([`ServerAuth::Token`]).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The engine the server runs statements on.
    pub fn engine(&self) -> &Engine {
        &self.service.inner().engine
    }

    /// Serves until `shutdown` completes; then every running statement is cancelled (its lease
    /// released, its workers stopped), every session ended, and the server waits at most
    /// [`ServerOptions::shutdown_grace`] for the streams to close.
    pub async fn serve_until(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let Self {
            listener,
            exasol,
            http,
            service,
            tls,
            options,
            ..
        } = self;
        let exasol = exasol.map(|(listener, _, key, tls)| {
            tokio::spawn(exasol::serve(listener, service.clone(), key, tls))
        });
        let http = http
            .map(|(listener, _, tls)| tokio::spawn(http::serve(listener, service.clone(), tls)));
        let flight = FlightServiceServer::new(coded::Coded(service.clone()))
            .max_decoding_message_size(options.max_message_size)
            .max_encoding_message_size(options.max_message_size);
        let gatekeeper = service.clone();
        let flight = InterceptedService::new(flight, move |request| gatekeeper.intercept(request));
        // Flow-control windows large enough that a bulk load (DoPut) is not paced by window
        // updates on fast links; what the server sends is paced by the client's windows.
        // Keepalive pings close connections to dead peers.
        let mut builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(15)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(32 << 20))
            .max_frame_size(Some(1 << 20));
        if let Some(identity) = tls {
            // delta-rs turns on rustls's aws-lc-rs beside tonic's ring: name the provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(|e| ServerError::Config {
                    message: format!("unusable TLS certificate or key: {e}"),
                })?;
        }
        let incoming = conn::incoming(listener, Arc::clone(&service.inner().connections));
        let reaper_service = service.clone();
        let reaper = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                reaper_service.inner().sessions.reap();
            }
        });
        let reloader = tokio::spawn(reload_users_on_sighup(service.clone(), options.log.clone()));
        let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
        let closing = service.clone();
        let serve =
            builder
                .add_service(flight)
                .serve_with_incoming_shutdown(incoming, async move {
                    shutdown.await;
                    closing.inner().sessions.close_all();
                    let _ = stopped_tx.send(());
                });
        let grace = options.shutdown_grace;
        let outcome = tokio::select! {
            served = serve => served.map_err(|e| ServerError::Network {
                message: format!("serving failed: {e}"),
            }),
            () = async {
                if stopped_rx.await.is_ok() {
                    tokio::time::sleep(grace).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => Ok(()),
        };
        reaper.abort();
        reloader.abort();
        if let Some(exasol) = exasol {
            exasol.abort();
        }
        if let Some(http) = http {
            http.abort();
        }
        service.inner().sessions.close_all();
        outcome
    }
}

/// Descriptors kept for what is not a client connection: the data directory's files, spill
/// files, script workers' sockets and pipes, the cluster's channels.
const RESERVED_FDS: u64 = 256;

/// Raises this process's soft open-file limit to its hard one, and returns `wanted` lowered
/// so that that many connections leave [`RESERVED_FDS`] descriptors for the rest: under
/// descriptor pressure a new client is refused at once (53300) instead of waiting for `accept`
/// to find a free descriptor.
fn connections_within_fd_limit(wanted: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return wanted;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit no higher than the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t differs between platforms
    let available = (limit.rlim_cur as u64).saturating_sub(RESERVED_FDS).max(16);
    let most = usize::try_from(available).unwrap_or(usize::MAX);
    if wanted > most {
        log::warn!(
            "--max-connections {wanted} lowered to {most}: the open-file limit is {}",
            limit.rlim_cur
        );
    }
    wanted.min(most)
}

/// Reloads the users file on every SIGHUP (Unix), logging what happened; a file that cannot be
/// used leaves the users as they were.
async fn reload_users_on_sighup(service: AccelsqlFlightSql, log: Option<LogSink>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangups.recv().await.is_some() {
            let line = match service.inner().login.reload() {
                Ok(Some(n)) => format!("users file reloaded: {n} users"),
                Ok(None) => "SIGHUP: no users file to reload".to_string(),
                Err(e) => format!("users file not reloaded, the old users stay: {e}"),
            };
            if let Some(sink) = &log {
                sink(&line);
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (service, log);
    }
}

/// A server running in a task of the current runtime (tests, benchmarks, embedding).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    exasol_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    url: String,
    token: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl ServerHandle {
    /// Binds and starts serving in a task.
    pub async fn start(engine: Engine, options: ServerOptions) -> Result<Self> {
        let server = Server::bind(engine, options).await?;
        let addr = server.local_addr();
        let exasol_addr = server.exasol_addr();
        let http_addr = server.http_addr();
        let url = server.url();
        let token = server.token().map(str::to_string);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve_until(async move {
            let _ = stopped.await;
        }));
        Ok(Self {
            addr,
            exasol_addr,
            http_addr,
            url,
            token,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the Exasol-protocol port, when the server has one.
    pub fn exasol_addr(&self) -> Option<SocketAddr> {
        self.exasol_addr
    }

    /// The address of the HTTP endpoint, when the server has one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The URL clients connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token clients pass as their password ([`ServerAuth::Token`]).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Stops the server (cancelling running statements) and waits for it.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or_else(|e| {
                Err(ServerError::Network {
                    message: format!("the server task failed: {e}"),
                })
            }),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server raises its soft open-file limit to the hard one, and keeps room for what is
    /// not a connection: a connection cap above the limit is lowered.
    #[test]
    fn connections_stay_below_the_open_file_limit() {
        let most = connections_within_fd_limit(usize::MAX);
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid, writable rlimit.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, limit.rlim_max, "the soft limit was raised");
        #[allow(clippy::unnecessary_cast)]
        let soft = limit.rlim_cur as u64;
        assert!(most < usize::MAX);
        assert!(
            (most as u64) <= soft.saturating_sub(RESERVED_FDS).max(16),
            "{most} of {soft}"
        );
        // A cap well within the limit is kept.
        assert_eq!(connections_within_fd_limit(8), 8);
    }
}
