//! The server's client sessions: one accelsql [`Session`] per bearer token issued at a
//! handshake (or, on a server without authentication, per connection of a client that did not
//! shake hands), each with its prepared statements, its results waiting to be fetched, and its
//! results being streamed. A session never belongs to an address: a later connection from the
//! same address and port gets nothing of it. A session whose connections have all closed ends
//! after a short grace.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::datatypes::SchemaRef;
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

pub(crate) use crate::sync::lock;

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
    /// How many endpoints (tickets) its FlightInfo offers; every row goes to one of them.
    pub(crate) endpoints: usize,
    /// The query asked for an order (its one endpoint then gives the rows in it).
    pub(crate) ordered: bool,
    /// The server-wide statement number (for the log).
    pub(crate) number: u64,
    /// The engine's statement id (`accelsql.udf_calls`), when it planned one.
    pub(crate) statement_id: Option<u64>,
    pub(crate) sql: String,
    pub(crate) started: Instant,
}

/// The ticket of endpoint `index` of the result `handle` (the handle itself for a result of one
/// endpoint).
pub(crate) fn endpoint_ticket(handle: &str, index: usize, endpoints: usize) -> String {
    if endpoints <= 1 {
        handle.to_string()
    } else {
        format!("{handle}/{index}")
    }
}

/// A ticket's result handle and endpoint index (see [`endpoint_ticket`]).
pub(crate) fn split_ticket(ticket: &str) -> (&str, usize) {
    match ticket.rsplit_once('/') {
        Some((handle, index)) => match index.parse() {
            Ok(index) => (handle, index),
            Err(_) => (ticket, usize::MAX),
        },
        None => (ticket, 0),
    }
}

/// Where a streamed result stands.
pub(crate) enum SlotState {
    /// Rows may still come from the statement's stream.
    Running(SendableRecordBatchStream),
    /// Every row has been read.
    Ended,
    /// The statement failed; every reader gets this status.
    Failed(tonic::Status),
    /// Cancelled by the client or the server's shutdown.
    Cancelled,
    /// Every reader stopped before the end, so the statement was dropped.
    Abandoned,
}

/// The response tasks of a result's endpoints, woken together: whichever polls next takes the
/// next batch, so an endpoint never sleeps through the statement's end or a cancel.
#[derive(Default)]
pub(crate) struct ReaderWakers {
    wakers: Mutex<Vec<Option<Waker>>>,
}

impl ReaderWakers {
    /// Remembers endpoint `index`'s task.
    pub(crate) fn register(&self, index: usize, waker: &Waker) {
        let mut wakers = lock(&self.wakers);
        if wakers.len() <= index {
            wakers.resize(index + 1, None);
        }
        match &mut wakers[index] {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }
}

impl Wake for ReaderWakers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        for waker in lock(&self.wakers).iter().flatten() {
            waker.wake_by_ref();
        }
    }
}

/// A result being streamed, shared by the DoGet responses of its endpoints. Every batch goes to
/// the endpoint that asks first, so readers may come in any order, at once or one after the
/// other, and a reader of one endpoint alone still gets every row. The statement (its plan,
/// workers and GPU lease) lives until the last batch is read, the statement is cancelled (which
/// drops it at once, even while no one reads), or every reader has stopped early.
pub(crate) struct RunningSlot {
    /// The result's schema (each endpoint's stream starts with it).
    pub(crate) schema: SchemaRef,
    pub(crate) state: Mutex<SlotState>,
    pub(crate) wakers: Arc<ReaderWakers>,
    claimed: Mutex<Vec<bool>>,
    readers: AtomicUsize,
    /// Rows handed to readers so far.
    pub(crate) rows: AtomicU64,
    /// Whether the statement's log line was written.
    pub(crate) logged: AtomicBool,
    /// When the last reader left (for dropping a finished result's unread endpoints).
    idle_since: Mutex<Option<Instant>>,
    pub(crate) number: u64,
    pub(crate) statement_id: Option<u64>,
    pub(crate) sql: String,
    pub(crate) started: Instant,
}

impl RunningSlot {
    /// A slot streaming `pending`'s statement, no endpoint claimed yet.
    pub(crate) fn new(pending: PendingResult) -> Self {
        Self {
            schema: pending.stream.schema(),
            state: Mutex::new(SlotState::Running(pending.stream)),
            wakers: Arc::default(),
            claimed: Mutex::new(vec![false; pending.endpoints.max(1)]),
            readers: AtomicUsize::new(0),
            rows: AtomicU64::new(0),
            logged: AtomicBool::new(false),
            idle_since: Mutex::new(None),
            number: pending.number,
            statement_id: pending.statement_id,
            sql: pending.sql,
            started: pending.started,
        }
    }

