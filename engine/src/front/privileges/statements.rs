//! Exasol's statements for users, roles, privileges and consumer groups, recognised from their
//! tokens: `CREATE/ALTER/DROP USER`, `CREATE/DROP ROLE`, `GRANT`, `REVOKE`,
//! `CREATE/ALTER/DROP CONSUMER GROUP`.

use crate::core::error::Result;
use crate::core::privileges::{ObjectKind, ObjectPrivilege, SystemPrivilege, canonical_account};
use crate::front::tokens::{Tok, exasol_folded, qualified_name, syntax};

/// A statement about users, roles, privileges or consumer groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SecurityStatement {
    /// `CREATE USER u IDENTIFIED BY "pw"`.
    CreateUser {
        /// The user, folded to upper case unless quoted.
        name: String,
        /// The password.
        password: String,
    },
    /// `ALTER USER u IDENTIFIED BY "new" [REPLACE "old"]`.
    AlterPassword {
        /// The user.
        name: String,
        /// The new password.
        password: String,
        /// `REPLACE "old"`: the current one.
        old: Option<String>,
    },
    /// `ALTER USER u SET CONSUMER_GROUP = g|NULL`.
    AlterUserGroup {
        /// The user.
        name: String,
        /// The group (`None`: back to the default).
        group: Option<String>,
    },
    /// `DROP USER [IF EXISTS] u [CASCADE]`.
    DropUser {
        /// The user.
        name: String,
        /// No error when it does not exist.
        if_exists: bool,
        /// Also drop what it owns.
        cascade: bool,
    },
    /// `CREATE ROLE r`.
    CreateRole(String),
    /// `DROP ROLE [IF EXISTS] r [CASCADE]`.
    DropRole {
        /// The role.
        name: String,
        /// No error when it does not exist.
        if_exists: bool,
    },
    /// `GRANT …`.
    Grant(GrantSpec),
    /// `REVOKE …`.
    Revoke(GrantSpec),
    /// `CREATE CONSUMER GROUP g WITH k = v, …`.
    CreateGroup {
        /// The group.
        name: String,
        /// Its attributes as written.
        attributes: Vec<(String, String)>,
    },
    /// `ALTER CONSUMER GROUP g SET k = v, …`.
    AlterGroup {
        /// The group.
        name: String,
        /// The attributes to change.
        attributes: Vec<(String, String)>,
    },
    /// `DROP CONSUMER GROUP g`.
    DropGroup(String),
    /// `IMPERSONATE u`: the session continues as user `u`, with its privileges.
    Impersonate(String),
}

/// What a `GRANT` gives (or a `REVOKE` takes), and to whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantSpec {
    /// The privileges and roles.
    pub(crate) items: Vec<GrantItem>,
    /// The users and roles that receive them (lose them).
    pub(crate) grantees: Vec<String>,
    /// `WITH ADMIN OPTION`.
    pub(crate) admin_option: bool,
}

/// One thing granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GrantItem {
    /// A system privilege.
    System(SystemPrivilege),
    /// `ALL PRIVILEGES` (without `ON`): every system privilege.
    AllSystem,
    /// A role.
    Role(String),
    /// Object privileges on one object.
    Object {
        /// The privileges.
        privileges: Vec<ObjectPrivilege>,
        /// Its kind, when the statement says it.
        kind: Option<ObjectKind>,
        /// Its name as written (scripts: SQL text; connections: folded).
        object: String,
        /// `FOR SCRIPT s`.
        for_script: Option<String>,
    },
}

/// The statement `text` is, if it is one of [`SecurityStatement`]'s.
#[cfg(test)]
pub(crate) fn parse_security_statement(text: &str) -> Result<Option<SecurityStatement>> {
    match crate::front::tokens::tokens(text) {
        Some(toks) => security_statement(text, &toks),
        None => Ok(None),
    }
}

