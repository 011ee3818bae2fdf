//! Who may log in, and how fast: the server's authentication mode (users file, a token, or
//! none), the rate limit on failed logins per user name and per address, and the small pool
//! that password hashing runs on, so that a login storm cannot starve running statements.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use accelsql_engine::canonical_account;
use tokio::sync::Semaphore;

use crate::auth::{Users, constant_time_eq, parse_basic};
use crate::error::{Result, ServerError};
use crate::sync::lock;
use crate::unauthenticated_err;

/// Failed logins a user name (or an address) may have in a burst before it must wait.
const FAILURE_BURST: f64 = 5.0;
/// How fast the allowance comes back: one failed login per this long.
const REFILL_EVERY: Duration = Duration::from_secs(1);
/// Past this many tracked names and addresses, fully refilled entries are forgotten.
const MAX_TRACKED: usize = 10_000;

/// How a server lets clients in.
pub(crate) enum Gate {
    /// Nobody logs in (`--no-auth`, loopback only): every connection is trusted.
    Open,
    /// Any user name with this token as the password (the default without a users file).
    Token(String),
    /// The users of a users file (reloaded on SIGHUP).
    Users {
        /// The users file.
        path: PathBuf,
        /// Its users as last loaded.
        users: RwLock<Arc<Users>>,
    },
}

/// One name's or address's allowance of failed logins (a token bucket).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full() -> Self {
        Self {
            tokens: FAILURE_BURST,
            at: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let gained = now.duration_since(self.at).as_secs_f64() / REFILL_EVERY.as_secs_f64();
        self.tokens = (self.tokens + gained).min(FAILURE_BURST);
        self.at = now;
    }

    /// How long until one more failure is allowed (zero: now).
    fn wait(&self) -> Duration {
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            REFILL_EVERY.mul_f64(1.0 - self.tokens)
        }
    }
}

