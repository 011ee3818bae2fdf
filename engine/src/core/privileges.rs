//! The vocabulary of privileges and what one session holds: system and object privileges by
//! Exasol's names (plus accelsql's `USE GPU`, `READ/WRITE SERVER FILES`), and [`Grants`], the
//! value a session's statement is checked against — computed by the catalog, passed down to the
//! planner and the statement stream, so no lower layer reaches up into the catalog.

use std::collections::BTreeSet;
use std::fmt;

use crate::core::groups::ConsumerGroup;

/// The embedding program's user: every privilege.
pub const SYS_USER: &str = "SYS";

/// The one form of a user's, role's or consumer group's name: upper case, whether the name was
/// quoted or not (`"sys"` is SYS), so that two spellings never name two accounts. Every lookup
/// (statements, logins, ownership, per-user caps, lockouts) goes through it.
pub fn canonical_account(name: &str) -> String {
    name.to_uppercase()
}
/// The role every user holds.
pub const PUBLIC_ROLE: &str = "PUBLIC";
/// The role that holds every privilege.
pub const DBA_ROLE: &str = "DBA";
/// The role whose privileges bound a restricted session, whatever its user holds.
pub const RESTRICTED_ROLE: &str = "RESTRICTED";

macro_rules! system_privileges {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A system privilege, by Exasol's name where Exasol has one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum SystemPrivilege {
            $($(#[$doc])* $variant,)*
        }

        impl SystemPrivilege {
            /// Every system privilege, in a stable order.
            pub const ALL: &'static [SystemPrivilege] = &[$(SystemPrivilege::$variant,)*];

            /// The privilege's name as `GRANT` takes it and the views show it.
            pub fn name(self) -> &'static str {
                match self {
                    $(SystemPrivilege::$variant => $name,)*
                }
            }
        }
    };
}

system_privileges! {
    /// Log in (a server's sessions, `Engine::session_as`).
    CreateSession => "CREATE SESSION",
    /// End other users' sessions (`KILL SESSION`); one's own need nothing.
    KillAnySession => "KILL ANY SESSION",
    /// Become another user in one's session (`IMPERSONATE u`).
    ImpersonateAnyUser => "IMPERSONATE ANY USER",
    /// Raise or lift a session's limits and change settings beyond the harmless ones; without
    /// it a session may only lower its limits.
    AlterSession => "ALTER SESSION",
    /// Create scripts (owned by their creator), and name the languages they run in
    /// (`ALTER SESSION SET SCRIPT_LANGUAGES`).
    CreateScript => "CREATE SCRIPT",
    /// Create or replace anyone's scripts.
    CreateAnyScript => "CREATE ANY SCRIPT",
    /// Drop anyone's scripts.
    DropAnyScript => "DROP ANY SCRIPT",
    /// Call, import and transfer through every script.
    ExecuteAnyScript => "EXECUTE ANY SCRIPT",
    /// Create connections (owned by their creator).
    CreateConnection => "CREATE CONNECTION",
    /// Replace or drop anyone's connections.
    DropAnyConnection => "DROP ANY CONNECTION",
    /// Use every connection in `IMPORT/EXPORT … AT`.
    UseAnyConnection => "USE ANY CONNECTION",
    /// Read every connection's password from a script (`exa.get_connection`).
    AccessAnyConnection => "ACCESS ANY CONNECTION",
    /// Create tables and views (owned by their creator).
    CreateTable => "CREATE TABLE",
    /// Create tables in anyone's schemas.
    CreateAnyTable => "CREATE ANY TABLE",
    /// Read every table.
    SelectAnyTable => "SELECT ANY TABLE",
    /// Insert into every table.
    InsertAnyTable => "INSERT ANY TABLE",
    /// Update every table.
    UpdateAnyTable => "UPDATE ANY TABLE",
    /// Delete from (and truncate) every table.
    DeleteAnyTable => "DELETE ANY TABLE",
    /// Change every table's columns, rename, compact and vacuum it.
    AlterAnyTable => "ALTER ANY TABLE",
    /// Drop every table.
    DropAnyTable => "DROP ANY TABLE",
    /// Create schemas in the session.
    CreateSchema => "CREATE SCHEMA",
    /// Read files on the server: files named as tables, `CREATE EXTERNAL TABLE`.
    ReadServerFiles => "READ SERVER FILES",
    /// Write files on the server: `COPY … TO`.
    WriteServerFiles => "WRITE SERVER FILES",
    /// Read the `EXA_DBA_*` views and every session's SQL in `accelsql.gpu_leases`.
    SelectAnyDictionary => "SELECT ANY DICTIONARY",
    /// Run UDF calls on the GPUs (accelsql's own): without it a required GPU call fails and an
    /// optional one runs on the CPU.
    UseGpu => "USE GPU",
    /// Create, change and drop consumer groups, and put users in them.
    ManageConsumerGroups => "MANAGE CONSUMER GROUPS",
    /// Create users.
    CreateUser => "CREATE USER",
    /// Change any user's password or consumer group.
    AlterUser => "ALTER USER",
    /// Drop users.
    DropUser => "DROP USER",
    /// Create roles.
    CreateRole => "CREATE ROLE",
    /// Drop any role.
    DropAnyRole => "DROP ANY ROLE",
    /// Grant and revoke any role.
    GrantAnyRole => "GRANT ANY ROLE",
    /// Grant and revoke any system privilege.
    GrantAnyPrivilege => "GRANT ANY PRIVILEGE",
    /// Grant and revoke privileges on anyone's objects.
    GrantAnyObjectPrivilege => "GRANT ANY OBJECT PRIVILEGE",
    /// Grant and revoke any connection.
    GrantAnyConnection => "GRANT ANY CONNECTION",
}

