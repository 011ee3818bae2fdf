//! Exasol's views of users, roles, privileges and consumer groups, in schema `sys`: the
//! `EXA_DBA_*` views (everything; they need `SELECT ANY DICTIONARY`), the `EXA_USER_*` views
//! (what the session's user holds or owns) and `EXA_ALL_*`/`EXA_ROLE_*` (what it may see), and
//! `EXA_CONSUMER_GROUPS`. Rows are read at scan time from the catalog and the session's grants.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, TimestampMicrosecondArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::error::Result as DfResult;

use super::columns::strings;
use super::security::{Granted, SecurityState};
use super::system_table::{Producer, TableMaker};
use crate::core::owners::SessionIdentity;
use crate::core::privileges::{DBA_ROLE, Grants, SYS_USER, SystemPrivilege};
use crate::privilege_err;

/// One value of a row.
#[derive(Debug, Clone)]
enum V {
    S(Option<String>),
    B(bool),
    T(i64),
    N(Option<u64>),
}

/// A column's type.
#[derive(Debug, Clone, Copy)]
enum C {
    Str,
    Bool,
    Time,
    Num,
}

fn s(text: impl Into<String>) -> V {
    V::S(Some(text.into()))
}

/// The columns of `rows`, typed as `kinds` says.
fn columns(kinds: &[C], rows: &[Vec<V>]) -> Vec<ArrayRef> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| -> ArrayRef {
            let cell = |r: &Vec<V>| r.get(i).cloned().unwrap_or(V::S(None));
            match kind {
                C::Str => strings(rows.iter().map(|r| match cell(r) {
                    V::S(v) => v,
                    _ => None,
                })),
                C::Bool => Arc::new(
                    rows.iter()
                        .map(|r| match cell(r) {
                            V::B(b) => Some(b),
                            _ => None,
                        })
                        .collect::<BooleanArray>(),
                ),
                C::Time => Arc::new(TimestampMicrosecondArray::from_iter_values(
                    rows.iter().map(|r| match cell(r) {
                        V::T(t) => t,
                        _ => 0,
                    }),
                )),
                C::Num => Arc::new(
                    rows.iter()
                        .map(|r| match cell(r) {
                            V::N(n) => n,
                            _ => None,
                        })
                        .collect::<UInt64Array>(),
                ),
            }
        })
        .collect()
}

/// Which rows a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every row (`EXA_DBA_*`: needs `SELECT ANY DICTIONARY`).
    Dba,
    /// Rows of the user itself (`EXA_USER_*`).
    User,
    /// Rows of the user and the roles it holds (`EXA_ALL_*`, `EXA_ROLE_*`).
    All,
}

impl Scope {
    fn prefix(self) -> &'static str {
        match self {
            Scope::Dba => "dba",
            Scope::User => "user",
            Scope::All => "all",
        }
    }

    /// Whether a grant to `grantee` is shown to `grants`.
    fn shows(self, grants: &Grants, grantee: &str) -> bool {
        match self {
            Scope::Dba => true,
            Scope::User => grantee == grants.user,
            Scope::All => grantee == grants.user || grants.holding.roles.contains(grantee),
        }
    }
}

