//! The statements a session runs itself, not DataFusion: script DDL, users and privileges,
//! Exasol's statements (`OPEN SCHEMA`, `KILL SESSION`, IMPORT and EXPORT, connections).

use datafusion::common::plan_datafusion_err;
use datafusion::execution::SendableRecordBatchStream;

use super::exasol::schemas::no_such_schema;
use super::exasol::statements::{ExasolStatement, parse_exasol_statement};
use super::exasol::text::{Piece, import_subselects};
use super::exasol::transfer::{SqlRunner, TransferContext, import_query};
use super::privileges;
use super::results::empty_stream;
use super::session::Session;
use crate::core::error::{EngineError, Result};
use crate::core::options::SqlDialect;
use crate::core::privileges::{Grants, SystemPrivilege};
use crate::privilege_err;

impl Session {
    /// `KILL SESSION id`: ends session `id` of this engine — its running and waiting
    /// statements stop (their leases and workers freed, error 57P01) and it takes no more. A
    /// session may end itself; ending another needs a session that may see every session (the
    /// embedding program's, or a server's admin) and is not restricted (42501).
    pub(super) fn kill_session(&self, id: u64) -> Result<()> {
        let target = self.engine.state().sessions.get(id);
        let own = id == self.identity.id
            || target.as_ref().is_some_and(|target| {
                target.account() == self.identity.account() && target.user() == self.identity.user()
            });
        // Whether another session exists is told only to a session that may end it: others
        // get the same 42501 for every number, so the answer names no live session.
        let may_end_others = self.identity.viewer().sees_all
            && self
                .identity
                .grants()
                .check_system(SystemPrivilege::KillAnySession)
                .is_ok();
        let target = match target {
            Some(target) => target,
            None if own || may_end_others => {
                return Err(EngineError::UnknownSession { session: id });
            }
            None => {
                return Err(privilege_err!(
                    "KILL SESSION {id} ends another user's session: it needs the KILL ANY \
                     SESSION privilege (on a server, the admin user's sessions hold it)"
                ));
            }
        };
        if !own {
            if !self.identity.viewer().sees_all {
                return Err(privilege_err!(
                    "KILL SESSION {id} ends another user's session: it needs the KILL ANY \
                     SESSION privilege (on a server, the admin user's sessions hold it)"
                ));
            }
            privileges::require(
                &self.identity.grants(),
                SystemPrivilege::KillAnySession,
                &format!("KILL SESSION {id}"),
            )?;
        }
        target.kill.kill();
        Ok(())
    }

    /// Runs one script statement (`CREATE … SCRIPT`, `DROP SCRIPT`, `ALTER SESSION SET
    /// SCRIPT_LANGUAGES`).
    pub(super) fn run_script_ddl(&self, text: &str, grants: &Grants) -> Result<()> {
        // A script may share its name with a built-in function (its plain name stays the
        // built-in's), not with a Rust UDF of the engine.
        let udfs = self.engine.udfs();
        let taken = |name: &str| udfs.contains(name);
        let exasol = SqlDialect::of(self.ctx.state().config_options()) == SqlDialect::Exasol;
        self.scripts.execute(
            text,
            self.engine.scripts(),
            self.engine.state().script_ddl,
            &taken,
            grants,
            exasol,
        )
    }

    /// Runs a statement about users, roles, privileges or consumer groups; `DROP USER` ends
    /// the dropped user's sessions (their statements stop, their leases are freed).
    pub(super) async fn run_security(
        &self,
        statement: privileges::statements::SecurityStatement,
        grants: &Grants,
    ) -> Result<()> {
        let cx = privileges::run::SecurityContext {
            catalog: self.engine.scripts(),
            grants,
            rounds: self.engine.state().password_rounds,
            current_schema: self.current_schema(),
            tables: &self.engine.state().tables,
        };
        let outcome = privileges::run::run(&cx, statement).await?;
        if let Some(user) = outcome.impersonate {
            self.identity.set_account(&user);
            self.identity.set_user(Some(user), true);
        }
        if let Some(user) = outcome.dropped_user {
            for session in self.engine.state().sessions.all() {
                if session.account() == user {
                    session.kill.kill();
                }
            }
        }
        Ok(())
    }

