//! Connections before and after login: the accept loop with its connection cap, and the guard
//! around each connection — a deadline to authenticate by and a byte budget until it has.
//!
//! A connection is *authenticated* once one of its requests carried a valid bearer token or a
//! handshake on it succeeded (on a server without authentication, at once). Until then it may
//! send at most [`ConnLimits::pre_auth_bytes`]: past that the server stops reading from it (the
//! peer's data wait in the kernel's buffers, not in ours) until it authenticates or its
//! deadline closes it. A connection that has not authenticated within
//! [`ConnLimits::handshake_timeout`] is closed.

use std::collections::HashSet;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TlsConnectInfo};

use crate::error::ServerError;

/// Where connection events are logged (the server's log sink).
type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Locks `m`, taking over a poisoned lock (every critical section here is a set insert or
/// removal).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const TOO_MANY_CONNECTIONS: &str = ServerError::TOO_MANY_CONNECTIONS;
const HANDSHAKE_TIMEOUT: &str = ServerError::HANDSHAKE_TIMEOUT;

/// The bounds on connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    /// How long a new connection has to authenticate.
    pub(crate) handshake_timeout: Duration,
    /// How many bytes a connection may send before it has authenticated.
    pub(crate) pre_auth_bytes: u64,
    /// The most connections at once; one more is closed as soon as it is accepted.
    pub(crate) max_connections: usize,
    /// Whether connections are authenticated from the start (a server without authentication).
    pub(crate) open: bool,
}

/// What the server knows of one connection; every request on it carries it (see
/// [`conn_of`]).
#[derive(Debug)]
pub(crate) struct ConnState {
    /// A number no other connection of this server has.
    pub(crate) id: u64,
    /// The peer's address.
    pub(crate) peer: Option<SocketAddr>,
    authenticated: AtomicBool,
    /// The connection's reader, parked while it is over its pre-login budget.
    reader: AtomicWaker,
}

impl ConnState {
    /// Marks the connection authenticated: its deadline and byte budget no longer apply.
    pub(crate) fn authenticate(&self) {
        if !self.authenticated.swap(true, Ordering::AcqRel) {
            self.reader.wake();
        }
    }

    fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }
}

/// The connection information tonic puts into every request of a connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo(pub(crate) Arc<ConnState>);

/// The connection a request came on (plain or TLS).
pub(crate) fn conn_of<T>(request: &tonic::Request<T>) -> Option<Arc<ConnState>> {
    let extensions = request.extensions();
    extensions
        .get::<ConnInfo>()
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<ConnInfo>>()
                .map(TlsConnectInfo::get_ref)
        })
        .map(|info| Arc::clone(&info.0))
}

/// Every open connection of a server.
pub(crate) struct Connections {
    limits: ConnLimits,
    next_id: AtomicU64,
    live: Mutex<HashSet<u64>>,
    log: Option<LogSink>,
}

impl Connections {
    /// How many connections are open.
    pub(crate) fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub(crate) fn new(limits: ConnLimits, log: Option<LogSink>) -> Arc<Self> {
        Arc::new(Self {
            limits,
            next_id: AtomicU64::new(1),
            live: Mutex::default(),
            log,
        })
    }

    /// Whether connection `id` is still open.
    pub(crate) fn is_open(&self, id: u64) -> bool {
        lock(&self.live).contains(&id)
    }

    fn log(&self, line: &str) {
        if let Some(sink) = &self.log {
            sink(line);
        }
    }

    /// Guards `io`, or refuses it (`None`) when the server has as many connections as allowed.
    fn admit(self: &Arc<Self>, io: TcpStream, peer: Option<SocketAddr>) -> Option<GuardedConn> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut live = lock(&self.live);
            if live.len() >= self.limits.max_connections {
                drop(live);
                self.log(&format!(
                    "[{TOO_MANY_CONNECTIONS}] connection from {} refused: the server has {} \
                     connections, the most --max-connections allows",
                    peer.map_or("?".into(), |p| p.to_string()),
                    self.limits.max_connections
                ));
                return None;
            }
            live.insert(id);
        }
        let _ = io.set_nodelay(true);
        let state = Arc::new(ConnState {
            id,
            peer,
            authenticated: AtomicBool::new(self.limits.open),
            reader: AtomicWaker::new(),
        });
        let deadline = (!self.limits.open)
            .then(|| Box::pin(tokio::time::sleep(self.limits.handshake_timeout)));
        Some(GuardedConn {
            io,
            state,
            connections: Arc::clone(self),
            deadline,
            read_before_auth: 0,
        })
    }

    fn closed(&self, id: u64) {
        lock(&self.live).remove(&id);
    }

    /// Registers an open connection without a socket (tests of the session rules).
    #[cfg(test)]
    pub(crate) fn open_for_test(&self) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).insert(id);
        id
    }

    /// Closes a connection registered by [`Connections::open_for_test`].
    #[cfg(test)]
    pub(crate) fn close_for_test(&self, id: u64) {
        self.closed(id);
    }
}

