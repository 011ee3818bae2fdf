//! Users, roles, grants and consumer groups as the catalog keeps them (a section of
//! `scripts.json`, owner-only, changed under its cross-process lock), and what a user holds:
//! [`SecurityState::grants_of`] folds a user's roles, system and object privileges into the
//! [`Grants`] value a session's statements are checked against.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::core::groups::{ConsumerGroup, DEFAULT_GROUP};
use crate::core::privileges::{
    DBA_ROLE, Grants, Holding, ObjectGrant, ObjectKind, ObjectPrivilege, PUBLIC_ROLE,
    RESTRICTED_ROLE, SYS_USER, SystemPrivilege,
};

/// Roles that always exist and cannot be dropped.
pub(crate) const PREDEFINED_ROLES: [&str; 3] = [PUBLIC_ROLE, DBA_ROLE, RESTRICTED_ROLE];

/// What the `RESTRICTED` role holds in a new catalog: what a restricted session could always
/// do (log in, call existing scripts, use existing connections, the GPUs, its own tables).
const RESTRICTED_DEFAULTS: [SystemPrivilege; 7] = [
    SystemPrivilege::CreateSession,
    SystemPrivilege::ExecuteAnyScript,
    SystemPrivilege::UseAnyConnection,
    SystemPrivilege::AccessAnyConnection,
    SystemPrivilege::UseGpu,
    SystemPrivilege::CreateTable,
    SystemPrivilege::CreateSchema,
];

/// One user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UserEntry {
    /// Salted slow hash of the password (`core::passwords`).
    pub(crate) password: String,
    /// `ALTER USER u SET CONSUMER_GROUP = g` (`None`: [`DEFAULT_GROUP`]).
    pub(crate) consumer_group: Option<String>,
    /// Creation time, µs since the epoch.
    pub(crate) created_micros: i64,
    /// Who created it.
    pub(crate) created_by: String,
}

/// One role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RoleEntry {
    /// Creation time, µs since the epoch.
    pub(crate) created_micros: i64,
    /// Who created it.
    pub(crate) created_by: String,
}

/// A system privilege or role granted to a user or role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct Granted {
    /// The user or role that holds it.
    pub(crate) grantee: String,
    /// The privilege's name, or the role's.
    pub(crate) what: String,
    /// `WITH ADMIN OPTION`: the grantee may grant it on.
    pub(crate) admin_option: bool,
}

/// An object privilege granted to a user or role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct ObjectGranted {
    /// The user or role that holds it.
    pub(crate) grantee: String,
    /// The privilege.
    pub(crate) privilege: String,
    /// `SCRIPT`, `CONNECTION`, `SCHEMA`, `TABLE`.
    pub(crate) kind: String,
    /// The object's name.
    pub(crate) object: String,
    /// `ACCESS ON CONNECTION c FOR SCRIPT s`.
    pub(crate) for_script: Option<String>,
    /// Who granted it.
    pub(crate) grantor: String,
}

impl ObjectGranted {
    /// As the privilege vocabulary names it; `None` for an entry from a newer version.
    fn grant(&self) -> Option<ObjectGrant> {
        Some(ObjectGrant {
            privilege: ObjectPrivilege::parse(&self.privilege)?,
            kind: ObjectKind::parse(&self.kind)?,
            name: self.object.clone(),
            for_script: self.for_script.clone(),
        })
    }
}

/// The catalog's users, roles, grants and consumer groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SecurityState {
    /// Users by name (SYS is implicit).
    pub(crate) users: BTreeMap<String, UserEntry>,
    /// Roles created with `CREATE ROLE` (the predefined ones are implicit).
    pub(crate) roles: BTreeMap<String, RoleEntry>,
    /// Roles granted (`GRANT r TO u`).
    pub(crate) role_grants: BTreeSet<Granted>,
    /// System privileges granted.
    pub(crate) system_grants: BTreeSet<Granted>,
    /// Object privileges granted.
    pub(crate) object_grants: BTreeSet<ObjectGranted>,
    /// Consumer groups by name.
    pub(crate) groups: BTreeMap<String, ConsumerGroup>,
}

impl Default for SecurityState {
    /// A new catalog: no users, the predefined groups, `RESTRICTED` holding what a restricted
    /// session could always do.
    fn default() -> Self {
        Self {
            users: BTreeMap::new(),
            roles: BTreeMap::new(),
            role_grants: BTreeSet::new(),
            system_grants: RESTRICTED_DEFAULTS
                .iter()
                .map(|p| Granted {
                    grantee: RESTRICTED_ROLE.to_string(),
                    what: p.name().to_string(),
                    admin_option: false,
                })
                .collect(),
            object_grants: BTreeSet::new(),
            groups: ConsumerGroup::predefined()
                .into_iter()
                .map(|g| (g.name.clone(), g))
                .collect(),
        }
    }
}

impl SecurityState {
    /// Whether `name` is a user (SYS included).
    pub(crate) fn is_user(&self, name: &str) -> bool {
        name == SYS_USER || self.users.contains_key(name)
    }

    /// Whether `name` is a role (the predefined ones included).
    pub(crate) fn is_role(&self, name: &str) -> bool {
        PREDEFINED_ROLES.contains(&name) || self.roles.contains_key(name)
    }