    /// Before `CREATE [OR REPLACE] CONNECTION` / `DROP CONNECTION`: `CREATE CONNECTION` for a
    /// new one; owning it or `DROP ANY CONNECTION` to replace or drop one.
    pub(super) fn check_connection_change(
        &self,
        statement: &ExasolStatement,
        grants: &Grants,
    ) -> Result<()> {
        let (name, creating) = match statement {
            ExasolStatement::CreateConnection { name, .. } => (name, true),
            ExasolStatement::DropConnection { name, .. } => (name, false),
            _ => return Ok(()),
        };
        match self.engine.scripts().connection(name) {
            Some(existing) => {
                let owned = grants.owns(existing.owner.as_deref());
                grants
                    .check(|h, as_owner| {
                        (as_owner && owned) || h.has(SystemPrivilege::DropAnyConnection)
                    })
                    .map_err(|d| {
                        privileges::refusal(
                            d,
                            &format!(
                                "{} CONNECTION {name}",
                                if creating {
                                    "CREATE OR REPLACE"
                                } else {
                                    "DROP"
                                }
                            ),
                            "owning it, or the DROP ANY CONNECTION privilege",
                        )
                    })
            }
            None if creating => privileges::require(
                grants,
                SystemPrivilege::CreateConnection,
                &format!("CREATE CONNECTION {name}"),
            ),
            None => Ok(()),
        }
    }

    /// `text` with each sub-select `(IMPORT … FROM SCRIPT …)` replaced by the query the import
    /// stands for (its script's generated SQL, cast to the columns it names).
    pub(super) async fn expand_import_subselects(&self, text: &str) -> Result<String> {
        let Some(pieces) = import_subselects(text) else {
            return Ok(text.to_string());
        };
        let grants = self.identity.grants();
        let cx = self.transfer_context(&grants)?;
        let mut out = String::with_capacity(text.len());
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.push_str(&t),
                Piece::Import(statement) => match parse_exasol_statement(&statement)? {
                    Some(ExasolStatement::Import(t)) => {
                        out.push_str(&import_query(&cx, t).await?);
                    }
                    _ => {
                        return Err(plan_datafusion_err!(
                            "not an IMPORT … FROM SCRIPT in a sub-select: {statement}"
                        )
                        .into());
                    }
                },
            }
        }
        Ok(out)
    }

    /// What IMPORT and EXPORT use of this session.
    pub(super) fn transfer_context<'a>(
        &'a self,
        grants: &'a Grants,
    ) -> Result<TransferContext<'a>> {
        Ok(TransferContext {
            catalog: self.engine.scripts(),
            scripts: &self.scripts,
            state: self.engine.state(),
            udf_timeout: self.accelsql_options().udf_timeout()?,
            runner: self,
            grants,
        })
    }

    /// Runs a statement of Exasol's that DataFusion does not know.
    pub(super) async fn run_exasol(
        &self,
        statement: ExasolStatement,
    ) -> Result<SendableRecordBatchStream> {
        match statement {
            ExasolStatement::OpenSchema(name) => {
                if !self.schema_exists(&name) {
                    return Err(no_such_schema(&name));
                }
                self.set_current_schema(&name);
            }
            ExasolStatement::CloseSchema => self.close_schema(),
            // Exasol's form of `SET accelsql.statement_timeout` (0: no bound), checked as it is
            // (a restricted session may only lower it).
            ExasolStatement::KillSession(id) => {
                self.kill_session(id)?;
                return empty_stream();
            }
            ExasolStatement::QueryTimeout(seconds) => {
                let value = match seconds {
                    0 => String::new(),
                    s => format!("{s}s"),
                };
                let set = format!("SET accelsql.statement_timeout = '{value}'");
                return Box::pin(self.sql_stream(&set)).await;
            }
            other => {
                let grants = self.identity.grants();
                let cx = self.transfer_context(&grants)?;
                return super::exasol::run_statement(&cx, other).await;
            }
        }
        empty_stream()
    }
}

#[async_trait::async_trait]
impl SqlRunner for Session {
    async fn run_sql(&self, sql: &str) -> Result<SendableRecordBatchStream> {
        Box::pin(self.sql_stream(sql)).await
    }
}