impl SystemPrivilege {
    /// The privilege `name` names (any case, spaces as written, `_` for spaces accepted).
    pub fn parse(name: &str) -> Option<Self> {
        let wanted = normalized(name);
        Self::ALL.iter().copied().find(|p| p.name() == wanted)
    }
}

impl fmt::Display for SystemPrivilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Upper case, single spaces, `_` read as a space.
fn normalized(name: &str) -> String {
    name.replace('_', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase()
}

/// The kind of object an object privilege is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// A script (`schema.name`, as the catalog keys it).
    Script,
    /// A connection.
    Connection,
    /// A schema.
    Schema,
    /// A table or view.
    Table,
}

impl ObjectKind {
    /// The kind as `EXA_*_OBJ_PRIVS.OBJECT_TYPE` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Script => "SCRIPT",
            Self::Connection => "CONNECTION",
            Self::Schema => "SCHEMA",
            Self::Table => "TABLE",
        }
    }

    /// The kind `word` names (`SCRIPT`, `CONNECTION`, `SCHEMA`, `TABLE`, `VIEW`, `FUNCTION`).
    pub fn parse(word: &str) -> Option<Self> {
        match word.to_ascii_uppercase().as_str() {
            "SCRIPT" | "FUNCTION" => Some(Self::Script),
            "CONNECTION" => Some(Self::Connection),
            "SCHEMA" => Some(Self::Schema),
            "TABLE" | "VIEW" => Some(Self::Table),
            _ => None,
        }
    }
}

/// An object privilege, by Exasol's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectPrivilege {
    /// Read a table, or the tables of a schema.
    Select,
    /// Insert into a table.
    Insert,
    /// Update a table.
    Update,
    /// Delete from a table.
    Delete,
    /// Change an object.
    Alter,
    /// Call a script (and `exa.import_script` it, `IMPORT/EXPORT` through it).
    Execute,
    /// Read a connection's password from a script (`exa.get_connection`).
    Access,
    /// Use a connection in `IMPORT/EXPORT … AT` (Exasol's `GRANT CONNECTION c`).
    Use,
}

impl ObjectPrivilege {
    /// Every object privilege.
    pub const ALL: &'static [ObjectPrivilege] = &[
        Self::Select,
        Self::Insert,
        Self::Update,
        Self::Delete,
        Self::Alter,
        Self::Execute,
        Self::Access,
        Self::Use,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Select => "SELECT",
            Self::Insert => "INSERT",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Alter => "ALTER",
            Self::Execute => "EXECUTE",
            Self::Access => "ACCESS",
            Self::Use => "USE",
        }
    }

    /// The privilege `word` names.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(word.trim()))
    }

    /// The privileges `ALL [PRIVILEGES] ON` an object of `kind` means.
    pub fn all_on(kind: ObjectKind) -> &'static [ObjectPrivilege] {
        match kind {
            ObjectKind::Script => &[Self::Execute, Self::Alter],
            ObjectKind::Connection => &[Self::Use, Self::Access],
            ObjectKind::Schema | ObjectKind::Table => &[
                Self::Select,
                Self::Insert,
                Self::Update,
                Self::Delete,
                Self::Alter,
                Self::Execute,
            ],
        }
    }
}