    /// Takes endpoint `index` for a reader; `false` when there is no such endpoint or it was
    /// taken already.
    fn claim(&self, index: usize) -> bool {
        let mut claimed = lock(&self.claimed);
        match claimed.get_mut(index) {
            Some(taken @ false) => {
                *taken = true;
                self.readers.fetch_add(1, Ordering::AcqRel);
                true
            }
            _ => false,
        }
    }

    /// A reader has stopped; whether it was the last one reading. The statement is dropped when
    /// it had not ended.
    pub(crate) fn leave(&self) -> bool {
        if self.readers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        *lock(&self.idle_since) = Some(Instant::now());
        self.finish(SlotState::Abandoned);
        true
    }

    /// Whether every endpoint has had its reader.
    pub(crate) fn all_claimed(&self) -> bool {
        lock(&self.claimed).iter().all(|c| *c)
    }

    /// Whether someone is reading it.
    fn is_read(&self) -> bool {
        self.readers.load(Ordering::Acquire) > 0
    }

    /// Whether it is finished, unread, and has waited [`UNCLAIMED_RESULT_TTL`] for its other
    /// endpoints' readers.
    fn expired(&self) -> bool {
        !self.is_read()
            && lock(&self.idle_since).is_some_and(|since| since.elapsed() >= UNCLAIMED_RESULT_TTL)
    }

    /// Ends a running statement with `end`: its stream (plan, workers, lease) is dropped now,
    /// outside the lock, and every reader is woken. A result that has ended keeps its end.
    pub(crate) fn finish(&self, end: SlotState) {
        let mut state = lock(&self.state);
        if !matches!(*state, SlotState::Running(_)) {
            return;
        }
        let stream = std::mem::replace(&mut *state, end);
        drop(state);
        drop(stream);
        self.wakers.wake_by_ref();
    }

    /// Stops the statement; each reader's next read gets error 57014.
    pub(crate) fn cancel(&self) {
        self.finish(SlotState::Cancelled);
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
        let streaming = lock(&self.running).values().filter(|s| s.is_read()).count();
        streaming + lock(&self.results).len()
    }

