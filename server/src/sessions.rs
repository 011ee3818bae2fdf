//! The server's client sessions: one accelsql [`Session`] per Flight SQL connection (per bearer
//! token, or per TCP peer when the server runs without users), each with its prepared
//! statements, its results waiting to be fetched, and its results being streamed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::common::ScalarValue;
use accelsql_engine::datafusion::execution::SendableRecordBatchStream;
use accelsql_engine::{Engine, Session};

use crate::error::{Result, ServerError};
use crate::unknown_handle_err;

/// How long an executed statement's result waits for its DoGet before it is dropped.
pub(crate) const UNCLAIMED_RESULT_TTL: Duration = Duration::from_secs(120);

/// Locks `m`, taking over a poisoned lock (the data stay consistent: every critical section
/// here is a map insert or removal).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A prepared statement: its text and the parameter rows bound to it (DoPut).
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    pub(crate) sql: String,
    /// One entry per bound row; empty: no parameters.
    pub(crate) params: Vec<Vec<ScalarValue>>,
}

/// An executed statement whose result the client has not fetched yet. Its stream has not been
/// polled, so it holds no GPU lease.
pub(crate) struct PendingResult {
    pub(crate) stream: SendableRecordBatchStream,
    /// The server-wide statement number (for the log).
    pub(crate) number: u64,
    /// The engine's statement id (`accelsql.udf_calls`), when it planned one.
    pub(crate) statement_id: Option<u64>,
    pub(crate) sql: String,
    pub(crate) started: Instant,
}

/// A result being streamed: the statement's stream, which a cancel (or the server's shutdown)
/// takes and drops at once, releasing its lease even while the client does not read.
#[derive(Default)]
pub(crate) struct RunningSlot {
    pub(crate) stream: Mutex<Option<SendableRecordBatchStream>>,
    pub(crate) cancelled: AtomicBool,
    /// The response's task, woken by a cancel so that it reports it (the dropped stream will
    /// not wake it).
    pub(crate) waker: futures::task::AtomicWaker,
}

impl RunningSlot {
    /// Stops the statement: its stream (plan, workers, lease) is dropped now; the client's next
    /// read gets error 57014.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        let stream = lock(&self.stream).take();
        drop(stream);
        self.waker.wake();
    }
}

/// One client's session.
pub(crate) struct ClientSession {
    /// A number for the log.
    pub(crate) id: u64,
    /// Who authenticated (`-` without users).
    pub(crate) user: String,
    pub(crate) session: Arc<Session>,
    prepared: Mutex<HashMap<String, Prepared>>,
    results: Mutex<HashMap<String, PendingResult>>,
    running: Mutex<HashMap<String, Arc<RunningSlot>>>,
    next_handle: AtomicU64,
    last_used: Mutex<Instant>,
}