/// One object privilege held: `privilege` on the object `kind`/`name`, limited to calls from
/// script `for_script` (`ACCESS ON CONNECTION c FOR SCRIPT s`) when set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectGrant {
    /// The privilege.
    pub privilege: ObjectPrivilege,
    /// The object's kind.
    pub kind: ObjectKind,
    /// The object's name (scripts: `schema.name` as the catalog keys them; connections: as
    /// stored, folded to upper case).
    pub name: String,
    /// `FOR SCRIPT s`: only while script `s` runs.
    pub for_script: Option<String>,
}

/// What one party (a user, or the `RESTRICTED` role) may do: its system privileges and object
/// privileges, those of every role it holds included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    /// Every privilege (SYS, the DBA role).
    pub all: bool,
    /// System privileges.
    pub system: BTreeSet<SystemPrivilege>,
    /// Object privileges.
    pub objects: BTreeSet<ObjectGrant>,
    /// Roles held, directly or through other roles (`PUBLIC` always).
    pub roles: BTreeSet<String>,
}

impl Holding {
    /// A holding of every privilege.
    pub fn everything() -> Self {
        Self {
            all: true,
            ..Self::default()
        }
    }

    /// Whether it holds system privilege `p`.
    pub fn has(&self, p: SystemPrivilege) -> bool {
        self.all || self.system.contains(&p)
    }

    /// Whether it holds `privilege` on `kind`/`name` (for calls from `script`, when given).
    pub fn has_on(
        &self,
        privilege: ObjectPrivilege,
        kind: ObjectKind,
        name: &str,
        script: Option<&str>,
    ) -> bool {
        self.all
            || self.objects.iter().any(|g| {
                g.privilege == privilege
                    && g.kind == kind
                    && g.name.eq_ignore_ascii_case(name)
                    && match (&g.for_script, script) {
                        (None, _) => true,
                        (Some(s), Some(running)) => s.eq_ignore_ascii_case(running),
                        (Some(_), None) => false,
                    }
            })
    }
}

/// What a session may do: its user's holding and, for a restricted session, the ceiling (the
/// `RESTRICTED` role's holding) that bounds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    /// The user (`SYS` for the embedding program).
    pub user: String,
    /// The user's consumer group, if any.
    pub group: Option<ConsumerGroup>,
    /// What the user holds.
    pub holding: Holding,
    /// A restricted session's ceiling.
    pub ceiling: Option<Holding>,
}

impl Default for Grants {
    fn default() -> Self {
        Self::sys()
    }
}

/// Why a session may not do something: its user lacks a privilege, or the session's
/// restriction (the `RESTRICTED` role's ceiling) takes it away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The user holds no privilege that allows it.
    User,
    /// The user does, but the session is restricted and the `RESTRICTED` role does not.
    Ceiling,
}

impl Denial {
    /// The 42501 for `what`, refused for this reason; `needs` names the privilege(s) that
    /// would allow it.
    pub fn refusal(self, what: &str, needs: &str) -> crate::EngineError {
        match self {
            // Exasol's words for calls and connections: `insufficient privileges for calling
            // script S`.
            Denial::User if what.starts_with("calling ") || what.starts_with("using ") => {
                crate::EngineError::InsufficientPrivilegesFor {
                    action: what.to_string(),
                    needs: needs.to_string(),
                }
            }
            Denial::User => crate::privilege_err!("{what} needs {needs}"),
            Denial::Ceiling => crate::restricted_err!(
                "{what} (it needs {needs}, which the RESTRICTED role that bounds this session \
                 does not hold)"
            ),
        }
    }
}

impl Grants {
    /// The embedding program's grants: every privilege, no ceiling.
    pub fn sys() -> Self {
        Self {
            user: SYS_USER.to_string(),
            group: None,
            holding: Holding::everything(),
            ceiling: None,
        }
    }

    /// Whether the session is restricted.
    pub fn is_restricted(&self) -> bool {
        self.ceiling.is_some()
    }

    /// Whether the session holds every privilege (SYS or DBA, unrestricted).
    pub fn is_all(&self) -> bool {
        self.holding.all && self.ceiling.is_none()
    }

    /// Ok when `allowed(holding, as_owner)` holds for the user (owning what it owns) and for
    /// the ceiling, if any (which owns nothing).
    pub fn check(&self, allowed: impl Fn(&Holding, bool) -> bool) -> Result<(), Denial> {
        if !allowed(&self.holding, true) {
            return Err(Denial::User);
        }
        match &self.ceiling {
            Some(ceiling) if !allowed(ceiling, false) => Err(Denial::Ceiling),
            _ => Ok(()),
        }
    }

