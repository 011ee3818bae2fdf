//! The front end, the top layer: where a statement goes in.
//!
//! Owns the [`Engine`](engine::Engine) handle an embedding program holds (the sessions it opens
//! and the users they run as: [`accounts`]) and the [`Session`](session::Session) that runs SQL. A statement's path:
//! [`splitter`] cuts text into statements; [`statements`] says what kind each is, from one
//! token view ([`tokens`]); accelsql's own kinds run in [`own_statements`] (script DDL:
//! [`scripts`]; users and privileges: [`privileges`]; Exasol's statements: [`exasol`]) and
//! [`tables`] (transactions, `ALTER TABLE`, `OPTIMIZE`, `VACUUM`, `COPY FROM`, time travel, with
//! [`stored`]); SQL goes through [`execute`]: the front end's ordered rewrites ([`passes`]), a
//! plan step and one run step per kind of plan, with writes the session runs itself
//! ([`writes`]: `CREATE TABLE … AS`, `TRUNCATE`). Around them: the session's current schema
//! ([`schema`]), its UDFs as DataFusion functions ([`functions`]), loading Arrow batches
//! ([`import`]), compaction of tables left in tiny batches ([`compact`]), statement depth
//! ([`depth`]), panics caught ([`guard`]) and the results it makes itself ([`results`]).
//!
//! May use: every layer below (`core`, `udf`, `plan`, `exec`, `catalog`).

pub(crate) mod accounts;
pub(crate) mod compact;
pub(crate) mod depth;
pub(crate) mod engine;
pub(crate) mod exasol;
pub(crate) mod execute;
pub(crate) mod functions;
pub(crate) mod guard;
pub(crate) mod import;
pub(crate) mod own_statements;
pub(crate) mod passes;
pub(crate) mod privileges;
pub(crate) mod results;
pub(crate) mod schema;
pub(crate) mod scripts;
pub(crate) mod session;
pub mod splitter;
pub(crate) mod statements;
pub(crate) mod stored;
pub(crate) mod tables;
pub(crate) mod tokens;
pub(crate) mod writes;