impl ClientSession {
    fn new(id: u64, user: String, session: Session) -> Self {
        Self {
            id,
            user,
            session: Arc::new(session),
            prepared: Mutex::default(),
            results: Mutex::default(),
            running: Mutex::default(),
            next_handle: AtomicU64::new(1),
            last_used: Mutex::new(Instant::now()),
        }
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// A handle no other object of this session has.
    fn new_handle(&self, kind: &str) -> String {
        let n = self.next_handle.fetch_add(1, Ordering::Relaxed);
        format!("{kind}-{}-{n}", self.id)
    }

    /// A handle for a result streamed straight from a prepared statement's DoGet (no ticket).
    pub(crate) fn direct_handle(&self) -> String {
        self.new_handle("d")
    }

    /// Keeps a prepared statement; returns its handle.
    pub(crate) fn prepare(&self, sql: String) -> String {
        let handle = self.new_handle("p");
        lock(&self.prepared).insert(
            handle.clone(),
            Prepared {
                sql,
                params: Vec::new(),
            },
        );
        handle
    }

    /// The prepared statement `handle`.
    pub(crate) fn prepared(&self, handle: &str) -> Result<Prepared> {
        lock(&self.prepared)
            .get(handle)
            .cloned()
            .ok_or_else(|| no_prepared(handle))
    }

    /// Binds parameter rows to the prepared statement `handle`.
    pub(crate) fn bind(&self, handle: &str, params: Vec<Vec<ScalarValue>>) -> Result<()> {
        let mut prepared = lock(&self.prepared);
        let entry = prepared
            .get_mut(handle)
            .ok_or_else(|| no_prepared(handle))?;
        entry.params = params;
        Ok(())
    }

    /// Closes the prepared statement `handle`.
    pub(crate) fn close_prepared(&self, handle: &str) -> Result<()> {
        lock(&self.prepared)
            .remove(handle)
            .map(drop)
            .ok_or_else(|| no_prepared(handle))
    }

    /// Keeps an executed statement's result for its DoGet; returns the ticket's handle. Results
    /// left unclaimed for [`UNCLAIMED_RESULT_TTL`] are dropped.
    pub(crate) fn store_result(&self, result: PendingResult) -> String {
        let handle = self.new_handle("r");
        self.prune_results();
        lock(&self.results).insert(handle.clone(), result);
        handle
    }

    /// Drops results left unclaimed for [`UNCLAIMED_RESULT_TTL`].
    fn prune_results(&self) {
        lock(&self.results).retain(|_, r| r.started.elapsed() < UNCLAIMED_RESULT_TTL);
    }

    /// Takes the result of ticket `handle` (a ticket can be fetched once).
    pub(crate) fn take_result(&self, handle: &str) -> Result<PendingResult> {
        lock(&self.results).remove(handle).ok_or_else(|| {
            unknown_handle_err!(
                "no result for ticket {handle:?} in this session: it was fetched already, \
                 expired ({} s unclaimed), cancelled, or belongs to another session",
                UNCLAIMED_RESULT_TTL.as_secs()
            )
        })
    }

    /// Drops the unfetched result `handle`; whether there was one.
    pub(crate) fn discard_result(&self, handle: &str) -> bool {
        lock(&self.results).remove(handle).is_some()
    }

    /// Registers a result being streamed under its ticket's handle.
    pub(crate) fn start_running(&self, handle: &str, slot: Arc<RunningSlot>) {
        lock(&self.running).insert(handle.to_string(), slot);
    }

    /// Unregisters a streamed result.
    pub(crate) fn stop_running(&self, handle: &str) {
        lock(&self.running).remove(handle);
    }

    /// Cancels the statement of ticket `handle`, fetched or not; whether there was one.
    pub(crate) fn cancel(&self, handle: &str) -> bool {
        let discarded = self.discard_result(handle);
        let slot = lock(&self.running).get(handle).cloned();
        match slot {
            Some(slot) => {
                slot.cancel();
                true
            }
            None => discarded,
        }
    }

    /// Cancels every statement of this session and drops its unfetched results.
    pub(crate) fn cancel_all(&self) {
        lock(&self.results).clear();
        let slots: Vec<_> = lock(&self.running).values().cloned().collect();
        for slot in slots {
            slot.cancel();
        }
    }

    fn idle_for(&self) -> Duration {
        if !lock(&self.running).is_empty() {
            return Duration::ZERO;
        }
        lock(&self.last_used).elapsed()
    }
}

fn no_prepared(handle: &str) -> ServerError {
    unknown_handle_err!(
        "no prepared statement {handle:?} in this session: it was closed, or belongs to another session"
    )
}

/// Who a request comes from.
pub(crate) enum Caller<'a> {
    /// A bearer token from the handshake.
    Token(&'a str),
    /// No token: the TCP peer (servers without users only).
    Peer(Option<SocketAddr>),
}

impl Caller<'_> {
    /// The key of the caller's session.
    fn key(&self) -> String {
        match self {
            Caller::Token(token) => format!("token:{token}"),
            Caller::Peer(Some(addr)) => format!("peer:{addr}"),
            Caller::Peer(None) => "peer:unknown".to_string(),
        }
    }
}

/// Every client session of a server.
pub(crate) struct Sessions {
    engine: Engine,
    sessions: Mutex<HashMap<String, Arc<ClientSession>>>,
    next_id: AtomicU64,
    idle_timeout: Duration,
    max_sessions: usize,
}

impl Sessions {
    pub(crate) fn new(engine: Engine, idle_timeout: Duration, max_sessions: usize) -> Self {
        Self {
            engine,
            sessions: Mutex::default(),
            next_id: AtomicU64::new(1),
            idle_timeout,
            max_sessions,
        }
    }