/// The accepted connections of `listener`, each guarded, none beyond the cap. Accept errors
/// (such as running out of file descriptors) pause accepting briefly instead of spinning.
pub(crate) fn incoming(
    listener: TcpListener,
    connections: Arc<Connections>,
) -> impl Stream<Item = io::Result<GuardedConn>> {
    futures::stream::unfold(
        (listener, connections),
        |(listener, connections)| async move {
            loop {
                match listener.accept().await {
                    Ok((io, peer)) => {
                        if let Some(conn) = connections.admit(io, Some(peer)) {
                            return Some((Ok(conn), (listener, connections)));
                        }
                    }
                    Err(e) => {
                        log::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        },
    )
}

/// A TCP connection with its login deadline and pre-login byte budget.
pub(crate) struct GuardedConn {
    io: TcpStream,
    state: Arc<ConnState>,
    connections: Arc<Connections>,
    /// `None` once authenticated.
    deadline: Option<Pin<Box<Sleep>>>,
    read_before_auth: u64,
}

impl GuardedConn {
    /// The connection's state (its id, peer and login).
    pub(crate) fn state(&self) -> Arc<ConnState> {
        Arc::clone(&self.state)
    }

    /// The address the client connected to.
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.local_addr().ok()
    }
}

impl Connected for GuardedConn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo(Arc::clone(&self.state))
    }
}

impl Drop for GuardedConn {
    fn drop(&mut self) {
        self.connections.closed(self.state.id);
    }
}

impl AsyncRead for GuardedConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = &mut this.deadline {
            if this.state.is_authenticated() {
                this.deadline = None;
            } else {
                if deadline.as_mut().poll(cx).is_ready() {
                    this.connections.log(&format!(
                        "[{HANDSHAKE_TIMEOUT}] connection {} from {} closed: it did not \
                         authenticate within {} s",
                        this.state.id,
                        this.state.peer.map_or("?".into(), |p| p.to_string()),
                        this.connections.limits.handshake_timeout.as_secs_f64()
                    ));
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connection did not authenticate in time",
                    )));
                }
                if this.read_before_auth >= this.connections.limits.pre_auth_bytes {
                    // Over budget: read nothing more until a login (which wakes this reader)
                    // or the deadline (registered above).
                    this.state.reader.register(cx.waker());
                    if !this.state.is_authenticated() {
                        return Poll::Pending;
                    }
                    this.deadline = None;
                }
            }
        }
        let limit_read = this.deadline.is_some();
        if limit_read {
            // Read at most what is left of the budget.
            let left = this.connections.limits.pre_auth_bytes - this.read_before_auth;
            let room = buf
                .remaining()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            let mut small = ReadBuf::new(buf.initialize_unfilled_to(room));
            let polled = Pin::new(&mut this.io).poll_read(cx, &mut small);
            let n = small.filled().len();
            buf.advance(n);
            this.read_before_auth += n as u64;
            polled
        } else {
            Pin::new(&mut this.io).poll_read(cx, buf)
        }
    }
}

impl AsyncWrite for GuardedConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn pair(limits: ConnLimits) -> (GuardedConn, TcpStream, Arc<Connections>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (io, peer) = listener.accept().await.unwrap();
        let connections = Connections::new(limits, None);
        let conn = connections.admit(io, Some(peer)).unwrap();
        (conn, client, connections)
    }

    fn limits(open: bool) -> ConnLimits {
        ConnLimits {
            handshake_timeout: Duration::from_millis(600),
            pre_auth_bytes: 64 << 10,
            max_connections: 2,
            open,
        }
    }

    #[tokio::test]
    async fn before_login_a_connection_reads_its_budget_then_nothing_until_the_deadline() {
        let (mut conn, mut client, connections) = pair(limits(false)).await;
        let id = conn.state.id;
        assert!(connections.is_open(id));
        // The peer sends 4 MiB; the server side reads its 64 KiB budget and no more.
        let writer = tokio::spawn(async move {
            let _ = client.write_all(&vec![7u8; 4 << 20]).await;
            client
        });
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 20];
        let outcome = loop {
            match conn.read(&mut buf).await {
                Ok(0) => break Ok(()),
                Ok(n) => total += n,
                Err(e) => break Err(e),
            }
        };
        assert_eq!(total, 64 << 10);
        let e = outcome.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(conn);
        assert!(!connections.is_open(id));
        writer.abort();
    }

    #[tokio::test]
    async fn a_login_lifts_the_budget_and_the_deadline() {
        let (mut conn, mut client, _connections) = pair(limits(false)).await;
        let state = Arc::clone(&conn.state);
        let writer = tokio::spawn(async move {
            client.write_all(&vec![7u8; 256 << 10]).await.unwrap();
            client
        });
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0usize;
        while total < 64 << 10 {
            total += conn.read(&mut buf).await.unwrap();
        }
        // Parked at the budget; a login (from a request handler) wakes it.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            state.authenticate();
        });
        while total < 256 << 10 {
            total += conn.read(&mut buf).await.unwrap();
        }
        assert_eq!(total, 256 << 10);
        // Past the deadline, an authenticated connection still reads.
        let mut client = writer.await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        client.write_all(b"more").await.unwrap();
        assert_eq!(conn.read(&mut buf).await.unwrap(), 4);
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Connections::new(limits(true), None);
        let mut kept = Vec::new();
        for _ in 0..3 {
            let _client = TcpStream::connect(addr).await.unwrap();
            let (io, peer) = listener.accept().await.unwrap();
            kept.push((_client, connections.admit(io, Some(peer))));
        }
        assert!(kept[0].1.is_some() && kept[1].1.is_some());
        assert!(kept[2].1.is_none(), "the third is over the cap of 2");
        // A closed connection makes room.
        kept.remove(0);
        let _client = TcpStream::connect(addr).await.unwrap();
        let (io, peer) = listener.accept().await.unwrap();
        assert!(connections.admit(io, Some(peer)).is_some());
    }
}
