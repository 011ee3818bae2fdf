//! Runs the statements of [`statements`](super::statements) against the catalog: each checks
//! the session's privileges first (Exasol's rules: `CREATE USER`, `GRANT ANY PRIVILEGE` or the
//! admin option, owners grant on their objects, …), then changes the catalog under its lock.

use std::time::{SystemTime, UNIX_EPOCH};

use super::statements::{GrantItem, GrantSpec, SecurityStatement};
use super::{ScriptRef, refusal, require};
use crate::catalog::scripts::ScriptCatalog;
use crate::catalog::security::{
    Granted, ObjectGranted, PREDEFINED_ROLES, RoleEntry, SecurityState, UserEntry,
};
use crate::core::error::{EngineError, Result};
use crate::core::groups::{ConsumerGroup, DEFAULT_GROUP};
use crate::core::privileges::{Grants, ObjectKind, ObjectPrivilege, SYS_USER, SystemPrivilege};
use crate::exists_err;
use crate::missing_err;
use crate::privilege_err;
use crate::setting_err;
use crate::udf::script::names::find_script;

/// What a security statement needs of its session.
pub(crate) struct SecurityContext<'a> {
    /// The engine's catalog.
    pub(crate) catalog: &'a ScriptCatalog,
    /// What the session may do.
    pub(crate) grants: &'a Grants,
    /// PBKDF2 rounds for new password hashes.
    pub(crate) rounds: u32,
    /// The session's current schema (unqualified script names).
    pub(crate) current_schema: String,
    /// The engine's tables (a table's owner).
    pub(crate) tables: &'a crate::core::tables::Tables,
}

/// What a statement did that the session must act on.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// `DROP USER`: the user whose sessions must end.
    pub(crate) dropped_user: Option<String>,
    /// `IMPERSONATE`: the user the session continues as.
    pub(crate) impersonate: Option<String>,
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn exists(what: String) -> EngineError {
    exists_err!("{what}")
}

fn missing(what: String) -> EngineError {
    missing_err!("{what}")
}

/// A salted slow hash of `password`, made off the async threads.
async fn hash(password: String, rounds: u32) -> Result<String> {
    tokio::task::spawn_blocking(move || crate::core::passwords::hash_password(&password, rounds))
        .await
        .map_err(|e| EngineError::Sql(datafusion::error::DataFusionError::External(Box::new(e))))?
        .map_err(|message| setting_err!("password", "{message}"))
}

