//! A session's side of scripts: the script DDL accelsql parses itself (`CREATE … SCRIPT`,
//! `DROP SCRIPT`, `ALTER SESSION SET SCRIPT_LANGUAGES`: [`ddl`]), a call site's
//! `EMITS (a INT, …)` rewritten before parsing ([`dynamic`]), and the session's languages,
//! current schema and script functions ([`languages`]).

pub(crate) mod ddl;
pub(crate) mod dynamic;
pub(crate) mod languages;
