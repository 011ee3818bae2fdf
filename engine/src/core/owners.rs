//! Whose statements are whose: each session's identity (its number, its user, whether it may see
//! other sessions' SQL) and the owner and text of each recent statement, so that
//! `accelsql.gpu_leases` and `accelsql.udf_calls` show a session its own statements' SQL and
//! calls, and of others only who holds or waits.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::privileges::{Grants, SystemPrivilege};

/// How many recent statements' owners an engine remembers.
const RECENT_STATEMENTS: usize = 4096;

/// The lease label of statement `id` of session `session`; [`statement_of_label`] reads it back.
pub(crate) fn lease_label(id: u64, session: u64) -> String {
    format!("{id} of session {session}")
}

/// The session a label of [`lease_label`] names (`None` for other labels).
pub(crate) fn session_of_label(label: &str) -> Option<u64> {
    label.rsplit_once(" of session ")?.1.parse().ok()
}

/// The statement id a label of [`lease_label`] names (`None` for other labels, such as a
/// cluster task's).
pub(crate) fn statement_of_label(label: &str) -> Option<u64> {
    let (id, rest) = label.split_once(' ')?;
    rest.starts_with("of session ").then(|| id.parse().ok())?
}

/// The session, user and text of one statement.
#[derive(Debug, Clone)]
pub(crate) struct StatementOwner {
    /// The session's number ([`crate::Session::id`]).
    pub(crate) session: u64,
    /// The session's user, when it has one ([`crate::Session::set_user`]).
    pub(crate) user: Option<String>,
    /// The statement's text, as system tables show it.
    pub(crate) text: String,
}

/// The owners of an engine's recent statements, by statement id.
#[derive(Debug, Default)]
pub(crate) struct StatementOwners {
    inner: Mutex<(HashMap<u64, StatementOwner>, VecDeque<u64>)>,
}

impl StatementOwners {
    /// Remembers statement `id`'s owner (forgetting the oldest past [`RECENT_STATEMENTS`]).
    pub(crate) fn record(&self, id: u64, owner: StatementOwner) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *inner;
        if order.len() == RECENT_STATEMENTS
            && let Some(old) = order.pop_front()
        {
            map.remove(&old);
        }
        map.insert(id, owner);
        order.push_back(id);
    }

    /// Statement `id`'s owner, when it is recent.
    pub(crate) fn get(&self, id: u64) -> Option<StatementOwner> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.0.get(&id).cloned()
    }

    /// The recent statements `viewer` is shown in full (its own session's, or all).
    pub(crate) fn visible_to(&self, viewer: &Viewer) -> Vec<u64> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .0
            .iter()
            .filter(|(_, owner)| viewer.sees(owner))
            .map(|(id, _)| *id)
            .collect()
    }
}

/// Who reads a system table: which session, and whether it may see every session's SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Viewer {
    /// The reading session's number.
    pub(crate) session: u64,
    /// Whether it sees other sessions' SQL and calls too.
    pub(crate) sees_all: bool,
}

impl Viewer {
    /// Whether the statement owned by `owner` is shown in full to this viewer.
    pub(crate) fn sees(&self, owner: &StatementOwner) -> bool {
        self.sees_all || owner.session == self.session
    }
}

/// Ends a session from elsewhere (`KILL SESSION`): its running statements stop, new ones are
/// refused.
#[derive(Debug, Default)]
pub(crate) struct KillSwitch {
    killed: AtomicBool,
    notify: tokio::sync::Notify,
}

impl KillSwitch {
    /// Ends the session.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the session was ended.
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Completes once the session is ended.
    pub(crate) async fn killed(&self) {
        loop {
            // Made before the check: a kill between the two still wakes it.
            let notified = self.notify.notified();
            if self.is_killed() {
                return;
            }
            notified.await;
        }
    }
}

/// A session's identity, shared with its planning (a session-config extension that SQL cannot
/// set).
#[derive(Debug)]
pub(crate) struct SessionIdentity {
    /// The session's number.
    pub(crate) id: u64,
    user: RwLock<Option<String>>,
    sees_all: AtomicBool,
    restricted: Arc<AtomicBool>,
    /// What the session may do, as of its current statement (refreshed from the catalog at
    /// the start of each): read by the layers below the front end (files as tables, system
    /// tables, the placement rule) as a value, never from the catalog.
    grants: RwLock<Arc<Grants>>,
    /// The catalog user whose privileges the session has (`SYS`: the embedding program's, and
    /// a server's sessions for users of its users file).
    account: RwLock<String>,
    /// `KILL SESSION` ends it.
    pub(crate) kill: Arc<KillSwitch>,
    /// When it was opened.
    pub(crate) opened: std::time::SystemTime,
    /// What it came through (a server's front door and its driver), as its server says.
    client: RwLock<Option<String>>,
}

