//! How the engine opens sessions and knows the users they run as: [`Engine::session`] (as
//! `SYS`), [`Engine::session_as`] a catalog user, names, password checks and imported users.
//! Beside the engine and the session (each of which the other's file would otherwise import).

use super::engine::Engine;
use super::privileges;
use super::session::Session;
use crate::core::error::Result;
use crate::core::privileges::{SYS_USER, SystemPrivilege};
use crate::exists_err;
use crate::missing_err;
use crate::{privilege_err, setting_err};

impl Engine {
    /// Opens a session (its own settings; the engine's GPUs and UDFs) as `SYS`: every
    /// privilege, unless the engine restricts its sessions.
    pub fn session(&self) -> Session {
        Session::new(self.clone())
    }

    /// Opens a session of catalog user `user` (`CREATE USER`), with that user's privileges
    /// (bounded by the `RESTRICTED` role if the engine restricts its sessions). A name is found
    /// as written, else as Exasol folds it (upper case); `SYS` is [`Engine::session`].
    ///
    /// # Errors
    ///
    /// 42704 when there is no such user; 42501 when the user lacks `CREATE SESSION`.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let engine = accelsql_engine::Engine::with_options(accelsql_engine::EngineOptions {
    ///     password_rounds: 1000,
    ///     ..Default::default()
    /// })
    /// .unwrap();
    /// let sys = engine.session();
    /// sys.sql("CREATE USER ann IDENTIFIED BY \"pw\"").await.unwrap();
    /// assert_eq!(engine.session_as("ann").unwrap_err().code(), "42501");
    /// sys.sql("GRANT CREATE SESSION TO ann").await.unwrap();
    /// let ann = engine.session_as("ann").unwrap();
    /// let e = ann.sql("CREATE USER bob IDENTIFIED BY \"pw\"").await.unwrap_err();
    /// assert_eq!(e.code(), "42501");
    /// # });
    /// ```
    pub fn session_as(&self, user: &str) -> Result<Session> {
        let name = self
            .user_name(user)
            .ok_or_else(|| missing_err!("user {user}"))?;
        let session = self.session();
        if name == SYS_USER {
            return Ok(session);
        }
        let grants = self
            .scripts()
            .security()
            .grants_of(&name, self.state().restricted);
        privileges::require(
            &grants,
            SystemPrivilege::CreateSession,
            &format!("a session of user {name}"),
        )?;
        session.identity.set_account(&name);
        session.identity.set_user(Some(name), true);
        session.refresh_grants();
        Ok(session)
    }

    /// The catalog's name of user `user` (its one form, [`canonical_account`]; a catalog from
    /// before names had one form may hold it as written), if there is one; `SYS` always
    /// exists.
    ///
    /// [`canonical_account`]: crate::canonical_account
    pub fn user_name(&self, user: &str) -> Option<String> {
        let security = self.scripts().security();
        [
            crate::core::privileges::canonical_account(user),
            user.to_string(),
        ]
        .into_iter()
        .find(|n| security.is_user(n))
    }

    /// Whether `password` is catalog user `user`'s (a server's login check). Slow on purpose
    /// (a salted PBKDF2 hash): call it off the async threads. `SYS` has no password.
    pub fn verify_password(&self, user: &str, password: &str) -> bool {
        let Some(name) = self.user_name(user) else {
            return false;
        };
        let security = self.scripts().security();
        security
            .users
            .get(&name)
            .is_some_and(|u| crate::core::passwords::verify_password(&u.password, password))
    }

    /// Adds catalog user `user` with an existing password hash (`pbkdf2-sha256:ROUNDS:SALT:HASH`,
    /// as a server's users file holds it): what `accelsql users import` does for each line. An
    /// existing user of that name keeps its privileges and gets the new hash; returns whether
    /// the user is new.
    pub fn import_user(&self, user: &str, hash: &str) -> Result<bool> {
        crate::core::passwords::check_hash(hash)
            .map_err(|message| setting_err!(format!("password hash of {user}"), "{message}"))?;
        let user = &crate::core::privileges::canonical_account(user);
        if user.is_empty() || user == SYS_USER {
            return Err(privilege_err!("a user named {user:?} cannot be imported"));
        }
        let mut added = false;
        self.scripts().change_security(|s| {
            if s.is_role(user) {
                return Err(exists_err!("role {user}"));
            }
            match s.users.get_mut(user) {
                Some(entry) => entry.password = hash.to_string(),
                None => {
                    added = true;
                    s.users.insert(
                        user.to_string(),
                        crate::catalog::security::UserEntry {
                            password: hash.to_string(),
                            consumer_group: None,
                            created_micros: 0,
                            created_by: SYS_USER.to_string(),
                        },
                    );
                }
            }
            Ok(())
        })?;
        Ok(added)
    }
}
