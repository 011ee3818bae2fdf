//! The front end, the top layer: where a statement goes in.
//!
//! Owns the [`Engine`](engine::Engine) handle an embedding program holds and the
//! [`Session`](session::Session) that runs SQL: splitting text into statements ([`splitter`]),
//! accelsql's own statements (script DDL: [`scripts`]; Exasol's statements: [`exasol`]), the
//! ordered rewrites of a statement before it is planned ([`passes`]), statement parameters,
//! restricted sessions' checks ([`restricted`]), loading Arrow batches into tables ([`import`]), writes the session runs itself ([`writes`]:
//! `CREATE TABLE … AS`, `TRUNCATE`), the tables' own statements (transactions, `ALTER TABLE`,
//! `RENAME`, `OPTIMIZE`, `VACUUM`, `COPY FROM`, time travel: [`tables`] and [`stored`]),
//! compaction of tables left in tiny batches ([`compact`]),
//! and the results it makes itself ([`results`]).
//!
//! May use: every layer below (`core`, `udf`, `plan`, `exec`, `catalog`).

pub(crate) mod compact;
pub(crate) mod depth;
pub(crate) mod engine;
pub(crate) mod exasol;
pub(crate) mod guard;
pub(crate) mod import;
pub(crate) mod passes;
pub(crate) mod privileges;
pub(crate) mod results;
pub(crate) mod scripts;
pub(crate) mod session;
pub mod splitter;
pub(crate) mod stored;
pub(crate) mod tables;
pub(crate) mod tokens;
pub(crate) mod writes;
