//! Serving a router on a listener: plain HTTP/1 or TLS, each connection bounded so that a slow
//! or hostile client holds one of [`Limits::max_connections`] slots for seconds at most.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::{OpsError, Result};

/// The bounds every connection of an endpoint is served within.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// How long a request's header may take to arrive (a slow client is closed after it).
    pub header_timeout: Duration,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// The largest request header; a larger one is answered `431 Request Header Fields Too
    /// Large` (at least 8 KiB, hyper's smallest buffer).
    pub max_header_bytes: usize,
    /// How long one connection may stay open in all (a scraper's keep-alive connection is
    /// closed after it and opened again).
    pub lifetime: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            lifetime: Duration::from_secs(300),
        }
    }
}

/// `/healthz` (the process is up) and `/readyz` (it serves): for process managers and
/// Kubernetes probes, without a login.
pub fn probes() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ready\n" }))
}

/// A TLS acceptor from PEM text: the certificate chain and its key, and where given the
/// authority whose certificates clients must present (mutual TLS).
pub fn tls_acceptor(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let tls_err = |message: String| OpsError::Tls { message };
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_err(format!("the certificate: {e}")))?;
    if certs.is_empty() {
        return Err(tls_err("the certificate file holds no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| tls_err(format!("the key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                let cert = cert.map_err(|e| tls_err(format!("the client authority: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| tls_err(format!("the client authority: {e}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| tls_err(format!("the client authority: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| tls_err(format!("unusable certificate or key: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` until the task is dropped: over TLS where `tls` is given, each
/// connection within `limits`. Handlers may take the peer's address with
/// [`ConnectInfo<SocketAddr>`].
pub async fn serve(listener: TcpListener, app: Router, tls: Option<TlsAcceptor>, limits: Limits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, a reset before accept: wait a moment, go on.
                log::warn!("HTTP endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            log::warn!(
                "HTTP endpoint: closed a connection from {peer}: {} are open, the most it serves",
                limits.max_connections
            );
            continue;
        };
        let app = app.clone();
        let tls = tls.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            let lifetime = limits.lifetime;
            let served = async {
                match tls {
                    None => connection(stream, peer, app, &limits).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(
                            limits.handshake_timeout,
                            acceptor.accept(stream),
                        )
                        .await
                        {
                            Ok(Ok(stream)) => connection(stream, peer, app, &limits).await,
                            Ok(Err(e)) => log::debug!("HTTP endpoint: TLS from {peer}: {e}"),
                            Err(_) => log::debug!("HTTP endpoint: TLS from {peer} timed out"),
                        }
                    }
                }
            };
            let _ = tokio::time::timeout(lifetime, served).await;
        });
    }
}

/// One connection's requests, HTTP/1 with keep-alive.
async fn connection<S>(io: S, peer: SocketAddr, app: Router, limits: &Limits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let app = app.map_request(
        move |mut request: axum::extract::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        },
    );
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let served = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    if let Err(e) = served.await {
        log::debug!("HTTP endpoint: connection from {peer}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn endpoint(limits: Limits) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let app = probes().route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        );
        (at, tokio::spawn(serve(listener, app, None, limits)))
    }

    async fn exchange(at: SocketAddr, request: &[u8]) -> String {
        let mut stream = tokio::net::TcpStream::connect(at).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn probes_answer_and_handlers_see_the_peer() {
        let (at, task) = endpoint(Limits::default()).await;
        let answer = exchange(
            at,
            b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
        let answer = exchange(
            at,
            b"GET /peer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.ends_with("127.0.0.1"), "{answer}");
        task.abort();
    }

    #[tokio::test]
    async fn an_oversized_header_is_refused_with_431() {
        let (at, task) = endpoint(Limits::default()).await;
        let big = "a".repeat(64 * 1024);
        let request = format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
        let answer = exchange(at, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.80}");
        task.abort();
    }

    #[tokio::test]
    async fn a_slow_client_is_closed_and_others_are_served_meanwhile() {
        let limits = Limits {
            header_timeout: Duration::from_millis(300),
            max_connections: 2,
            ..Limits::default()
        };
        let (at, task) = endpoint(limits).await;
        // Half a header, then nothing: closed after the header timeout.
        let mut slow = tokio::net::TcpStream::connect(at).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nhost:")
            .await
            .unwrap();
        let answer = exchange(
            at,
            b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "the slow client's connection stayed open");
        // Its slot is free again: two connections at once are served.
        let (a, b) = tokio::join!(
            exchange(
                at,
                b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
            ),
            exchange(
                at,
                b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
            ),
        );
        assert!(
            a.starts_with("HTTP/1.1 200") && b.ends_with("ready\n"),
            "{a} {b}"
        );
        task.abort();
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_at_once() {
        let limits = Limits {
            max_connections: 1,
            ..Limits::default()
        };
        let (at, task) = endpoint(limits).await;
        let mut holder = tokio::net::TcpStream::connect(at).await.unwrap();
        holder
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 12];
        holder.read_exact(&mut first).await.unwrap();
        let answer = exchange(
            at,
            b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(
            answer, "",
            "a second connection was served beside the first"
        );
        drop(holder);
        task.abort();
    }

    #[test]
    fn unusable_tls_material_is_a_coded_error() {
        let Err(e) = tls_acceptor(b"not pem", b"not pem", None) else {
            panic!("an acceptor from no certificate");
        };
        assert_eq!(e.code(), "F0000");
        assert!(e.to_string().contains("no certificate"), "{e}");
    }
}