    /// How long none of its connections has been open (`None` while one is, or a result
    /// streams), forgetting the closed ones.
    fn orphaned_for(&self, connections: &Connections) -> Option<Duration> {
        let mut conns = lock(&self.conns);
        conns.retain(|c| connections.is_open(*c));
        let mut since = lock(&self.orphaned_since);
        if !conns.is_empty() || lock(&self.running).values().any(|s| s.is_read()) {
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
        lock(&self.running).retain(|_, s| !s.expired());
    }

    /// Starts reading the endpoint of `ticket`: the result's slot, streaming from the first
    /// endpoint claimed (a ticket can be fetched once). Returns the result's handle, the
    /// endpoint's index and the slot.
    pub(crate) fn claim(&self, ticket: &str) -> Result<(String, usize, Arc<RunningSlot>)> {
        let (handle, index) = split_ticket(ticket);
        let mut running = lock(&self.running);
        let slot = match running.get(handle) {
            Some(slot) => Arc::clone(slot),
            None => {
                let mut results = lock(&self.results);
                // A ticket naming no endpoint of the result leaves it for the right ones.
                let fits = results
                    .get(handle)
                    .is_some_and(|r| index < r.endpoints.max(1));
                let pending = if fits { results.remove(handle) } else { None };
                let Some(pending) = pending else {
                    return Err(unknown_ticket(ticket));
                };
                let slot = Arc::new(RunningSlot::new(pending));
                running.insert(handle.to_string(), Arc::clone(&slot));
                slot
            }
        };
        if !slot.claim(index) {
            return Err(unknown_ticket(ticket));
        }
        Ok((handle.to_string(), index, slot))
    }

    /// Streams `pending` under `handle` at once, to one reader (a prepared statement's DoGet).
    pub(crate) fn run_direct(&self, handle: &str, pending: PendingResult) -> Arc<RunningSlot> {
        let slot = Arc::new(RunningSlot::new(PendingResult {
            endpoints: 1,
            ..pending
        }));
        slot.claim(0);
        lock(&self.running).insert(handle.to_string(), Arc::clone(&slot));
        slot
    }

    /// Drops the unfetched result `handle`; whether there was one.
    pub(crate) fn discard_result(&self, handle: &str) -> bool {
        lock(&self.results).remove(handle).is_some()
    }

    /// Unregisters the streamed result `handle`.
    pub(crate) fn stop_running(&self, handle: &str) {
        lock(&self.running).remove(handle);
    }

    /// Cancels the statement of `ticket` (any endpoint's), fetched or not; whether there was
    /// one.
    pub(crate) fn cancel(&self, ticket: &str) -> bool {
        let (handle, _) = split_ticket(ticket);
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
        if lock(&self.running).values().any(|s| s.is_read()) {
            return Duration::ZERO;
        }
        lock(&self.last_used).elapsed()
    }
}

fn unknown_ticket(ticket: &str) -> ServerError {
    unknown_handle_err!(
        "no result for ticket {ticket:?} in this session: it was fetched already, expired ({} s \
         unclaimed), cancelled, or belongs to another session",
        UNCLAIMED_RESULT_TTL.as_secs()
    )
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
        // The Exasol port says its own when it logs in.
        session.set_client("Flight SQL");
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
    pub(crate) fn len(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// The statements whose results stream now (Flight), each with its session's engine id
    /// and user, oldest first.
    pub(crate) fn running(&self) -> Vec<RunningStatement> {
        let clients: Vec<_> = lock(&self.sessions).values().cloned().collect();
        let mut out: Vec<RunningStatement> = clients
            .iter()
            .flat_map(|client| {
                let slots: Vec<_> = lock(&client.running).values().cloned().collect();
                slots
                    .into_iter()
                    .filter(|slot| matches!(*lock(&slot.state), SlotState::Running(_)))
                    .map(|slot| RunningStatement {
                        session: client.session.id(),
                        user: client.session.user().unwrap_or_else(|| client.user.clone()),
                        number: slot.number,
                        statement_id: slot.statement_id,
                        sql: slot.sql.clone(),
                        elapsed: slot.started.elapsed(),
                        rows: slot.rows.load(Ordering::Relaxed),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.elapsed));
        out
    }

    /// Cancels statement `number` of the session whose engine id is `session` (its readers
    /// get 57014); whether it was running.
    pub(crate) fn cancel_statement(&self, session: u64, number: u64) -> bool {
        let client = lock(&self.sessions)
            .values()
            .find(|c| c.session.id() == session)
            .cloned();
        let Some(client) = client else {
            return false;
        };
        let slot = lock(&client.running)
            .values()
            .find(|s| s.number == number && matches!(*lock(&s.state), SlotState::Running(_)))
            .cloned();
        slot.map(|s| s.cancel()).is_some()
    }
}

/// A statement whose result streams now ([`Sessions::running`]).
#[derive(Debug, Clone)]
pub(crate) struct RunningStatement {
    /// Its session's engine id (as `EXA_ALL_SESSIONS` shows it).
    pub(crate) session: u64,
    /// Its session's user.
    pub(crate) user: String,
    /// Its number in the server's log.
    pub(crate) number: u64,
    /// The engine's statement id (as `accelsql.gpu_leases` and `udf_calls` show it).
    pub(crate) statement_id: Option<u64>,
    /// Its text.
    pub(crate) sql: String,
    /// How long it has run.
    pub(crate) elapsed: Duration,
    /// Rows handed to its readers so far.
    pub(crate) rows: u64,
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
    fn tickets_name_their_result_and_endpoint_and_each_is_claimed_once() {
        assert_eq!(endpoint_ticket("r-1-2", 0, 1), "r-1-2");
        assert_eq!(split_ticket("r-1-2"), ("r-1-2", 0));
        for i in 0..3 {
            let ticket = endpoint_ticket("r-1-2", i, 3);
            assert_eq!(split_ticket(&ticket), ("r-1-2", i));
        }
        assert_eq!(split_ticket("r-1-2/x").1, usize::MAX);

        let rt = runtime();
        let _guard = rt.enter();
        let (s, _) = sessions(3, 3);
        let (_, client) = s.open_with_token("alice", None).unwrap();
        let pending = |endpoints| PendingResult {
            stream: empty(),
            endpoints,
            ordered: false,
            number: 1,
            statement_id: None,
            sql: "SELECT 1".into(),
            started: Instant::now(),
        };
        let handle = client.store_result(pending(2));
        // No third endpoint; each of the two is read once; the slot is shared.
        assert!(client.claim(&endpoint_ticket(&handle, 2, 2)).is_err());
        let (h, i, first) = client.claim(&endpoint_ticket(&handle, 1, 2)).unwrap();
        assert_eq!((h.as_str(), i), (handle.as_str(), 1));
        assert!(client.claim(&endpoint_ticket(&handle, 1, 2)).is_err());
        let (_, _, second) = client.claim(&endpoint_ticket(&handle, 0, 2)).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(client.statements(), 1);
        // The first reader leaves: the statement goes on for the other.
        assert!(!first.leave());
        assert!(matches!(*lock(&first.state), SlotState::Running(_)));
        // The last leaves before the end: the statement is dropped.
        assert!(second.leave());
        assert!(matches!(*lock(&first.state), SlotState::Abandoned));
        assert_eq!(client.statements(), 0);
        // A cancel reaches a result nobody has started reading.
        let handle = client.store_result(pending(1));
        assert!(client.cancel(&handle));
        assert!(client.claim(&handle).is_err());
    }

    /// An empty statement stream.
    fn empty() -> SendableRecordBatchStream {
        use accelsql_engine::datafusion::arrow::datatypes::Schema;
        use accelsql_engine::datafusion::physical_plan::EmptyRecordBatchStream;
        Box::pin(EmptyRecordBatchStream::new(Arc::new(Schema::empty())))
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