/// Runs `statement`.
pub(crate) async fn run(cx: &SecurityContext<'_>, statement: SecurityStatement) -> Result<Outcome> {
    let grants = cx.grants;
    match statement {
        SecurityStatement::CreateUser { name, password } => {
            require(
                grants,
                SystemPrivilege::CreateUser,
                &format!("CREATE USER {name}"),
            )?;
            check_new_name(&cx.catalog.security(), &name)?;
            let password = hash(password, cx.rounds).await?;
            let creator = grants.user.clone();
            cx.catalog.change_security(|s| {
                check_new_name(s, &name)?;
                s.users.insert(
                    name,
                    UserEntry {
                        password,
                        consumer_group: None,
                        created_micros: now_micros(),
                        created_by: creator,
                    },
                );
                Ok(())
            })?;
        }
        SecurityStatement::AlterPassword {
            name,
            password,
            old,
        } => {
            let own = name == grants.user;
            if !own {
                require(
                    grants,
                    SystemPrivilege::AlterUser,
                    &format!("ALTER USER {name}"),
                )?;
            }
            let security = cx.catalog.security();
            let Some(user) = security.users.get(&name) else {
                return Err(missing(format!("user {name}")));
            };
            if own && !grants.has(SystemPrivilege::AlterUser) {
                let stored = user.password.clone();
                let matches = match old {
                    Some(old) => tokio::task::spawn_blocking(move || {
                        crate::core::passwords::verify_password(&stored, &old)
                    })
                    .await
                    .unwrap_or(false),
                    None => false,
                };
                if !matches {
                    return Err(privilege_err!(
                        "changing one's own password needs the current one: ALTER USER {name} \
                         IDENTIFIED BY \"<new>\" REPLACE \"<current>\""
                    ));
                }
            }
            let password = hash(password, cx.rounds).await?;
            cx.catalog.change_security(|s| {
                let user = s
                    .users
                    .get_mut(&name)
                    .ok_or_else(|| missing(format!("user {name}")))?;
                user.password = password;
                Ok(())
            })?;
        }
        SecurityStatement::AlterUserGroup { name, group } => {
            require(
                grants,
                SystemPrivilege::ManageConsumerGroups,
                &format!("ALTER USER {name} SET CONSUMER_GROUP"),
            )?;
            cx.catalog.change_security(|s| {
                if let Some(g) = &group
                    && !s.groups.contains_key(g)
                {
                    return Err(missing(format!("consumer group {g}")));
                }
                let user = s
                    .users
                    .get_mut(&name)
                    .ok_or_else(|| missing(format!("user {name}")))?;
                user.consumer_group = group;
                Ok(())
            })?;
        }
        SecurityStatement::DropUser {
            name,
            if_exists,
            cascade,
        } => {
            require(
                grants,
                SystemPrivilege::DropUser,
                &format!("DROP USER {name}"),
            )?;
            if name == SYS_USER {
                return Err(privilege_err!("the user SYS cannot be dropped"));
            }
            if !cx.catalog.security().users.contains_key(&name) {
                return if if_exists {
                    Ok(Outcome::default())
                } else {
                    Err(missing(format!("user {name}")))
                };
            }
            let owns = |owner: &Option<String>| owner.as_deref() == Some(name.as_str());
            cx.catalog.change_all(|scripts, connections, s| {
                let owned: Vec<String> = scripts
                    .values()
                    .filter(|e| owns(&e.owner))
                    .map(|e| format!("script {}", shown_script(&e.schema, &e.name)))
                    .chain(
                        connections
                            .values()
                            .filter(|c| owns(&c.owner))
                            .map(|c| format!("connection {}", c.name)),
                    )
                    .collect();
                if !owned.is_empty() && !cascade {
                    return Err(EngineError::DependentObjects {
                        what: format!(
                            "user {name} owns {}: drop them first, or DROP USER {name} CASCADE",
                            owned.join(", ")
                        ),
                    });
                }
                for e in scripts.values().filter(|e| owns(&e.owner)) {
                    s.forget_object(ObjectKind::Script, &format!("{}.{}", e.schema, e.name));
                }
                for c in connections.values().filter(|c| owns(&c.owner)) {
                    s.forget_object(ObjectKind::Connection, &c.name);
                }
                scripts.retain(|_, e| !owns(&e.owner));
                connections.retain(|_, c| !owns(&c.owner));
                s.users.remove(&name);
                s.forget(&name);
                Ok(())
            })?;
            return Ok(Outcome {
                dropped_user: Some(name),
                ..Outcome::default()
            });
        }
        SecurityStatement::CreateRole(name) => {
            require(
                grants,
                SystemPrivilege::CreateRole,
                &format!("CREATE ROLE {name}"),
            )?;
            let creator = grants.user.clone();
            cx.catalog.change_security(|s| {
                check_new_name(s, &name)?;
                s.roles.insert(
                    name.clone(),
                    RoleEntry {
                        created_micros: now_micros(),
                        created_by: creator.clone(),
                    },
                );
                // As in Exasol, its creator holds it, with the admin option.
                if creator != SYS_USER {
                    s.role_grants.insert(Granted {
                        grantee: creator,
                        what: name,
                        admin_option: true,
                    });
                }
                Ok(())
            })?;
        }
        SecurityStatement::DropRole { name, if_exists } => {
            if PREDEFINED_ROLES.contains(&name.as_str()) {
                return Err(privilege_err!(
                    "the predefined role {name} cannot be dropped"
                ));
            }
            let security = cx.catalog.security();
            if !security.roles.contains_key(&name) {
                return if if_exists {
                    Ok(Outcome::default())
                } else {
                    Err(missing(format!("role {name}")))
                };
            }
            if !security.has_role_admin(&grants.user, &name) {
                require(
                    grants,
                    SystemPrivilege::DropAnyRole,
                    &format!("DROP ROLE {name}"),
                )?;
            }
            cx.catalog.change_security(|s| {
                s.roles.remove(&name);
                s.forget(&name);
                Ok(())
            })?;
        }
        SecurityStatement::Impersonate(name) => {
            let security = cx.catalog.security();
            if !security.is_user(&name) {
                return Err(missing(format!("user {name}")));
            }
            if name != grants.user {
                require(
                    grants,
                    SystemPrivilege::ImpersonateAnyUser,
                    &format!("IMPERSONATE {name}"),
                )?;
                require(
                    &security.grants_of(&name, false),
                    SystemPrivilege::CreateSession,
                    &format!("a session of user {name}"),
                )?;
            }
            return Ok(Outcome {
                impersonate: Some(name),
                ..Outcome::default()
            });
        }
        SecurityStatement::Grant(spec) => grant(cx, spec, true).await?,
        SecurityStatement::Revoke(spec) => grant(cx, spec, false).await?,
        SecurityStatement::CreateGroup { name, attributes } => {
            require(
                grants,
                SystemPrivilege::ManageConsumerGroups,
                &format!("CREATE CONSUMER GROUP {name}"),
            )?;
            let mut group = ConsumerGroup::new(name.clone());
            set_attributes(&mut group, &attributes)?;
            cx.catalog.change_security(|s| {
                if s.groups.contains_key(&name) {
                    return Err(exists(format!("consumer group {name}")));
                }
                s.groups.insert(name, group);
                Ok(())
            })?;
        }
        SecurityStatement::AlterGroup { name, attributes } => {
            require(
                grants,
                SystemPrivilege::ManageConsumerGroups,
                &format!("ALTER CONSUMER GROUP {name}"),
            )?;
            cx.catalog.change_security(|s| {
                let group = s
                    .groups
                    .get_mut(&name)
                    .ok_or_else(|| missing(format!("consumer group {name}")))?;
                set_attributes(group, &attributes)
            })?;
        }
        SecurityStatement::DropGroup(name) => {
            require(
                grants,
                SystemPrivilege::ManageConsumerGroups,
                &format!("DROP CONSUMER GROUP {name}"),
            )?;
            if name == "SYS_CONSUMER_GROUP" || name == DEFAULT_GROUP {
                return Err(privilege_err!(
                    "the consumer group {name} is predefined and cannot be dropped"
                ));
            }
            cx.catalog.change_security(|s| {
                if s.groups.remove(&name).is_none() {
                    return Err(missing(format!("consumer group {name}")));
                }
                let members: Vec<&String> = s
                    .users
                    .iter()
                    .filter(|(_, u)| u.consumer_group.as_deref() == Some(name.as_str()))
                    .map(|(n, _)| n)
                    .collect();
                if !members.is_empty() {
                    return Err(EngineError::DependentObjects {
                        what: format!(
                            "consumer group {name} still has users ({}); move them first (ALTER \
                             USER … SET CONSUMER_GROUP = …)",
                            members
                                .iter()
                                .map(|n| n.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                }
                Ok(())
            })?;
        }
    }
    Ok(Outcome::default())
}

/// A new user's or role's name must be neither (nor SYS).
fn check_new_name(s: &SecurityState, name: &str) -> Result<()> {
    if s.is_user(name) {
        return Err(exists(format!("user {name}")));
    }
    if s.is_role(name) {
        return Err(exists(format!("role {name}")));
    }
    Ok(())
}

fn set_attributes(group: &mut ConsumerGroup, attributes: &[(String, String)]) -> Result<()> {
    for (key, value) in attributes {
        group.set(key, value).map_err(|message| {
            setting_err!(format!("consumer group {} {key}", group.name), "{message}")
        })?;
    }
    Ok(())
}

/// One row a `GRANT`/`REVOKE` adds or removes.
enum Change {
    System(Granted),
    Role(Granted),
    Object(ObjectGranted),
}

/// `GRANT` (`give`) or `REVOKE` (`!give`).
async fn grant(cx: &SecurityContext<'_>, spec: GrantSpec, give: bool) -> Result<()> {
    let grants = cx.grants;
    let security = cx.catalog.security();
    let verb = if give { "GRANT" } else { "REVOKE" };
    for grantee in &spec.grantees {
        if grantee == SYS_USER {
            return Err(privilege_err!("the privileges of SYS cannot be changed"));
        }
        if !security.is_user(grantee) && !security.is_role(grantee) {
            return Err(missing(format!("user or role {grantee}")));
        }
    }
    // What RESTRICTED and PUBLIC hold is the ceiling of every restricted session: a restricted
    // session changing it would lift its own bounds (and everyone's).
    if grants.ceiling.is_some() {
        let ceiling = security.ceiling_roles();
        if let Some(grantee) = spec.grantees.iter().find(|g| ceiling.contains(*g)) {
            return Err(EngineError::NotAllowedRestricted {
                what: format!(
                    "{verb} … {} {grantee}: what {grantee} holds bounds restricted sessions \
                     (RESTRICTED, PUBLIC and the roles they hold), and a restricted session \
                     cannot change it",
                    if give { "TO" } else { "FROM" }
                ),
            });
        }
    }
    let mut changes = Vec::new();
    for item in spec.items {
        match item {
            GrantItem::AllSystem => {
                for p in SystemPrivilege::ALL {
                    check_system_admin(cx, &security, *p, verb)?;
                    for grantee in &spec.grantees {
                        changes.push(Change::System(Granted {
                            grantee: grantee.clone(),
                            what: p.name().to_string(),
                            admin_option: spec.admin_option,
                        }));
                    }
                }
            }
            GrantItem::System(p) => {
                check_system_admin(cx, &security, p, verb)?;
                for grantee in &spec.grantees {
                    changes.push(Change::System(Granted {
                        grantee: grantee.clone(),
                        what: p.name().to_string(),
                        admin_option: spec.admin_option,
                    }));
                }
            }
            GrantItem::Role(role) => {
                if !security.is_role(&role) {
                    return Err(missing(format!("role or system privilege {role}")));
                }
                if !security.has_role_admin(&grants.user, &role) {
                    require(
                        grants,
                        SystemPrivilege::GrantAnyRole,
                        &format!("{verb} {role}"),
                    )?;
                }
                for grantee in &spec.grantees {
                    if *grantee == role {
                        return Err(privilege_err!("a role cannot be granted to itself"));
                    }
                    changes.push(Change::Role(Granted {
                        grantee: grantee.clone(),
                        what: role.clone(),
                        admin_option: spec.admin_option,
                    }));
                }
            }
            GrantItem::Object {
                privileges,
                kind,
                object,
                for_script,
            } => {
                let (kind, object, owner) = resolve_object(cx, kind, &privileges, &object).await?;
                let for_script = match for_script {
                    Some(s) => Some(
                        resolve_object(cx, Some(ObjectKind::Script), &[], &s)
                            .await?
                            .1,
                    ),
                    None => None,
                };
                let owned = grants.owns(owner.as_deref());
                let any = if kind == ObjectKind::Connection {
                    SystemPrivilege::GrantAnyConnection
                } else {
                    SystemPrivilege::GrantAnyObjectPrivilege
                };
                grants
                    .check(|h, as_owner| (as_owner && owned) || h.has(any))
                    .map_err(|d| {
                        refusal(
                            d,
                            &format!("{verb} on {} {object}", kind.name()),
                            &format!("owning it, or the {any} privilege"),
                        )
                    })?;
                let privileges = if privileges.is_empty() {
                    ObjectPrivilege::all_on(kind).to_vec()
                } else {
                    privileges
                };
                for p in privileges {
                    for grantee in &spec.grantees {
                        changes.push(Change::Object(ObjectGranted {
                            grantee: grantee.clone(),
                            privilege: p.name().to_string(),
                            kind: kind.name().to_string(),
                            object: object.clone(),
                            for_script: for_script.clone(),
                            grantor: grants.user.clone(),
                        }));
                    }
                }
            }
        }
    }
    cx.catalog.change_security(|s| {
        for change in changes {
            if give {
                match change {
                    Change::System(g) => {
                        s.system_grants
                            .retain(|o| !(o.grantee == g.grantee && o.what == g.what));
                        s.system_grants.insert(g);
                    }
                    Change::Role(g) => {
                        s.role_grants
                            .retain(|o| !(o.grantee == g.grantee && o.what == g.what));
                        s.role_grants.insert(g);
                    }
                    Change::Object(g) => {
                        s.object_grants.insert(g);
                    }
                }
                continue;
            }
            let removed = match &change {
                Change::System(g) => take(&mut s.system_grants, |o| {
                    o.grantee == g.grantee && o.what == g.what
                }),
                Change::Role(g) => take(&mut s.role_grants, |o| {
                    o.grantee == g.grantee && o.what == g.what
                }),
                Change::Object(g) => take(&mut s.object_grants, |o| {
                    o.grantee == g.grantee
                        && o.privilege == g.privilege
                        && o.kind == g.kind
                        && o.object == g.object
                        && o.for_script == g.for_script
                }),
            };
            if !removed {
                let (grantee, what) = match &change {
                    Change::System(g) | Change::Role(g) => (g.grantee.clone(), g.what.clone()),
                    Change::Object(g) => (
                        g.grantee.clone(),
                        format!("{} on {} {}", g.privilege, g.kind, g.object),
                    ),
                };
                return Err(missing(format!("a grant of {what} to {grantee}")));
            }
        }
        Ok(())
    })
}

/// Removes the entries of `set` matching `matches`; whether there were any.
fn take<T: Ord + Clone>(
    set: &mut std::collections::BTreeSet<T>,
    matches: impl Fn(&T) -> bool,
) -> bool {
    let before = set.len();
    set.retain(|o| !matches(o));
    set.len() != before
}

/// Ok when the session may grant or revoke system privilege `p`: `GRANT ANY PRIVILEGE`, or `p`
/// held with the admin option.
fn check_system_admin(
    cx: &SecurityContext<'_>,
    security: &SecurityState,
    p: SystemPrivilege,
    verb: &str,
) -> Result<()> {
    if cx.grants.ceiling.is_none() && security.has_privilege_admin(&cx.grants.user, p) {
        return Ok(());
    }
    require(
        cx.grants,
        SystemPrivilege::GrantAnyPrivilege,
        &format!("{verb} {p}"),
    )
}

/// The kind, catalog name and owner of the object a grant names.
async fn resolve_object(
    cx: &SecurityContext<'_>,
    kind: Option<ObjectKind>,
    privileges: &[ObjectPrivilege],
    name: &str,
) -> Result<(ObjectKind, String, Option<String>)> {
    let kind = kind.unwrap_or_else(|| {
        if privileges
            .iter()
            .any(|p| matches!(p, ObjectPrivilege::Access | ObjectPrivilege::Use))
        {
            ObjectKind::Connection
        } else if privileges == [ObjectPrivilege::Execute] {
            ObjectKind::Script
        } else {
            ObjectKind::Table
        }
    });
    match kind {
        ObjectKind::Script => {
            let entry = find_script(name, &cx.catalog.entries(), &cx.current_schema)?;
            let script = ScriptRef {
                key: format!("{}.{}", entry.schema, entry.name),
                owner: entry.owner.clone(),
            };
            Ok((kind, script.key, script.owner))
        }
        ObjectKind::Connection => {
            let folded = crate::udf::script::definition::folded_connection_name(name);
            let connection = cx
                .catalog
                .connection(&folded)
                .ok_or_else(|| missing(format!("connection {folded}")))?;
            Ok((kind, connection.name, connection.owner))
        }
        ObjectKind::Schema => Ok((kind, name.to_ascii_lowercase(), None)),
        // A table by `schema.table` (unqualified: in the current schema), as the tables'
        // privilege checks name it.
        ObjectKind::Table => {
            let reference = datafusion::common::TableReference::parse_str(name);
            let schema = reference
                .schema()
                .map(str::to_string)
                .unwrap_or_else(|| cx.current_schema.clone());
            let key = format!("{schema}.{}", reference.table());
            let owner = match cx.tables.store() {
                Some(store) => match store.table(&schema, reference.table())? {
                    Some(table) => table.latest().await?.owner.clone(),
                    None => return Err(missing(format!("table {key}"))),
                },
                None => cx.tables.memory_owner(&key),
            };
            Ok((kind, key, owner))
        }
    }
}

/// A script's name as Exasol shows it: `SCHEMA.NAME`.
pub(crate) fn shown_script(schema: &str, name: &str) -> String {
    format!(
        "{}.{}",
        crate::core::names::exasol_name(schema),
        crate::core::names::exasol_name(name)
    )
}