impl SessionIdentity {
    /// A session numbered `id`, seeing every session's SQL (the embedding program's own) until
    /// told otherwise; a restricted session never does.
    pub(crate) fn new(id: u64, restricted: Arc<AtomicBool>) -> Self {
        Self {
            id,
            user: RwLock::new(None),
            sees_all: AtomicBool::new(true),
            restricted,
            grants: RwLock::new(Arc::new(Grants::sys())),
            account: RwLock::new(super::privileges::SYS_USER.to_string()),
            kill: Arc::default(),
            opened: std::time::SystemTime::now(),
            client: RwLock::new(None),
        }
    }

    /// What the session came through (`None`: the embedding program).
    pub(crate) fn client(&self) -> Option<String> {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Says what the session came through.
    pub(crate) fn set_client(&self, client: &str) {
        *self.client.write().unwrap_or_else(|e| e.into_inner()) = Some(client.to_string());
    }

    /// The catalog user whose privileges the session has.
    pub(crate) fn account(&self) -> String {
        self.account
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Makes the session one of catalog user `account`.
    pub(crate) fn set_account(&self, account: &str) {
        *self.account.write().unwrap_or_else(|e| e.into_inner()) = account.to_string();
    }

    /// What the session may do, as of its current statement.
    pub(crate) fn grants(&self) -> Arc<Grants> {
        Arc::clone(&self.grants.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replaces what the session may do (at the start of each statement).
    pub(crate) fn set_grants(&self, grants: Grants) {
        *self.grants.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(grants);
    }

    /// The session's user.
    pub(crate) fn user(&self) -> Option<String> {
        self.user.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Names the session's user and says whether it may see other sessions' SQL.
    pub(crate) fn set_user(&self, user: Option<String>, sees_all: bool) {
        *self.user.write().unwrap_or_else(|e| e.into_inner()) = user;
        self.sees_all.store(sees_all, Ordering::Release);
    }

    /// The session as a reader of system tables.
    pub(crate) fn viewer(&self) -> Viewer {
        Viewer {
            session: self.id,
            sees_all: self.sees_all.load(Ordering::Acquire)
                && !self.restricted.load(Ordering::Acquire)
                && self.grants().has(SystemPrivilege::SelectAnyDictionary),
        }
    }
}

/// The live sessions of an engine, for `KILL SESSION`.
#[derive(Debug, Default)]
pub(crate) struct LiveSessions {
    sessions: Mutex<HashMap<u64, std::sync::Weak<SessionIdentity>>>,
}

impl LiveSessions {
    /// Registers a new session.
    pub(crate) fn add(&self, identity: &Arc<SessionIdentity>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| s.strong_count() > 0);
        sessions.insert(identity.id, Arc::downgrade(identity));
    }

    /// Every live session.
    pub(crate) fn all(&self) -> Vec<Arc<SessionIdentity>> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect()
    }

    /// The live session numbered `id`.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<SessionIdentity>> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.get(&id).and_then(std::sync::Weak::upgrade)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_back_their_statement_and_session() {
        let label = lease_label(12, 3);
        assert_eq!(statement_of_label(&label), Some(12));
        assert_eq!(session_of_label(&label), Some(3));
        assert_eq!(session_of_label("stage 2 of job x"), None);
        assert_ne!(session_of_label(&lease_label(1, 31)), Some(3));
    }

    fn owner(session: u64) -> StatementOwner {
        StatementOwner {
            session,
            user: None,
            text: "SELECT 1".into(),
        }
    }

    #[test]
    fn recent_owners_are_kept_and_old_ones_forgotten() {
        let owners = StatementOwners::default();
        for id in 0..(RECENT_STATEMENTS as u64 + 10) {
            owners.record(id, owner(id % 3));
        }
        assert!(owners.get(0).is_none());
        let last = RECENT_STATEMENTS as u64 + 9;
        assert_eq!(owners.get(last).unwrap().session, last % 3);
    }

    #[test]
    fn a_viewer_sees_its_own_or_all_unless_restricted() {
        let restricted = Arc::new(AtomicBool::new(false));
        let identity = SessionIdentity::new(7, Arc::clone(&restricted));
        assert!(identity.viewer().sees(&owner(8)));
        identity.set_user(Some("ann".into()), false);
        assert_eq!(identity.user().as_deref(), Some("ann"));
        assert!(identity.viewer().sees(&owner(7)));
        assert!(!identity.viewer().sees(&owner(8)));
        identity.set_user(Some("admin".into()), true);
        restricted.store(true, Ordering::Release);
        assert!(!identity.viewer().sees(&owner(8)));
    }
}
