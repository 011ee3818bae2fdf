//! The server's client sessions: one accelsql [`Session`] per bearer token issued at a
//! handshake (or, on a server without authentication, per connection of a client that did not
//! shake hands), each with its prepared statements, its results waiting to be fetched, and its
//! results being streamed. A session never belongs to an address: a later connection from the
//! same address and port gets nothing of it. A session whose connections have all closed ends
//! after a short grace.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::common::ScalarValue;
use accelsql_engine::datafusion::execution::SendableRecordBatchStream;
use accelsql_engine::datafusion::execution::memory_pool::MemoryReservation;
use accelsql_engine::{Engine, Session};

use crate::conn::Connections;
use crate::error::{Result, ServerError};
use crate::unknown_handle_err;

/// What a prepared statement costs beyond its text (its handle and entry), in bytes.
const PREPARED_OVERHEAD: usize = 256;

/// How long an executed statement's result waits for its DoGet before it is dropped.
pub(crate) const UNCLAIMED_RESULT_TTL: Duration = Duration::from_secs(120);

/// Locks `m`, taking over a poisoned lock (the data stay consistent: every critical section
/// here is a map insert or removal).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A prepared statement: its text and the parameter rows bound to it (DoPut), both counted
/// against the session's memory budget while it is open.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    pub(crate) sql: String,
    /// One entry per bound row; empty: no parameters.
    pub(crate) params: Vec<Vec<ScalarValue>>,
    /// The session memory its text and its parameter rows hold.
    _text_memory: Option<Arc<MemoryReservation>>,
    _params_memory: Option<Arc<MemoryReservation>>,
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
    /// The connections it was used over that may still be open.
    conns: Mutex<HashSet<u64>>,
    /// Since when none of its connections is open.
    orphaned_since: Mutex<Option<Instant>>,
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
            conns: Mutex::default(),
            orphaned_since: Mutex::new(None),
        }
    }

    /// Notes a request over connection `conn`.
    fn touch(&self, conn: Option<u64>) {
        *lock(&self.last_used) = Instant::now();
        if let Some(conn) = conn {
            lock(&self.conns).insert(conn);
            *lock(&self.orphaned_since) = None;
        }
    }

    /// How many statements it runs or holds results of (streaming or waiting to be fetched).
    pub(crate) fn statements(&self) -> usize {
        lock(&self.running).len() + lock(&self.results).len()
    }

    /// How long none of its connections has been open (`None` while one is, or a result
    /// streams), forgetting the closed ones.
    fn orphaned_for(&self, connections: &Connections) -> Option<Duration> {
        let mut conns = lock(&self.conns);
        conns.retain(|c| connections.is_open(*c));
        let mut since = lock(&self.orphaned_since);
        if !conns.is_empty() || !lock(&self.running).is_empty() {
            *since = None;
            return None;
        }
        Some(since.get_or_insert_with(Instant::now).elapsed())
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

    /// Keeps a prepared statement; returns its handle. Its text counts against the session's
    /// memory budget until it is closed (53200 when it does not fit).
    pub(crate) fn prepare(&self, sql: String) -> Result<String> {
        let memory = self
            .session
            .reserve_memory("a prepared statement", sql.len() + PREPARED_OVERHEAD)?;
        let handle = self.new_handle("p");
        lock(&self.prepared).insert(
            handle.clone(),
            Prepared {
                sql,
                params: Vec::new(),
                _text_memory: Some(Arc::new(memory)),
                _params_memory: None,
            },
        );
        Ok(handle)
    }

    /// The prepared statement `handle`.
    pub(crate) fn prepared(&self, handle: &str) -> Result<Prepared> {
        lock(&self.prepared)
            .get(handle)
            .cloned()
            .ok_or_else(|| no_prepared(handle))
    }

    /// Binds parameter rows to the prepared statement `handle`, in place of those bound before;
    /// they count against the session's memory budget (53200 when they do not fit, and the
    /// statement is left with none bound).
    pub(crate) fn bind(&self, handle: &str, params: Vec<Vec<ScalarValue>>) -> Result<()> {
        let mut prepared = lock(&self.prepared);
        let entry = prepared
            .get_mut(handle)
            .ok_or_else(|| no_prepared(handle))?;
        entry.params = Vec::new();
        entry._params_memory = None;
        let bytes = params
            .iter()
            .flatten()
            .map(ScalarValue::size)
            .sum::<usize>();
        let memory = self.session.reserve_memory("bound parameters", bytes)?;
        entry.params = params;
        entry._params_memory = Some(Arc::new(memory));
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
    /// No token, on this connection (servers without authentication only).
    Connection(u64),
}

impl Caller<'_> {
    /// The key of the caller's session.
    fn key(&self) -> String {
        match self {
            Caller::Token(token) => format!("token:{token}"),
            Caller::Connection(id) => format!("conn:{id}"),
        }
    }
}