/// Registers the views in `sys`.
pub(crate) fn register(
    ctx: &datafusion::prelude::SessionContext,
    table: &TableMaker<'_>,
    who: &Arc<SessionIdentity>,
) -> DfResult<()> {
    use C::*;
    let micros = || DataType::Timestamp(TimeUnit::Microsecond, None);
    let ty = |c: &C| match c {
        Str => DataType::Utf8,
        Bool => DataType::Boolean,
        Time => micros(),
        Num => DataType::UInt64,
    };
    type Rows = dyn Fn(&SecurityState, &Grants) -> Vec<Vec<V>> + Send + Sync;
    let view = |name: String, cols: &[(&str, C)], scope: Scope, rows: Arc<Rows>| -> DfResult<()> {
        let kinds: Vec<C> = cols.iter().map(|(_, c)| *c).collect();
        let fields: Vec<(&str, DataType)> = cols.iter().map(|(n, c)| (*n, ty(c))).collect();
        let who = Arc::clone(who);
        let view_name = name.to_uppercase();
        let produce: Box<Producer> = Box::new(move |engine| {
            let grants = who.grants();
            if scope == Scope::Dba && !grants.has(SystemPrivilege::SelectAnyDictionary) {
                return Err(privilege_err!(
                    "reading {view_name} needs the SELECT ANY DICTIONARY privilege"
                )
                .into_datafusion());
            }
            let security = engine.scripts.security();
            Ok(columns(&kinds, &rows(&security, &grants)))
        });
        ctx.register_table(format!("sys.{name}"), table(&fields, produce))?;
        Ok(())
    };

    for scope in [Scope::Dba, Scope::User, Scope::All] {
        let p = scope.prefix();
        // Users: everyone's names in ALL, one's own in USER.
        view(
            format!("exa_{p}_users"),
            &[
                ("user_name", Str),
                ("created", Time),
                ("created_by", Str),
                ("user_consumer_group", Str),
                ("password_state", Str),
                ("user_comment", Str),
            ],
            scope,
            Arc::new(move |st, g| {
                st.users
                    .iter()
                    .filter(|(name, _)| scope != Scope::User || **name == g.user)
                    .map(|(name, u)| {
                        vec![
                            s_(name),
                            V::T(u.created_micros),
                            s_(&u.created_by),
                            V::S(u.consumer_group.clone()),
                            s("VALID"),
                            V::S(None),
                        ]
                    })
                    .collect()
            }),
        )?;
        view(
            format!("exa_{p}_sys_privs"),
            &[("grantee", Str), ("privilege", Str), ("admin_option", Bool)],
            scope,
            Arc::new(move |st, g| {
                granted_rows(&with_dba_privileges(&st.system_grants), |x| {
                    scope.shows(g, x)
                })
            }),
        )?;
        view(
            format!("exa_{p}_role_privs"),
            &[
                ("grantee", Str),
                ("granted_role", Str),
                ("admin_option", Bool),
            ],
            scope,
            Arc::new(move |st, g| {
                granted_rows(&with_sys_as_dba(&st.role_grants), |x| scope.shows(g, x))
            }),
        )?;
        view(
            format!("exa_{p}_obj_privs"),
            &[
                ("object_schema", Str),
                ("object_name", Str),
                ("object_type", Str),
                ("privilege", Str),
                ("grantee", Str),
                ("grantor", Str),
            ],
            scope,
            Arc::new(move |st, g| {
                st.object_grants
                    .iter()
                    .filter(|x| x.for_script.is_none() && x.privilege != "USE")
                    .filter(|x| {
                        scope.shows(g, &x.grantee) || (scope != Scope::Dba && x.grantor == g.user)
                    })
                    .map(|x| {
                        let (schema, name) = split_object(&x.kind, &x.object);
                        vec![
                            schema,
                            s(name),
                            s_(&x.kind),
                            s_(&x.privilege),
                            s_(&x.grantee),
                            s_(&x.grantor),
                        ]
                    })
                    .collect()
            }),
        )?;
        view(
            format!("exa_{p}_restricted_obj_privs"),
            &[
                ("object_name", Str),
                ("object_type", Str),
                ("for_object_schema", Str),
                ("for_object_name", Str),
                ("for_object_type", Str),
                ("privilege", Str),
                ("grantee", Str),
                ("grantor", Str),
            ],
            scope,
            Arc::new(move |st, g| {
                st.object_grants
                    .iter()
                    .filter(|x| x.for_script.is_some())
                    .filter(|x| scope.shows(g, &x.grantee))
                    .map(|x| {
                        let script = x.for_script.clone().unwrap_or_default();
                        let (schema, name) = split_object("SCRIPT", &script);
                        vec![
                            s_(&x.object),
                            s_(&x.kind),
                            schema,
                            s(name),
                            s("SCRIPT"),
                            s_(&x.privilege),
                            s_(&x.grantee),
                            s_(&x.grantor),
                        ]
                    })
                    .collect()
            }),
        )?;
        view(
            format!("exa_{p}_connection_privs"),
            &[
                ("grantee", Str),
                ("granted_connection", Str),
                ("admin_option", Bool),
            ],
            scope,
            Arc::new(move |st, g| {
                st.object_grants
                    .iter()
                    .filter(|x| x.kind == "CONNECTION" && x.privilege == "USE")
                    .filter(|x| scope.shows(g, &x.grantee))
                    .map(|x| vec![s_(&x.grantee), s_(&x.object), V::B(false)])
                    .collect()
            }),
        )?;
    }
    // Roles: every role's name is visible (as in Exasol's EXA_ALL_ROLES).
    let roles: Arc<Rows> = Arc::new(|st, _| {
        let mut rows: Vec<Vec<V>> = super::security::PREDEFINED_ROLES
            .iter()
            .map(|r| vec![s(*r), V::T(0), s("SYS"), V::S(None)])
            .collect();
        rows.extend(st.roles.iter().map(|(name, r)| {
            vec![
                s_(name),
                V::T(r.created_micros),
                s_(&r.created_by),
                V::S(None),
            ]
        }));
        rows
    });
    let role_columns = [
        ("role_name", Str),
        ("created", Time),
        ("created_by", Str),
        ("role_comment", Str),
    ];
    view(
        "exa_dba_roles".into(),
        &role_columns,
        Scope::Dba,
        Arc::clone(&roles),
    )?;
    view("exa_all_roles".into(), &role_columns, Scope::All, roles)?;
    // The system privileges of the roles the user holds.
    view(
        "exa_role_sys_privs".into(),
        &[("role", Str), ("privilege", Str), ("admin_option", Bool)],
        Scope::All,
        Arc::new(|st, g| {
            granted_rows(&with_dba_privileges(&st.system_grants), |x| {
                g.holding.roles.contains(x)
            })
        }),
    )?;
    // Every privilege there is (Exasol's EXA_SYSTEM_PRIVILEGES is not a view of grants).
    view(
        "exa_session_privs".into(),
        &[("privilege", Str)],
        Scope::All,
        Arc::new(|_, g| {
            SystemPrivilege::ALL
                .iter()
                .filter(|p| g.has(**p))
                .map(|p| vec![s(p.name())])
                .collect()
        }),
    )?;
    view(
        "exa_consumer_groups".into(),
        &[
            ("consumer_group_name", Str),
            ("precedence", Num),
            ("cpu_weight", Num),
            ("group_temp_db_ram_limit", Num),
            ("user_temp_db_ram_limit", Num),
            ("session_temp_db_ram_limit", Num),
            ("query_timeout", Num),
            ("idle_timeout", Num),
            ("gpu_precedence", Num),
            ("gpu_lease_hold_limit", Num),
            ("max_gpu_waiters", Num),
            ("consumer_group_comment", Str),
        ],
        Scope::All,
        Arc::new(|st, _| {
            st.groups
                .values()
                .map(|g| {
                    vec![
                        s_(&g.name),
                        V::N(Some(u64::from(g.precedence))),
                        V::N(Some(u64::from(g.cpu_weight))),
                        V::N(g.group_ram_limit),
                        V::N(g.user_ram_limit),
                        V::N(g.session_ram_limit),
                        V::N(g.query_timeout),
                        V::N(g.idle_timeout),
                        V::N(Some(u64::from(g.effective_gpu_precedence()))),
                        V::N(g.gpu_lease_hold_limit),
                        V::N(g.max_gpu_waiters.map(|n| n as u64)),
                        V::S(g.comment.clone()),
                    ]
                })
                .collect()
        }),
    )?;
    Ok(())
}