/// Like [`parse_security_statement`], for `text` already cut into `toks` (the classifier's tokens).
pub(crate) fn security_statement(text: &str, toks: &[Tok]) -> Result<Option<SecurityStatement>> {
    let word = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    let name_at = |i: usize, what: &str| {
        toks.get(i)
            .and_then(account_folded)
            .ok_or_else(|| syntax(&format!("expected a {what} name"), text))
    };
    if word(0, "CREATE") && word(1, "USER") {
        let name = name_at(2, "user")?;
        if !(word(3, "IDENTIFIED") && word(4, "BY")) || toks.len() != 6 {
            return Err(syntax(
                "expected CREATE USER <name> IDENTIFIED BY \"<password>\" (accelsql keeps \
                 passwords itself: no LDAP, Kerberos or OpenID)",
                text,
            ));
        }
        let password = secret(&toks[5]).ok_or_else(|| syntax("expected a password", text))?;
        return Ok(Some(SecurityStatement::CreateUser { name, password }));
    }
    if word(0, "ALTER") && word(1, "USER") {
        let name = name_at(2, "user")?;
        if word(3, "IDENTIFIED") && word(4, "BY") {
            let password = toks
                .get(5)
                .and_then(secret)
                .ok_or_else(|| syntax("expected a password", text))?;
            let old = match &toks[6..] {
                [] => None,
                [r, old] if r.is("REPLACE") => {
                    Some(secret(old).ok_or_else(|| syntax("expected the old password", text))?)
                }
                _ => {
                    return Err(syntax(
                        "expected ALTER USER <name> IDENTIFIED BY \"<new>\" [REPLACE \"<old>\"]",
                        text,
                    ));
                }
            };
            return Ok(Some(SecurityStatement::AlterPassword {
                name,
                password,
                old,
            }));
        }
        if word(3, "SET")
            && word(4, "CONSUMER_GROUP")
            && toks.get(5).is_some_and(|t| *t == Tok::Other("=".into()))
            && toks.len() == 7
        {
            let group = if toks[6].is("NULL") {
                None
            } else {
                Some(name_at(6, "consumer group")?)
            };
            return Ok(Some(SecurityStatement::AlterUserGroup { name, group }));
        }
        return Err(syntax(
            "expected ALTER USER <name> IDENTIFIED BY \"<password>\" or ALTER USER <name> SET \
             CONSUMER_GROUP = <group>|NULL",
            text,
        ));
    }
    if word(0, "DROP") && word(1, "USER") {
        let if_exists = word(2, "IF") && word(3, "EXISTS");
        let at = if if_exists { 4 } else { 2 };
        let name = name_at(at, "user")?;
        let cascade = match toks.len() - at {
            1 => false,
            2 if word(at + 1, "CASCADE") => true,
            _ => {
                return Err(syntax(
                    "expected DROP USER [IF EXISTS] <name> [CASCADE]",
                    text,
                ));
            }
        };
        return Ok(Some(SecurityStatement::DropUser {
            name,
            if_exists,
            cascade,
        }));
    }
    if word(0, "CREATE") && word(1, "ROLE") {
        if toks.len() != 3 {
            return Err(syntax("expected CREATE ROLE <name>", text));
        }
        return Ok(Some(SecurityStatement::CreateRole(name_at(2, "role")?)));
    }
    if word(0, "DROP") && word(1, "ROLE") {
        let if_exists = word(2, "IF") && word(3, "EXISTS");
        let at = if if_exists { 4 } else { 2 };
        let name = name_at(at, "role")?;
        if !(toks.len() == at + 1 || (toks.len() == at + 2 && word(at + 1, "CASCADE"))) {
            return Err(syntax(
                "expected DROP ROLE [IF EXISTS] <name> [CASCADE]",
                text,
            ));
        }
        return Ok(Some(SecurityStatement::DropRole { name, if_exists }));
    }
    if word(0, "IMPERSONATE") {
        if toks.len() != 2 {
            return Err(syntax("expected IMPERSONATE <user>", text));
        }
        return Ok(Some(SecurityStatement::Impersonate(name_at(1, "user")?)));
    }
    if word(0, "GRANT") {
        return parse_grant(&toks[1..], "TO", text).map(|g| Some(SecurityStatement::Grant(g)));
    }
    if word(0, "REVOKE") {
        return parse_grant(&toks[1..], "FROM", text).map(|g| Some(SecurityStatement::Revoke(g)));
    }
    if word(1, "CONSUMER") && word(2, "GROUP") {
        let name = name_at(3, "consumer group")?;
        if word(0, "DROP") {
            if toks.len() != 4 {
                return Err(syntax("expected DROP CONSUMER GROUP <name>", text));
            }
            return Ok(Some(SecurityStatement::DropGroup(name)));
        }
        let (keyword, usage) = if word(0, "CREATE") {
            (
                "WITH",
                "expected CREATE CONSUMER GROUP <name> WITH <attribute> = <value>, …",
            )
        } else if word(0, "ALTER") {
            (
                "SET",
                "expected ALTER CONSUMER GROUP <name> SET <attribute> = <value>, …",
            )
        } else {
            return Ok(None);
        };
        if !word(4, keyword) {
            return Err(syntax(usage, text));
        }
        let attributes = attribute_list(&toks[5..]).ok_or_else(|| syntax(usage, text))?;
        return Ok(Some(if word(0, "CREATE") {
            SecurityStatement::CreateGroup { name, attributes }
        } else {
            SecurityStatement::AlterGroup { name, attributes }
        }));
    }
    Ok(None)
}