    /// [`Grants::check`] for one system privilege.
    pub fn check_system(&self, p: SystemPrivilege) -> Result<(), Denial> {
        self.check(|h, _| h.has(p))
    }

    /// Whether the session holds system privilege `p` (ceiling included).
    pub fn has(&self, p: SystemPrivilege) -> bool {
        self.check_system(p).is_ok()
    }

    /// Whether the user owns an object whose owner is `owner` (`None`: SYS's).
    pub fn owns(&self, owner: Option<&str>) -> bool {
        owner.unwrap_or(SYS_USER) == self.user
    }

    /// Whether the session may call, import or transfer through script `key` (`schema.name`)
    /// owned by `owner`: owning it, `EXECUTE` on it or its schema, or `EXECUTE ANY SCRIPT`.
    pub fn may_execute(&self, key: &str, owner: Option<&str>) -> Result<(), Denial> {
        let owned = self.owns(owner);
        let schema = key.split('.').next().unwrap_or_default();
        self.check(|h, as_owner| {
            (as_owner && owned)
                || h.has(SystemPrivilege::ExecuteAnyScript)
                || h.has_on(ObjectPrivilege::Execute, ObjectKind::Script, key, None)
                || h.has_on(ObjectPrivilege::Execute, ObjectKind::Schema, schema, None)
        })
    }

    /// Whether the session may do what `privilege` allows (`None`: drop) on table `key`
    /// (`schema.table`) owned by `owner`: owning it, the privilege granted on it or on its
    /// schema, or the `… ANY TABLE` system privilege. A restricted session's ceiling bounds
    /// what the `ANY` privileges reach (its user's own tables and explicit grants stand).
    pub fn may_use_table(
        &self,
        key: &str,
        owner: Option<&str>,
        privilege: Option<ObjectPrivilege>,
    ) -> Result<(), Denial> {
        let owned = self.owns(owner);
        let schema = key.split('.').next().unwrap_or_default();
        let any = match privilege {
            Some(ObjectPrivilege::Select) => SystemPrivilege::SelectAnyTable,
            Some(ObjectPrivilege::Insert) => SystemPrivilege::InsertAnyTable,
            Some(ObjectPrivilege::Update) => SystemPrivilege::UpdateAnyTable,
            Some(ObjectPrivilege::Delete) => SystemPrivilege::DeleteAnyTable,
            Some(_) => SystemPrivilege::AlterAnyTable,
            None => SystemPrivilege::DropAnyTable,
        };
        let granted = |h: &Holding| {
            privilege.is_some_and(|p| {
                h.objects.iter().any(|g| {
                    g.privilege == p
                        && g.for_script.is_none()
                        && ((g.kind == ObjectKind::Table && g.name.eq_ignore_ascii_case(key))
                            || (g.kind == ObjectKind::Schema
                                && g.name.eq_ignore_ascii_case(schema)))
                })
            })
        };
        if !(owned || self.holding.has(any) || granted(&self.holding)) {
            return Err(Denial::User);
        }
        match &self.ceiling {
            Some(ceiling)
                if !(owned || granted(&self.holding) || ceiling.has(any) || granted(ceiling)) =>
            {
                Err(Denial::Ceiling)
            }
            _ => Ok(()),
        }
    }

    /// Whether the session may name connection `name` (owned by `owner`) in `IMPORT/EXPORT …
    /// AT`: owning it, holding it (`GRANT CONNECTION`, or `ACCESS` on it), or `USE ANY
    /// CONNECTION`.
    pub fn may_use_connection(&self, name: &str, owner: Option<&str>) -> Result<(), Denial> {
        let owned = self.owns(owner);
        self.check(|h, as_owner| {
            (as_owner && owned)
                || h.has(SystemPrivilege::UseAnyConnection)
                || h.has_on(ObjectPrivilege::Use, ObjectKind::Connection, name, None)
                || h.has_on(ObjectPrivilege::Access, ObjectKind::Connection, name, None)
        })
    }

    /// Whether script `script` (`schema.name`), run by this session, may read connection
    /// `name`'s credentials (`exa.get_connection`): owning it, `ACCESS` on it (for that script
    /// or any), or `ACCESS ANY CONNECTION`.
    pub fn may_access_connection(
        &self,
        name: &str,
        owner: Option<&str>,
        script: &str,
    ) -> Result<(), Denial> {
        let owned = self.owns(owner);
        self.check(|h, as_owner| {
            (as_owner && owned)
                || h.has(SystemPrivilege::AccessAnyConnection)
                || h.has_on(
                    ObjectPrivilege::Access,
                    ObjectKind::Connection,
                    name,
                    Some(script),
                )
        })
    }
}