/// The bounds on a server's sessions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLimits {
    /// A session unused this long (and streaming nothing) is ended.
    pub(crate) idle_timeout: Duration,
    /// A session none of whose connections is open ends after this long.
    pub(crate) grace: Duration,
    /// The most sessions at once.
    pub(crate) max_sessions: usize,
    /// The most sessions of one user.
    pub(crate) max_per_user: usize,
}

/// Who may see every session's SQL and calls in system tables (`--admin-user`).
pub(crate) type Admin = Option<String>;

/// Every client session of a server.
pub(crate) struct Sessions {
    engine: Engine,
    sessions: Mutex<HashMap<String, Arc<ClientSession>>>,
    next_id: AtomicU64,
    limits: SessionLimits,
    connections: Arc<Connections>,
    admin: Admin,
}

impl Sessions {
    pub(crate) fn new(
        engine: Engine,
        limits: SessionLimits,
        connections: Arc<Connections>,
        admin: Admin,
    ) -> Self {
        Self {
            engine,
            sessions: Mutex::default(),
            next_id: AtomicU64::new(1),
            limits,
            connections,
            admin,
        }
    }

    /// A new session for `user`, unless the server (or the user) has as many as allowed.
    fn open(
        &self,
        sessions: &HashMap<String, Arc<ClientSession>>,
        user: &str,
    ) -> Result<Arc<ClientSession>> {
        if sessions.len() >= self.limits.max_sessions {
            return Err(ServerError::TooManySessions {
                max: self.limits.max_sessions,
            });
        }
        if user != "-"
            && sessions.values().filter(|c| c.user == user).count() >= self.limits.max_per_user
        {
            return Err(ServerError::TooManyUserSessions {
                user: user.to_string(),
                max: self.limits.max_per_user,
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // A user of the engine's catalog (CREATE USER) gets a session with its privileges;
        // others (the users file's, the token's) the server's own, as before.
        let catalog_user = (user != "-")
            .then(|| self.engine.user_name(user))
            .flatten()
            .filter(|name| name != accelsql_engine::SYS_USER);
        let session = match catalog_user {
            Some(name) => self.engine.session_as(&name)?,
            None => {
                let session = self.engine.session();
                // Only the admin sees other sessions' SQL and calls (and not when restricted).
                let admin = user != "-" && self.admin.as_deref() == Some(user);
                session.set_user(user, admin);
                session
            }
        };
        Ok(Arc::new(ClientSession::new(id, user.to_string(), session)))
    }

    /// A new session for `user`, under a fresh bearer token (returned with it).
    /// `conn` is the handshake's connection.
    pub(crate) fn open_with_token(
        &self,
        user: &str,
        conn: Option<u64>,
    ) -> Result<(String, Arc<ClientSession>)> {
        let token = crate::auth::new_token()?;
        let mut sessions = lock(&self.sessions);
        let client = self.open(&sessions, user)?;
        client.touch(conn);
        sessions.insert(Caller::Token(&token).key(), Arc::clone(&client));
        Ok((token, client))
    }

    /// The session of `caller`, whose request came over connection `conn`; a connection
    /// without one gets a new session.
    pub(crate) fn find(&self, caller: Caller<'_>, conn: Option<u64>) -> Result<Arc<ClientSession>> {
        let key = caller.key();
        let mut sessions = lock(&self.sessions);
        if let Some(client) = sessions.get(&key) {
            if client.session.is_killed() {
                // Ended by KILL SESSION: its token goes with it.
                let client = sessions.remove(&key);
                drop(sessions);
                if let Some(client) = client {
                    client.cancel_all();
                }
                return Err(crate::unauthenticated_err!(
                    "this session was ended by KILL SESSION: authenticate again (handshake)"
                ));
            }
            client.touch(conn);
            return Ok(Arc::clone(client));
        }
        if key.starts_with("token:") {
            return Err(crate::unauthenticated_err!(
                "unknown or expired session token: authenticate again (handshake)"
            ));
        }
        let client = self.open(&sessions, "-")?;
        client.touch(conn);
        sessions.insert(key, Arc::clone(&client));
        Ok(client)
    }

    /// Whether `token` is a session's token.
    pub(crate) fn knows_token(&self, token: &str) -> bool {
        lock(&self.sessions).contains_key(&Caller::Token(token).key())
    }

    /// How many statements `user`'s sessions run or hold results of.
    pub(crate) fn statements_of(&self, user: &str) -> usize {
        let clients: Vec<_> = lock(&self.sessions)
            .values()
            .filter(|c| c.user == user)
            .cloned()
            .collect();
        clients.iter().map(|c| c.statements()).sum()
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

    /// Ends sessions idle for longer than the idle timeout, and sessions none of whose
    /// connections has been open for the grace (none with a result streaming); drops the
    /// others' results left unfetched too long. Returns how many sessions ended.
    pub(crate) fn reap(&self) -> usize {
        let mut ended = Vec::new();
        lock(&self.sessions).retain(|_, client| {
            // The server's bound, or the user's consumer group's IDLE_TIMEOUT if smaller.
            let idle_limit = client
                .session
                .idle_timeout()
                .map_or(self.limits.idle_timeout, |g| {
                    g.min(self.limits.idle_timeout)
                });
            let keep = client.idle_for() < idle_limit
                && client
                    .orphaned_for(&self.connections)
                    .is_none_or(|orphaned| orphaned < self.limits.grace);
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
    use crate::conn::ConnLimits;

    fn sessions(max_sessions: usize, max_per_user: usize) -> (Sessions, Arc<Connections>) {
        let engine = Engine::new().unwrap();
        let connections = Connections::new(
            ConnLimits {
                handshake_timeout: Duration::from_secs(5),
                pre_auth_bytes: 1 << 20,
                max_connections: 100,
                open: true,
            },
            None,
        );
        let limits = SessionLimits {
            idle_timeout: Duration::from_secs(3600),
            grace: Duration::from_secs(3600),
            max_sessions,
            max_per_user,
        };
        (
            Sessions::new(engine, limits, Arc::clone(&connections), None),
            connections,
        )
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn tokens_find_their_own_session_only() {
        let rt = runtime();
        let _guard = rt.enter();
        let (s, _) = sessions(3, 3);
        let (a, client_a) = s.open_with_token("alice", None).unwrap();
        let (b, _) = s.open_with_token("bob", None).unwrap();
        assert!(s.knows_token(&a) && !s.knows_token("forged"));
        assert_eq!(s.find(Caller::Token(&a), None).unwrap().id, client_a.id);
        assert_ne!(s.find(Caller::Token(&b), None).unwrap().id, client_a.id);
        let e = s.find(Caller::Token("forged"), None).err().unwrap();
        assert_eq!(e.code(), "28000");
        // A handle of one session is unknown in another.
        let handle = client_a.prepare("SELECT 1".into()).unwrap();
        assert!(client_a.prepared(&handle).is_ok());
        let other = s.find(Caller::Token(&b), None).unwrap();
        assert_eq!(other.prepared(&handle).unwrap_err().code(), "26000");
        client_a.close_prepared(&handle).unwrap();
        assert_eq!(client_a.prepared(&handle).unwrap_err().code(), "26000");
        assert!(s.close(Caller::Token(&a)));
        assert_eq!(
            s.find(Caller::Token(&a), None).err().unwrap().code(),
            "28000"
        );
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn connections_get_a_session_each_and_idle_ones_expire() {
        let rt = runtime();
        let _guard = rt.enter();
        let (mut s, _) = sessions(3, 3);
        let a = s.find(Caller::Connection(1), None).unwrap().id;
        assert_eq!(s.find(Caller::Connection(1), None).unwrap().id, a);
        assert_ne!(s.find(Caller::Connection(2), None).unwrap().id, a);
        // The third session is the last this server allows.
        s.open_with_token("carol", None).unwrap();
        let e = s.find(Caller::Connection(3), None).err().unwrap();
        assert_eq!(e.code(), "53300");
        assert_eq!(
            s.open_with_token("dave", None).err().unwrap().code(),
            "53300"
        );
        s.limits.idle_timeout = Duration::ZERO;
        assert_eq!(s.reap(), 3);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_user_has_at_most_its_share_of_sessions() {
        let rt = runtime();
        let _guard = rt.enter();
        let (s, _) = sessions(10, 2);
        s.open_with_token("alice", None).unwrap();
        s.open_with_token("alice", None).unwrap();
        let e = s.open_with_token("alice", None).err().unwrap();
        assert_eq!(e.code(), "53S01", "{e}");
        assert!(e.to_string().contains("--max-sessions-per-user"), "{e}");
        s.open_with_token("bob", None).unwrap();
        assert_eq!(s.statements_of("alice"), 0);
    }

    #[test]
    fn sessions_whose_connections_closed_end_after_the_grace() {
        let rt = runtime();
        let _guard = rt.enter();
        let (mut s, connections) = sessions(10, 10);
        s.limits.grace = Duration::ZERO;
        let open = connections.open_for_test();
        let (token, _) = s.open_with_token("alice", Some(open)).unwrap();
        // Connection 999 was never open: its session is orphaned at once.
        s.find(Caller::Connection(999), Some(999)).unwrap();
        assert_eq!(s.reap(), 1);
        assert!(s.knows_token(&token));
        connections.close_for_test(open);
        assert_eq!(s.reap(), 1);
        assert!(!s.knows_token(&token));
    }
}