/// A user's, role's or consumer group's name in its one canonical form
/// ([`canonical_account`]): quoted or not, `"sys"`, `Sys` and `SYS` are one name, so no name
/// can alias or shadow another in lookups, ownership, caps or logs.
fn account_folded(tok: &Tok) -> Option<String> {
    exasol_folded(tok).map(|name| canonical_account(&name))
}

/// A password: `"pw"` (Exasol's form) or `'pw'`.
fn secret(tok: &Tok) -> Option<String> {
    match tok {
        Tok::Word { text, quoted: true } | Tok::Str(text) => Some(text.clone()),
        _ => None,
    }
}

/// `k = v, k = 'v', …` (keys upper-cased).
fn attribute_list(toks: &[Tok]) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for item in toks.split(|t| *t == Tok::Other(",".into())) {
        match item {
            [Tok::Word { text: key, .. }, Tok::Other(eq), value] if eq == "=" => {
                let value = match value {
                    Tok::Str(s) => s.clone(),
                    Tok::Word { text, .. } | Tok::Other(text) => text.clone(),
                };
                out.push((key.to_ascii_uppercase(), value));
            }
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The part of `GRANT`/`REVOKE` after its keyword; `to` is `TO` or `FROM`.
fn parse_grant(toks: &[Tok], to: &str, text: &str) -> Result<GrantSpec> {
    let usage = format!(
        "expected {0} <privileges or roles> {to} <users or roles>, {0} <object privileges> ON \
         [SCRIPT|CONNECTION|SCHEMA|TABLE] <object> {to} …, or {0} CONNECTION <name> {to} …",
        if to == "TO" { "GRANT" } else { "REVOKE" }
    );
    let bad = || syntax(&usage, text);
    let at_to = toks.iter().rposition(|t| t.is(to)).ok_or_else(bad)?;
    let (what, rest) = toks.split_at(at_to);
    let mut tail = &rest[1..];
    let mut admin_option = false;
    if let [before @ .., w, a, o] = tail
        && w.is("WITH")
        && (a.is("ADMIN") || a.is("GRANT"))
        && o.is("OPTION")
    {
        admin_option = true;
        tail = before;
    }
    if let [before @ .., c, k] = tail
        && c.is("CASCADE")
        && k.is("CONSTRAINTS")
    {
        tail = before;
    }
    let grantees = tail
        .split(|t| *t == Tok::Other(",".into()))
        .map(|item| match item {
            [t] => account_folded(t),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|g| !g.is_empty())
        .ok_or_else(bad)?;
    let items = match what.iter().position(|t| t.is("ON")) {
        Some(on) => vec![object_item(&what[..on], &what[on + 1..]).ok_or_else(bad)?],
        None if what.first().is_some_and(|t| t.is("CONNECTION")) => what[1..]
            .split(|t| *t == Tok::Other(",".into()))
            .map(|item| match item {
                [t] => exasol_folded(t).map(|object| GrantItem::Object {
                    privileges: vec![ObjectPrivilege::Use],
                    kind: Some(ObjectKind::Connection),
                    object,
                    for_script: None,
                }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
        None => what
            .split(|t| *t == Tok::Other(",".into()))
            .map(system_or_role)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
    };
    if items.is_empty() {
        return Err(bad());
    }
    Ok(GrantSpec {
        items,
        grantees,
        admin_option,
    })
}

/// One item of a privilege list without `ON`: a system privilege, `ALL [PRIVILEGES]`, or a role.
fn system_or_role(item: &[Tok]) -> Option<GrantItem> {
    let words: Vec<&str> = item
        .iter()
        .map(|t| match t {
            Tok::Word {
                text,
                quoted: false,
            } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()
        .unwrap_or_default();
    if !words.is_empty() {
        let joined = words.join(" ");
        if matches!(
            joined.to_ascii_uppercase().as_str(),
            "ALL" | "ALL PRIVILEGES"
        ) {
            return Some(GrantItem::AllSystem);
        }
        if let Some(p) = SystemPrivilege::parse(&joined) {
            return Some(GrantItem::System(p));
        }
    }
    match item {
        [t] => account_folded(t).map(GrantItem::Role),
        _ => None,
    }
}

/// `<privileges> ON [kind] <object> [FOR SCRIPT s]`.
fn object_item(privileges: &[Tok], on: &[Tok]) -> Option<GrantItem> {
    let mut list = Vec::new();
    for item in privileges.split(|t| *t == Tok::Other(",".into())) {
        match item {
            [all] | [all, _] if all.is("ALL") => list.clear(),
            [p] => list.push(match p {
                Tok::Word {
                    text,
                    quoted: false,
                } => ObjectPrivilege::parse(text)?,
                _ => return None,
            }),
            _ => return None,
        }
    }
    let (kind, mut i) = match on.first() {
        Some(Tok::Word {
            text,
            quoted: false,
        }) if on.len() > 1 && ObjectKind::parse(text).is_some() => (ObjectKind::parse(text), 1),
        _ => (None, 0),
    };
    let object = if kind == Some(ObjectKind::Connection) {
        let name = exasol_folded(on.get(i)?)?;
        i += 1;
        name
    } else {
        qualified_name(on, &mut i)?
    };
    let for_script = match &on[i..] {
        [] => None,
        [f, s, rest @ ..] if f.is("FOR") && (s.is("SCRIPT") || s.is("SCHEMA")) => {
            let mut j = 0;
            let name = qualified_name(rest, &mut j)?;
            (j == rest.len()).then_some(name)?.into()
        }
        _ => return None,
    };
    Some(GrantItem::Object {
        privileges: list,
        kind,
        object,
        for_script,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> SecurityStatement {
        parse_security_statement(text).unwrap().unwrap()
    }

    #[test]
    fn users_and_roles() {
        assert_eq!(
            parsed("CREATE USER ann IDENTIFIED BY \"s3cret\""),
            SecurityStatement::CreateUser {
                name: "ANN".into(),
                password: "s3cret".into()
            }
        );
        assert_eq!(
            parsed("alter user \"Ann\" identified by 'new' replace 'old'"),
            SecurityStatement::AlterPassword {
                name: "ANN".into(),
                password: "new".into(),
                old: Some("old".into())
            }
        );
        assert_eq!(
            parsed("ALTER USER ann SET CONSUMER_GROUP = high"),
            SecurityStatement::AlterUserGroup {
                name: "ANN".into(),
                group: Some("HIGH".into())
            }
        );
        assert_eq!(
            parsed("DROP USER IF EXISTS ann CASCADE"),
            SecurityStatement::DropUser {
                name: "ANN".into(),
                if_exists: true,
                cascade: true
            }
        );
        assert_eq!(
            parsed("create role analyst"),
            SecurityStatement::CreateRole("ANALYST".into())
        );
        assert!(parse_security_statement("CREATE USER ann").is_err());
        assert!(parse_security_statement("CREATE USER ann IDENTIFIED AT LDAP AS 'x'").is_err());
        assert_eq!(parse_security_statement("SELECT 1").unwrap(), None);
        assert_eq!(
            parsed("IMPERSONATE ann"),
            SecurityStatement::Impersonate("ANN".into())
        );
    }

    #[test]
    fn grants() {
        let SecurityStatement::Grant(g) =
            parsed("GRANT CREATE SESSION, use gpu, analyst TO ann, bob WITH ADMIN OPTION")
        else {
            panic!()
        };
        assert_eq!(
            g.items,
            vec![
                GrantItem::System(SystemPrivilege::CreateSession),
                GrantItem::System(SystemPrivilege::UseGpu),
                GrantItem::Role("ANALYST".into()),
            ]
        );
        assert_eq!(g.grantees, vec!["ANN".to_string(), "BOB".to_string()]);
        assert!(g.admin_option);
        let SecurityStatement::Grant(g) = parsed("GRANT EXECUTE ON SCRIPT my.f TO ann") else {
            panic!()
        };
        assert_eq!(
            g.items,
            vec![GrantItem::Object {
                privileges: vec![ObjectPrivilege::Execute],
                kind: Some(ObjectKind::Script),
                object: "my.f".into(),
                for_script: None
            }]
        );
        let SecurityStatement::Revoke(g) =
            parsed("REVOKE ACCESS ON CONNECTION s3 FOR SCRIPT loader FROM ann")
        else {
            panic!()
        };
        assert_eq!(
            g.items,
            vec![GrantItem::Object {
                privileges: vec![ObjectPrivilege::Access],
                kind: Some(ObjectKind::Connection),
                object: "S3".into(),
                for_script: Some("loader".into())
            }]
        );
        let SecurityStatement::Grant(g) = parsed("GRANT CONNECTION s3 TO analyst") else {
            panic!()
        };
        assert!(matches!(&g.items[0], GrantItem::Object { object, .. } if object == "S3"));
        let SecurityStatement::Grant(g) = parsed("GRANT ALL PRIVILEGES TO ann") else {
            panic!()
        };
        assert_eq!(g.items, vec![GrantItem::AllSystem]);
        assert!(parse_security_statement("GRANT TO ann").is_err());
        assert!(parse_security_statement("GRANT CREATE SESSION").is_err());
    }

    #[test]
    fn consumer_groups() {
        assert_eq!(
            parsed(
                "CREATE CONSUMER GROUP etl WITH PRECEDENCE = '200', QUERY_TIMEOUT = 60, \
                 gpu_precedence = '900'"
            ),
            SecurityStatement::CreateGroup {
                name: "ETL".into(),
                attributes: vec![
                    ("PRECEDENCE".into(), "200".into()),
                    ("QUERY_TIMEOUT".into(), "60".into()),
                    ("GPU_PRECEDENCE".into(), "900".into()),
                ]
            }
        );
        assert_eq!(
            parsed("DROP CONSUMER GROUP etl"),
            SecurityStatement::DropGroup("ETL".into())
        );
        assert!(parse_security_statement("ALTER CONSUMER GROUP etl SET").is_err());
    }
}