/// (grantee, privilege or role, admin option) rows of the grants to grantees `shown` picks.
/// `grants` with the DBA role's privileges, as Exasol lists them: every system privilege, with
/// the admin option (the engine gives them to the role without a stored grant).
fn with_dba_privileges(grants: &BTreeSet<Granted>) -> BTreeSet<Granted> {
    let mut all = grants.clone();
    all.extend(SystemPrivilege::ALL.iter().map(|p| Granted {
        grantee: DBA_ROLE.to_string(),
        what: p.name().to_string(),
        admin_option: true,
    }));
    all
}

/// `grants` with SYS's DBA role, as Exasol lists it (the engine's SYS holds it implicitly).
fn with_sys_as_dba(grants: &BTreeSet<Granted>) -> BTreeSet<Granted> {
    let mut all = grants.clone();
    all.insert(Granted {
        grantee: SYS_USER.to_string(),
        what: DBA_ROLE.to_string(),
        admin_option: true,
    });
    all
}

fn granted_rows(grants: &BTreeSet<Granted>, shown: impl Fn(&str) -> bool) -> Vec<Vec<V>> {
    grants
        .iter()
        .filter(|x| shown(&x.grantee))
        .map(|x| vec![s_(&x.grantee), s_(&x.what), V::B(x.admin_option)])
        .collect()
}

fn s_(text: &str) -> V {
    V::S(Some(text.to_string()))
}

/// (schema, name) of an object as the views show them: scripts `schema.name`, others whole.
fn split_object(kind: &str, object: &str) -> (V, String) {
    match (kind, object.split_once('.')) {
        ("SCRIPT" | "TABLE", Some((schema, name))) => (
            s(crate::core::names::exasol_name(schema)),
            crate::core::names::exasol_name(name),
        ),
        _ => (V::S(None), crate::core::names::exasol_name(object)),
    }
}

/// The names of the views [`register`] adds to `sys`.
pub(crate) const SECURITY_VIEWS: [&str; 23] = [
    "exa_dba_users",
    "exa_user_users",
    "exa_all_users",
    "exa_dba_sys_privs",
    "exa_user_sys_privs",
    "exa_all_sys_privs",
    "exa_dba_role_privs",
    "exa_user_role_privs",
    "exa_all_role_privs",
    "exa_dba_obj_privs",
    "exa_user_obj_privs",
    "exa_all_obj_privs",
    "exa_dba_restricted_obj_privs",
    "exa_user_restricted_obj_privs",
    "exa_all_restricted_obj_privs",
    "exa_dba_connection_privs",
    "exa_user_connection_privs",
    "exa_all_connection_privs",
    "exa_dba_roles",
    "exa_all_roles",
    "exa_role_sys_privs",
    "exa_session_privs",
    "exa_consumer_groups",
];