/// Where a login comes from, for its allowance: the IPv4 address, or an IPv6 address's /64
/// network (one host can take any address of its /64, so a finer key would cost it nothing).
fn source_of(peer: Option<IpAddr>) -> String {
    match peer {
        None => "?".into(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

/// The server's login checks.
pub(crate) struct Login {
    gate: Gate,
    /// The engine whose catalog users (`CREATE USER`) may log in with their own passwords,
    /// whatever the gate.
    catalog: Option<accelsql_engine::Engine>,
    buckets: Mutex<HashMap<String, Bucket>>,
    /// Password hashing runs only on this many blocking threads at once.
    hashing: Semaphore,
}

impl Login {
    pub(crate) fn new(gate: Gate) -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            gate,
            catalog: None,
            buckets: Mutex::default(),
            hashing: Semaphore::new((threads / 4).clamp(1, 4)),
        }
    }

    /// Lets the users of `engine`'s catalog log in with their passwords; such a user's name
    /// is looked up there first.
    pub(crate) fn with_catalog(mut self, engine: accelsql_engine::Engine) -> Self {
        self.catalog = Some(engine);
        self
    }

    /// Whether clients must log in.
    pub(crate) fn required(&self) -> bool {
        !matches!(self.gate, Gate::Open)
    }

    /// Reloads the users file (SIGHUP); how many users it has now. On an error the users stay
    /// as they were.
    pub(crate) fn reload(&self) -> Result<Option<usize>> {
        let Gate::Users { path, users } = &self.gate else {
            return Ok(None);
        };
        let fresh = Users::load(path)?;
        if fresh.is_empty() {
            return Err(ServerError::Config {
                message: format!("the users file {} has no users", path.display()),
            });
        }
        let count = fresh.len();
        *users.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        Ok(Some(count))
    }

    /// Checks a handshake's `authorization` header; the user name on success.
    pub(crate) async fn check(&self, header: Option<&str>, peer: Option<IpAddr>) -> Result<String> {
        let users = match &self.gate {
            Gate::Open => {
                // No login needed; a name given is kept for the log.
                return Ok(header
                    .and_then(|h| parse_basic(h).ok())
                    .map_or_else(|| "-".into(), |(user, _)| canonical_account(&user)));
            }
            Gate::Token(_) => None,
            Gate::Users { users, .. } => {
                Some(Arc::clone(&users.read().unwrap_or_else(|e| e.into_inner())))
            }
        };
        let Some(header) = header else {
            return Err(unauthenticated_err!(
                "this server needs a user and password (HTTP basic credentials on the \
                 handshake; without a users file, any user with the server's token as password)"
            ));
        };
        let (user, password) = parse_basic(header)?;
        // One form of the name for the allowance, the caps and the session (`low`, `LOW` and
        // `"low"` are one user).
        let user = canonical_account(&user);
        // Failures count against the name from this source, and against the source: someone
        // guessing alice's password from elsewhere slows only themselves, and alice's right
        // password from her own address still logs in.
        let source = source_of(peer);
        let keys = [format!("user:{user}@{source}"), format!("source:{source}")];
        self.admit(&keys, &user, peer)?;
        let catalog_user = self
            .catalog
            .as_ref()
            .filter(|engine| {
                engine
                    .user_name(&user)
                    .is_some_and(|n| n != accelsql_engine::SYS_USER)
            })
            .cloned();
        let ok = match (&self.gate, users) {
            // A catalog user's own password, checked like the users file's.
            _ if catalog_user.is_some() => {
                let name = user.clone();
                self.hash_check(move || {
                    catalog_user.is_some_and(|e| e.verify_password(&name, &password))
                })
                .await?
            }
            (Gate::Token(token), _) => constant_time_eq(password.as_bytes(), token.as_bytes()),
            (_, Some(users)) => {
                let name = user.clone();
                self.hash_check(move || users.verify(&name, &password))
                    .await?
            }
            (_, None) => false,
        };
        if ok {
            return Ok(if user.is_empty() { "-".into() } else { user });
        }
        self.failed(&keys);
        crate::metrics::record_login_failure();
        Err(unauthenticated_err!("wrong user or password"))
    }

    /// Runs a password check: hashing takes a while, so off the async threads, a few at a
    /// time (a login storm cannot starve running statements).
    async fn hash_check(&self, check: impl FnOnce() -> bool + Send + 'static) -> Result<bool> {
        let _permit = self
            .hashing
            .acquire()
            .await
            .map_err(|_| ServerError::Internal {
                message: "the password hashing pool is closed".into(),
            })?;
        Ok(tokio::task::spawn_blocking(check).await.unwrap_or(false))
    }

    /// Refuses a login from a name or address out of failed-login allowance.
    fn admit(&self, keys: &[String], user: &str, peer: Option<IpAddr>) -> Result<()> {
        let mut buckets = lock(&self.buckets);
        for key in keys {
            if let Some(bucket) = buckets.get_mut(key) {
                bucket.refill();
                let wait = bucket.wait();
                if !wait.is_zero() {
                    let source = source_of(peer);
                    let whose = if key.starts_with("user:") {
                        format!("user {user:?} from {source}")
                    } else {
                        format!("address {source}")
                    };
                    return Err(ServerError::LoginRateLimited {
                        message: format!(
                            "too many failed logins for {whose}: try again in {:.1} s",
                            wait.as_secs_f64()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Counts a failed login against every key.
    fn failed(&self, keys: &[String]) {
        let mut buckets = lock(&self.buckets);
        if buckets.len() > MAX_TRACKED {
            buckets.retain(|_, b| {
                b.refill();
                b.tokens < FAILURE_BURST
            });
        }
        for key in keys {
            let bucket = buckets.entry(key.clone()).or_insert_with(Bucket::full);
            bucket.refill();
            bucket.tokens = (bucket.tokens - 1.0).max(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    fn basic(user: &str, password: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}")
    }

    #[tokio::test]
    async fn the_token_is_the_password_for_any_user() {
        let login = Login::new(Gate::Token("s3cret".into()));
        assert!(login.required());
        let peer = Some(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(
            login
                .check(Some(&basic("ann", "s3cret")), peer)
                .await
                .unwrap(),
            "ANN"
        );
        let e = login
            .check(Some(&basic("ann", "s3cre")), peer)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "28000");
        let e = login.check(None, peer).await.unwrap_err();
        assert_eq!(e.code(), "28000");
    }

    #[tokio::test]
    async fn failed_logins_slow_their_source_and_not_the_user_elsewhere() {
        let login = Login::new(Gate::Token("t".into()));
        let a = Some(IpAddr::from([127, 0, 0, 1]));
        let b = Some(IpAddr::from([127, 0, 0, 2]));
        for _ in 0..5 {
            let e = login.check(Some(&basic("eve", "x")), a).await.unwrap_err();
            assert_eq!(e.code(), "28000");
        }
        // The burst is spent from `a`: even the right password is refused there unchecked,
        // for eve and for anyone else.
        let e = login.check(Some(&basic("eve", "t")), a).await.unwrap_err();
        assert_eq!(e.code(), "28L01", "{e}");
        let e = login.check(Some(&basic("bob", "t")), a).await.unwrap_err();
        assert_eq!(e.code(), "28L01", "{e}");
        assert!(e.to_string().contains("address 127.0.0.1"), "{e}");
        // From another address, eve's right password logs her in at once.
        assert_eq!(
            login.check(Some(&basic("eve", "t")), b).await.unwrap(),
            "EVE"
        );
        // Spelled another way the name is the same user, and the same allowance.
        for _ in 0..5 {
            let _ = login.check(Some(&basic("Bob", "x")), b).await;
        }
        let e = login.check(Some(&basic("BOB", "t")), b).await.unwrap_err();
        assert_eq!(e.code(), "28L01", "{e}");
        // The allowance comes back.
        tokio::time::sleep(REFILL_EVERY + Duration::from_millis(100)).await;
        assert_eq!(
            login.check(Some(&basic("eve", "t")), a).await.unwrap(),
            "EVE"
        );
    }

    #[test]
    fn ipv6_sources_are_their_slash_64() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let other: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(source_of(Some(one)), source_of(Some(other)));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(source_of(Some(mapped)), "10.0.0.1");
    }

    #[tokio::test]
    async fn an_open_server_lets_everyone_in() {
        let login = Login::new(Gate::Open);
        assert!(!login.required());
        assert_eq!(login.check(None, None).await.unwrap(), "-");
        assert_eq!(
            login.check(Some(&basic("zed", "")), None).await.unwrap(),
            "ZED"
        );
    }
}