    /// A new session for `user`, unless the server has as many as it allows.
    fn open(
        &self,
        sessions: &HashMap<String, Arc<ClientSession>>,
        user: &str,
    ) -> Result<Arc<ClientSession>> {
        if sessions.len() >= self.max_sessions {
            return Err(ServerError::TooManySessions {
                max: self.max_sessions,
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(ClientSession::new(
            id,
            user.to_string(),
            self.engine.session(),
        )))
    }

    /// A new session for `user`, under a fresh bearer token (returned with it).
    pub(crate) fn open_with_token(&self, user: &str) -> Result<(String, Arc<ClientSession>)> {
        let token = crate::auth::new_token()?;
        let mut sessions = lock(&self.sessions);
        let client = self.open(&sessions, user)?;
        sessions.insert(Caller::Token(&token).key(), Arc::clone(&client));
        Ok((token, client))
    }

    /// The session of `caller`; a peer without one gets a new session.
    pub(crate) fn find(&self, caller: Caller<'_>) -> Result<Arc<ClientSession>> {
        let key = caller.key();
        let mut sessions = lock(&self.sessions);
        if let Some(client) = sessions.get(&key) {
            client.touch();
            return Ok(Arc::clone(client));
        }
        if key.starts_with("token:") {
            return Err(crate::unauthenticated_err!(
                "unknown or expired session token: authenticate again (handshake)"
            ));
        }
        let client = self.open(&sessions, "-")?;
        sessions.insert(key, Arc::clone(&client));
        Ok(client)
    }

    /// Ends the session of `caller`: its statements are cancelled. Whether there was one.
    pub(crate) fn close(&self, caller: Caller<'_>) -> bool {
        let removed = lock(&self.sessions).remove(&caller.key());
        match removed {
            Some(client) => {
                client.cancel_all();
                true
            }
            None => false,
        }
    }

    /// Ends sessions idle for longer than the idle timeout (none with a result streaming), and
    /// drops the others' results left unfetched too long. Returns how many sessions ended.
    pub(crate) fn expire_idle(&self) -> usize {
        let mut ended = Vec::new();
        lock(&self.sessions).retain(|_, client| {
            let keep = client.idle_for() < self.idle_timeout;
            if keep {
                client.prune_results();
            } else {
                ended.push(Arc::clone(client));
            }
            keep
        });
        for client in &ended {
            client.cancel_all();
        }
        ended.len()
    }

    /// Cancels every statement of every session and ends them all (shutdown).
    pub(crate) fn close_all(&self) {
        let all: Vec<_> = lock(&self.sessions).drain().map(|(_, c)| c).collect();
        for client in all {
            client.cancel_all();
        }
    }

    /// How many sessions are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.sessions).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        let engine = Engine::new().unwrap();
        Sessions::new(engine, Duration::from_secs(3600), 3)
    }

    #[test]
    fn tokens_find_their_own_session_only() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let s = sessions();
        let (a, client_a) = s.open_with_token("alice").unwrap();
        let (b, _) = s.open_with_token("bob").unwrap();
        assert_eq!(s.find(Caller::Token(&a)).unwrap().id, client_a.id);
        assert_ne!(s.find(Caller::Token(&b)).unwrap().id, client_a.id);
        let e = s.find(Caller::Token("forged")).err().unwrap();
        assert_eq!(e.code(), "28000");
        // A handle of one session is unknown in another.
        let handle = client_a.prepare("SELECT 1".into());
        assert!(client_a.prepared(&handle).is_ok());
        let other = s.find(Caller::Token(&b)).unwrap();
        assert_eq!(other.prepared(&handle).unwrap_err().code(), "26000");
        client_a.close_prepared(&handle).unwrap();
        assert_eq!(client_a.prepared(&handle).unwrap_err().code(), "26000");
        assert!(s.close(Caller::Token(&a)));
        assert_eq!(s.find(Caller::Token(&a)).err().unwrap().code(), "28000");
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn peers_get_a_session_each_and_idle_ones_expire() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let mut s = sessions();
        let p1: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let p2: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        let a = s.find(Caller::Peer(Some(p1))).unwrap().id;
        assert_eq!(s.find(Caller::Peer(Some(p1))).unwrap().id, a);
        assert_ne!(s.find(Caller::Peer(Some(p2))).unwrap().id, a);
        assert_eq!(s.expire_idle(), 0);
        // The third session is the last this server allows.
        s.open_with_token("carol").unwrap();
        let p3: SocketAddr = "127.0.0.1:1002".parse().unwrap();
        let e = s.find(Caller::Peer(Some(p3))).err().unwrap();
        assert_eq!(e.code(), "53300");
        assert_eq!(s.open_with_token("dave").err().unwrap().code(), "53300");
        s.idle_timeout = Duration::ZERO;
        assert_eq!(s.expire_idle(), 3);
        assert_eq!(s.len(), 0);
    }
}
