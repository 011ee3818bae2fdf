//! The operator's HTTP endpoints of accelsql's processes — `accelsql serve --http` and
//! `accelsql cluster scheduler|executor --http` — in the parts they share:
//!
//! - [`serve`]: an axum router served on a listener, plain HTTP/1 or TLS, each connection
//!   bounded (a header read timeout, a header size limit, a cap on open connections, a
//!   lifetime), so that a slow or hostile client costs a connection slot for seconds and
//!   never the process's data ports;
//! - [`NodeMetrics`]: a node's Prometheus metrics read from its [`Engine`] at each scrape —
//!   devices (NVML), the lease queue, the memory pool, spills and script workers — registered in
//!   a `prometheus-client` registry beside the process's own;
//! - [`probes`]: `/healthz` and `/readyz`.
//!
//! [`Engine`]: accelsql_engine::Engine

mod error;
mod node_metrics;
mod serve;

pub use error::{OpsError, Result};
pub use node_metrics::{NodeMetrics, OPENMETRICS_CONTENT_TYPE, encode_registry};
pub use serve::{Limits, probes, serve, tls_acceptor};
/// The TLS acceptor [`serve`] takes (tokio-rustls').
pub use tokio_rustls::TlsAcceptor;