/// 42501 when `location` (a path, a `file://` URL or a glob; relative to the working folder)
/// lies inside the data directory `data_dir` or holds it: its internals (the catalog, password
/// hashes, a server's token, the tables' files) are read and written through SQL only, never
/// as files, whatever file privileges a session holds. Other schemes pass.
pub(crate) fn check_outside_data_dir(
    location: &str,
    data_dir: Option<&std::path::Path>,
) -> crate::core::error::Result<()> {
    let Some(data_dir) = data_dir else {
        return Ok(());
    };
    let path = match location.split_once("://") {
        Some(("file", rest)) => rest,
        Some(_) => return Ok(()),
        None => location,
    };
    let path = std::path::Path::new(path);
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    // The part before any glob, resolved as far as it exists (links and `..` included); the
    // rest appended as written.
    let mut fixed = std::path::PathBuf::new();
    for part in absolute.components() {
        if part
            .as_os_str()
            .to_string_lossy()
            .contains(['*', '?', '[', '{'])
        {
            break;
        }
        fixed.push(part);
    }
    let mut existing = fixed.as_path();
    let mut rest = Vec::new();
    let resolved = loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            break rest
                .iter()
                .rev()
                .fold(real, |p: std::path::PathBuf, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => break fixed.clone(),
        }
    };
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    if resolved.starts_with(&data_dir) || data_dir.starts_with(&resolved) {
        return Err(crate::core::error::EngineError::InsufficientPrivileges {
            what: format!(
                "'{location}' is inside the data directory (or holds it): its files are reached \
                 through SQL only, never as files, whatever file privileges a session holds"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_parse_by_name_in_any_spelling() {
        assert_eq!(
            SystemPrivilege::parse("create   session"),
            Some(SystemPrivilege::CreateSession)
        );
        assert_eq!(
            SystemPrivilege::parse("USE_GPU"),
            Some(SystemPrivilege::UseGpu)
        );
        assert_eq!(SystemPrivilege::parse("USE GPUS"), None);
        for p in SystemPrivilege::ALL {
            assert_eq!(SystemPrivilege::parse(p.name()), Some(*p));
        }
        assert_eq!(
            ObjectPrivilege::parse("execute"),
            Some(ObjectPrivilege::Execute)
        );
        assert_eq!(ObjectKind::parse("view"), Some(ObjectKind::Table));
    }

    #[test]
    fn the_ceiling_bounds_the_user_and_owns_nothing() {
        let mut user = Holding::default();
        user.system.insert(SystemPrivilege::CreateScript);
        user.system.insert(SystemPrivilege::UseGpu);
        let mut ceiling = Holding::default();
        ceiling.system.insert(SystemPrivilege::UseGpu);
        let grants = Grants {
            user: "ANN".into(),
            group: None,
            holding: user,
            ceiling: Some(ceiling),
        };
        assert!(grants.has(SystemPrivilege::UseGpu));
        assert_eq!(
            grants.check_system(SystemPrivilege::CreateScript),
            Err(Denial::Ceiling)
        );
        assert_eq!(
            grants.check_system(SystemPrivilege::CreateUser),
            Err(Denial::User)
        );
        // Owning counts for the user, never for the ceiling.
        assert_eq!(grants.check(|_, owner| owner), Err(Denial::Ceiling));
        assert!(Grants::sys().is_all());
        assert!(grants.owns(Some("ANN")));
        // Names have one form: another spelling is not the owner (nor can it be created).
        assert!(!grants.owns(Some("ann")));
        assert!(!grants.owns(None));
    }

    #[test]
    fn object_grants_match_their_object_and_script() {
        let mut h = Holding::default();
        h.objects.insert(ObjectGrant {
            privilege: ObjectPrivilege::Access,
            kind: ObjectKind::Connection,
            name: "S3".into(),
            for_script: Some("public.loader".into()),
        });
        let access = |script| {
            h.has_on(
                ObjectPrivilege::Access,
                ObjectKind::Connection,
                "s3",
                script,
            )
        };
        assert!(access(Some("public.loader")));
        assert!(!access(Some("public.other")));
        assert!(!access(None));
    }
}
