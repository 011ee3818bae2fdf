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
mod error;
mod metadata;
mod results;
mod service;
mod sessions;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use accelsql_engine::Engine;
use arrow_flight::flight_service_server::FlightServiceServer;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, ServerTlsConfig};

pub use auth::{DEFAULT_ROUNDS, Users, add_user, hash_entry, parse_basic};
pub use error::{CODE_METADATA_KEY, Result, ServerError, coded_status, grpc_code, status_code};
pub use results::LogSink;
pub use service::AccelsqlFlightSql;

/// How a server listens, whom it lets in and how long it keeps things.
#[derive(Clone)]
pub struct ServerOptions {
    /// Address and port to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The users file (`accelsql serve add-user`); `None`: no authentication, and then the
    /// server listens on loopback addresses only.
    pub users: Option<PathBuf>,
    /// TLS certificate and key (PEM files); `None`: plain gRPC.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// A session unused this long (and streaming nothing) is ended.
    pub session_idle_timeout: Duration,
    /// The most sessions at once; a client beyond it gets error 53300.
    pub max_sessions: usize,
    /// The largest gRPC message the server accepts or sends (bulk ingestion, parameters).
    pub max_message_size: usize,
    /// How long to wait for running streams after a shutdown request before stopping anyway.
    pub shutdown_grace: Duration,
    /// Where the per-statement log lines go; `None`: nowhere.
    pub log: Option<LogSink>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            users: None,
            tls: None,
            session_idle_timeout: Duration::from_secs(3600),
            max_sessions: 1024,
            max_message_size: 64 << 20,
            shutdown_grace: Duration::from_secs(5),
            log: None,
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("listen", &self.listen)
            .field("users", &self.users)
            .field("tls", &self.tls)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("max_message_size", &self.max_message_size)
            .finish_non_exhaustive()
    }
}

/// A bound, not yet serving, Flight SQL server.
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    service: AccelsqlFlightSql,
    tls: Option<Identity>,
    options: ServerOptions,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Loads the users file and TLS files and binds the listening socket. Without a users file
    /// only a loopback address is allowed.
    pub async fn bind(engine: Engine, options: ServerOptions) -> Result<Self> {
        let users = match &options.users {
            Some(path) => Some(Users::load(path)?),
            None => {
                if !options.listen.ip().is_loopback() {
                    return Err(ServerError::Config {
                        message: format!(
                            "without a users file (--users) the server listens on loopback only, \
                             not {}: create one with `accelsql serve add-user`",
                            options.listen
                        ),
                    });
                }
                None
            }
        };
        if users.as_ref().is_some_and(Users::is_empty)
            && let Some(path) = &options.users
        {
            return Err(ServerError::Config {
                message: format!("the users file {} has no users", path.display()),
            });
        }
        let tls = match &options.tls {
            Some((cert, key)) => {
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
        let service = AccelsqlFlightSql::new(
            engine,
            users,
            options.session_idle_timeout,
            options.max_sessions.max(1),
            options.log.clone(),
        );
        Ok(Self {
            listener,
            addr,
            service,
            tls,
            options,
        })
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
        self.options.users.is_some()
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
            service,
            tls,
            options,
            ..
        } = self;
        let flight = FlightServiceServer::new(service.clone())
            .max_decoding_message_size(options.max_message_size)
            .max_encoding_message_size(options.max_message_size);
        // Flow-control windows large enough that a bulk load (DoPut) is not paced by window
        // updates on fast links; what the server sends is paced by the client's windows.
        let mut builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(15)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(32 << 20))
            .max_frame_size(Some(1 << 20));
        if let Some(identity) = tls {
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(|e| ServerError::Config {
                    message: format!("unusable TLS certificate or key: {e}"),
                })?;
        }
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let reaper_service = service.clone();
        let reaper = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                reaper_service.inner().sessions.expire_idle();
            }
        });
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
        service.inner().sessions.close_all();
        outcome
    }
}

/// A server running in a task of the current runtime (tests, benchmarks, embedding).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl ServerHandle {
    /// Binds and starts serving in a task.
    pub async fn start(engine: Engine, options: ServerOptions) -> Result<Self> {
        let server = Server::bind(engine, options).await?;
        let addr = server.local_addr();
        let url = server.url();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve_until(async move {
            let _ = stopped.await;
        }));
        Ok(Self {
            addr,
            url,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients connect to.
    pub fn url(&self) -> &str {
        &self.url
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