    /// `name` and every role it holds, directly or through roles (`PUBLIC` always).
    fn closure(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::from([name.to_string(), PUBLIC_ROLE.to_string()]);
        let mut todo: Vec<String> = seen.iter().cloned().collect();
        while let Some(next) = todo.pop() {
            for g in self.role_grants.iter().filter(|g| g.grantee == next) {
                if seen.insert(g.what.clone()) {
                    todo.push(g.what.clone());
                }
            }
        }
        seen
    }

    /// The roles whose privileges bound a restricted session: `RESTRICTED`, `PUBLIC` and every
    /// role they hold. A restricted session may not change what these hold.
    pub(crate) fn ceiling_roles(&self) -> BTreeSet<String> {
        self.closure(RESTRICTED_ROLE)
    }

    /// What `name` (a user or a role) holds, through every role it holds.
    pub(crate) fn holding_of(&self, name: &str) -> Holding {
        if name == SYS_USER {
            return Holding::everything();
        }
        let parties = self.closure(name);
        let mut holding = Holding {
            all: parties.contains(DBA_ROLE),
            ..Holding::default()
        };
        holding.system = self
            .system_grants
            .iter()
            .filter(|g| parties.contains(&g.grantee))
            .filter_map(|g| SystemPrivilege::parse(&g.what))
            .collect();
        holding.objects = self
            .object_grants
            .iter()
            .filter(|g| parties.contains(&g.grantee))
            .filter_map(ObjectGranted::grant)
            .collect();
        holding.roles = parties.into_iter().filter(|p| p != name).collect();
        holding
    }

    /// The consumer group `user` is in.
    pub(crate) fn group_of(&self, user: &str) -> Option<ConsumerGroup> {
        if user == SYS_USER {
            return self.groups.get("SYS_CONSUMER_GROUP").cloned();
        }
        let name = self
            .users
            .get(user)
            .and_then(|u| u.consumer_group.clone())
            .unwrap_or_else(|| DEFAULT_GROUP.to_string());
        self.groups.get(&name).cloned()
    }

    /// What a session of `user` may do; `restricted`: bounded by the `RESTRICTED` role.
    pub(crate) fn grants_of(&self, user: &str, restricted: bool) -> Grants {
        Grants {
            user: user.to_string(),
            group: self.group_of(user),
            holding: self.holding_of(user),
            ceiling: restricted.then(|| self.holding_of(RESTRICTED_ROLE)),
        }
    }

    /// Whether `grantee` holds role `role` (directly) with the admin option.
    pub(crate) fn has_role_admin(&self, grantee: &str, role: &str) -> bool {
        let parties = self.closure(grantee);
        self.role_grants
            .iter()
            .any(|g| g.what == role && g.admin_option && parties.contains(&g.grantee))
    }

    /// Whether `grantee` holds system privilege `what` with the admin option.
    pub(crate) fn has_privilege_admin(&self, grantee: &str, what: SystemPrivilege) -> bool {
        let parties = self.closure(grantee);
        self.system_grants
            .iter()
            .any(|g| g.what == what.name() && g.admin_option && parties.contains(&g.grantee))
    }

    /// Removes every grant to or of `name` (a dropped user or role).
    pub(crate) fn forget(&mut self, name: &str) {
        self.role_grants
            .retain(|g| g.grantee != name && g.what != name);
        self.system_grants.retain(|g| g.grantee != name);
        self.object_grants.retain(|g| g.grantee != name);
    }

    /// Removes every grant on object `kind`/`object` (a dropped script or connection).
    pub(crate) fn forget_object(&mut self, kind: ObjectKind, object: &str) {
        self.object_grants
            .retain(|g| !(g.kind == kind.name() && g.object.eq_ignore_ascii_case(object)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(grantee: &str, what: &str) -> Granted {
        Granted {
            grantee: grantee.into(),
            what: what.into(),
            admin_option: false,
        }
    }

    #[test]
    fn roles_fold_into_a_users_holding() {
        let mut s = SecurityState::default();
        s.role_grants.insert(granted("ANN", "ANALYST"));
        s.role_grants.insert(granted("ANALYST", "GPU_USERS"));
        s.system_grants.insert(granted("GPU_USERS", "USE GPU"));
        s.system_grants
            .insert(granted(PUBLIC_ROLE, "CREATE SESSION"));
        let ann = s.grants_of("ANN", false);
        assert!(ann.has(SystemPrivilege::UseGpu));
        assert!(ann.has(SystemPrivilege::CreateSession));
        assert!(!ann.has(SystemPrivilege::CreateScript));
        assert!(ann.holding.roles.contains("GPU_USERS"));
        assert_eq!(ann.group.unwrap().name, DEFAULT_GROUP);
        // A cycle of roles ends.
        s.role_grants.insert(granted("GPU_USERS", "ANALYST"));
        assert!(s.grants_of("ANN", false).has(SystemPrivilege::UseGpu));
        s.role_grants.insert(granted("BOB", DBA_ROLE));
        assert!(s.grants_of("BOB", false).is_all());
        // Restricted: at most RESTRICTED's privileges.
        let bob = s.grants_of("BOB", true);
        assert!(bob.has(SystemPrivilege::UseGpu));
        assert!(!bob.has(SystemPrivilege::CreateScript));
        s.forget("GPU_USERS");
        assert!(!s.grants_of("ANN", false).has(SystemPrivilege::UseGpu));
    }
}
