//! A [`Session`]: one connection's SQL front end. Splits statements, runs accelsql's own
//! statements (script DDL, Exasol's statements), rewrites the others with the front end's passes
//! (`passes/`), plans each with the placement rule and runs it under the statement's GPU lease.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ResolvedTableReference;
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::source_as_provider;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::{FunctionRegistry, RecordBatchStream};
use datafusion::logical_expr::{
    AggregateUDF, CreateMemoryTable, DdlStatement, DmlStatement, LogicalPlan, ScalarUDF, WriteOp,
};
use datafusion::physical_plan::execute_stream;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParserBuilder, ResetStatement, Statement as DfStatement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use futures::TryStreamExt;

use super::compact::{compact_after, compact_table};
use super::engine::Engine;
use super::exasol::dialect::{exasol_plan_error, exasol_result, exasol_text};
use super::exasol::schemas::{
    DEFAULT_SCHEMA, SchemaChange, no_such_schema, schema_change, schema_has_scripts,
};
use super::exasol::statements::{ExasolStatement, parse_exasol_statement};
use super::exasol::text::{Piece, import_subselects, rewrite_exasol_text};
use super::exasol::transfer::{SqlRunner, TransferContext, import_query};
use super::passes::exasol_functions::SessionValues;
use super::passes::script_calls::NameScope;
use super::passes::{PassContext, rewrite_names};
use super::privileges::statements::parse_security_statement;
use super::privileges::{self, ScriptRef};
use super::results::{empty_stream, with_schema};
use super::scripts::ddl::is_script_ddl;
use super::scripts::languages::SessionScripts;
use super::splitter::split_statements;
use super::tables::{exasol_rows, is_table_ddl, parse_table_statement, rewrite_table_text};
use super::writes::{
    count_stream, ctas_query, ctas_with_rows, dml_never_matches, dml_without_subqueries,
    insert_with_table_fields, truncate_as_delete, with_declared_types,
};
use crate::catalog::files::enable_url_tables;
use crate::core::error::{EngineError, Result};
use crate::core::memory::{SessionPool, session_runtime};
use crate::core::names::exasol_name;
use crate::core::options::{AccelsqlOptions, IdentifierCase, SqlDialect};
use crate::core::owners::{SessionIdentity, StatementOwner};
use crate::core::privileges::{Grants, SYS_USER, SystemPrivilege};
use crate::exec::planner::AccelQueryPlanner;
use crate::exec::stream::StatementStream;
use crate::plan::emits_rule::EmitsRule;
use crate::plan::empty_strings::{EmptyStringsAreNull, empty_strings_as_null, nullable_strings};
use crate::plan::exasol_booleans::ExasolBooleans;
use crate::plan::placement::PlacementRule;
use crate::plan::statement::StatementScope;
use crate::plan::string_arithmetic::StringsInArithmetic;
use crate::udf::node_functions::node_functions;
use crate::udf::script::udf::ScriptUdf;
use crate::udf::sized::bound_growing_functions;
use crate::udf::{
    AccelAggregateUdf, AccelScalarUdf, EmitsAggregate, EmitsScalar, InputType, Output, ScalarUdf,
    SetUdf, as_accel_udf, emits_of, emits_of_aggregate,
};
use crate::{definition_err, privilege_err};

/// One connection: its own settings and tables, the engine's GPUs and UDFs.
pub struct Session {
    engine: Engine,
    ctx: SessionContext,
    scripts: SessionScripts,
    /// Set once by [`Session::restrict`] (or from birth), never cleared; shared with the file
    /// table factory.
    restricted: Arc<AtomicBool>,
    /// The id of the statement this session started last (0: none yet).
    last_statement: std::sync::atomic::AtomicU64,
    /// Its number, user and right to see other sessions' SQL (also a config extension).
    identity: Arc<SessionIdentity>,
    /// Its memory budget within the engine's pool (`accelsql.memory_limit`).
    memory: Arc<SessionPool>,
    /// Its transaction: the versions its statements read, its uncommitted writes (also a
    /// config extension, where the tables find it).
    pub(super) txn: Arc<accelsql_storage::Transaction>,
    /// Its temporary tables (`CREATE TEMPORARY TABLE`).
    pub(super) temporary: Arc<crate::catalog::session_tables::TemporaryTables>,
    /// Its catalog as registered (DataFusion's file-table wrapper around it cannot drop a
    /// schema: `DROP SCHEMA` goes here).
    catalog: Arc<crate::catalog::session_tables::SessionCatalog>,
    /// The statement about to be planned was `CREATE TEMPORARY TABLE` (the word is taken out
    /// of its text before DataFusion parses it).
    pub(super) next_temporary: AtomicBool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session_id", &self.ctx.session_id())
            .finish()
    }
}

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
            .ok_or_else(|| EngineError::DoesNotExist {
                what: format!("user {user}"),
            })?;
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
        crate::core::passwords::check_hash(hash).map_err(|message| {
            EngineError::InvalidSetting {
                name: format!("password hash of {user}"),
                message,
            }
        })?;
        let user = &crate::core::privileges::canonical_account(user);
        if user.is_empty() || user == SYS_USER {
            return Err(privilege_err!("a user named {user:?} cannot be imported"));
        }
        let mut added = false;
        self.scripts().change_security(|s| {
            if s.is_role(user) {
                return Err(EngineError::AlreadyExists {
                    what: format!("role {user}"),
                });
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

impl Session {
    fn new(engine: Engine) -> Self {
        let mut config = SessionConfig::new()
            .with_option_extension(AccelsqlOptions::for_session(
                engine.state().statement_timeout,
                engine.state().session_memory_limit,
                engine.state().sql_dialect,
            ))
            .with_information_schema(true);
        let shared = engine.state();
        if let Some(distributor) = &shared.distributor {
            if let Some(partitions) = distributor.target_partitions() {
                config = config.with_target_partitions(partitions);
            }
            config = distributor.configure_session(config);
        }
        let restricted = Arc::new(AtomicBool::new(shared.restricted));
        let identity = Arc::new(SessionIdentity::new(
            shared.next_session_id(),
            Arc::clone(&restricted),
        ));
        shared.sessions.add(&identity);
        let txn = Arc::new(accelsql_storage::Transaction::new());
        let mut config = config
            .with_extension(Arc::clone(&identity))
            .with_extension(Arc::clone(&txn));
        // The table cache serves scans in this process; a cluster's executors read the files.
        if let (Some(cache), None) = (shared.tables.cache(), &shared.distributor) {
            config = config.with_extension(Arc::clone(cache));
        }
        let memory = Arc::new(SessionPool::new(
            Arc::clone(&shared.runtime.memory_pool),
            identity.id,
        ));
        memory.set_budget(shared.session_memory_limit);
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(session_runtime(
                &shared.runtime,
                Arc::clone(&memory),
                shared
                    .spill
                    .session_disk(identity.id, &shared.runtime.disk_manager),
            ))
            .with_default_features()
            .with_query_planner(Arc::new(AccelQueryPlanner))
            .build();
        let mut ctx = SessionContext::new_with_state(state);
        let temporary = Arc::new(crate::catalog::session_tables::TemporaryTables::default());
        let catalog_name = ctx
            .copied_config()
            .options()
            .catalog
            .default_catalog
            .clone();
        let catalog = Arc::new(crate::catalog::session_tables::SessionCatalog::new(
            shared.tables.catalog(),
            Arc::clone(&temporary),
        ));
        ctx.register_catalog(catalog_name, Arc::clone(&catalog) as _);
        if shared.url_tables {
            ctx = enable_url_tables(ctx, Arc::clone(&identity), shared.data_dir.clone());
        }
        ctx.add_analyzer_rule(Arc::new(EmitsRule));
        bound_growing_functions(&ctx, &memory, shared.max_value_bytes);
        let node = shared.node;
        for f in node_functions(node.id as i64, node.count as i64) {
            ctx.register_udf(f);
        }
        ctx.register_udf(crate::udf::wkt::geometry_function());
        let registry = engine.udfs().snapshot();
        for def in registry.scalar {
            ctx.register_udf(ScalarUDF::new_from_impl(AccelScalarUdf::new(def)));
        }
        for def in registry.set {
            register_set_udf(&ctx, def);
        }
        if let Err(e) =
            crate::catalog::system::register(&ctx, &engine.system_context(), &restricted, &identity)
        {
            log::error!("system tables unavailable in this session: {e}");
        }
        let scripts = SessionScripts::new(identity.id, node.count);
        scripts.set_builtins(function_names(&ctx));
        Self {
            engine,
            ctx,
            scripts,
            restricted,
            last_statement: std::sync::atomic::AtomicU64::new(0),
            identity,
            memory,
            txn,
            temporary,
            catalog,
            next_temporary: AtomicBool::new(false),
        }
    }

    /// This session's memory: its budget (`accelsql.memory_limit`, `None`: only the engine's
    /// pool bounds it) and what its statements hold now.
    pub fn memory(&self) -> &SessionPool {
        &self.memory
    }

    /// Reserves `bytes` of this session's memory budget for `what` (a server's prepared
    /// statement, an ingest buffer), held until the reservation is dropped; 53200 when it does
    /// not fit the session's budget or the engine's pool.
    pub fn reserve_memory(&self, what: &str, bytes: usize) -> Result<MemoryReservation> {
        if let Some(own) = self
            .ctx
            .state()
            .config()
            .options()
            .extensions
            .get::<AccelsqlOptions>()
        {
            self.memory.set_budget(own.memory_limit()?);
        }
        Ok(self.memory.reserve(what, bytes)?)
    }

    /// This session's number: unique in its engine, shown as `session` in
    /// `accelsql.gpu_leases` and `accelsql.udf_calls`.
    pub fn id(&self) -> u64 {
        self.identity.id
    }

    /// Where this session stands at its node's GPU lease now (a shell's progress line):
    /// holding it, waiting in line, or neither (`None`).
    pub fn gpu_lease_place(&self) -> Option<LeasePlace> {
        use crate::core::owners::session_of_label;
        let snapshot = self.engine.lease_queue().snapshot();
        let mine = |label: &str| session_of_label(label) == Some(self.identity.id);
        if let Some(h) = snapshot.holders.iter().find(|h| mine(&h.statement)) {
            return Some(LeasePlace::Holding {
                devices: if h.whole {
                    snapshot.devices
                } else {
                    h.reserved.len()
                },
            });
        }
        let at = snapshot.waiting.iter().position(|w| mine(&w.statement))?;
        Some(LeasePlace::Waiting {
            ahead: at + snapshot.holders.len(),
            blocked_on: snapshot.waiting[at].blocked_on.clone(),
        })
    }

    /// Names the user this session runs for (a server's login), shown beside its statements in
    /// system tables, and says whether it may see other sessions' SQL text and calls there
    /// (`sees_others`: a server's admin; a restricted session never does). A session the
    /// embedding program opens sees everything until this is called.
    pub fn set_user(&self, user: impl Into<String>, sees_others: bool) {
        self.identity.set_user(Some(user.into()), sees_others);
    }

    /// Whether this session is shown other sessions' SQL and calls ([`Session::set_user`]'s
    /// `sees_others`; the embedding program's sessions are).
    pub fn sees_others(&self) -> bool {
        self.identity.viewer().sees_all
    }

    /// The user [`Session::set_user`] named.
    pub fn user(&self) -> Option<String> {
        self.identity.user()
    }

    /// Whether this session was ended by `KILL SESSION` (it then takes no more statements:
    /// 57P01).
    pub fn is_killed(&self) -> bool {
        self.identity.kill.is_killed()
    }

    /// Says what the session came through (a server's front door and the client's driver),
    /// as `EXA_ALL_SESSIONS` shows it.
    pub fn set_client(&self, client: &str) {
        self.identity.set_client(client);
    }

    /// Completes once this session is ended by `KILL SESSION` (a server then closes the
    /// session's connection).
    pub async fn killed(&self) {
        self.identity.kill.killed().await;
    }

    /// `KILL SESSION id`: ends session `id` of this engine — its running and waiting
    /// statements stop (their leases and workers freed, error 57P01) and it takes no more. A
    /// session may end itself; ending another needs a session that may see every session (the
    /// embedding program's, or a server's admin) and is not restricted (42501).
    fn kill_session(&self, id: u64) -> Result<()> {
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

    /// Reads what the session may do from the catalog (its user's privileges now, bounded by
    /// the `RESTRICTED` role if the session is restricted), for the statement about to run.
    pub(super) fn refresh_grants(&self) -> Arc<Grants> {
        let security = self.engine.scripts().security();
        let grants = Arc::new(security.grants_of(&self.identity.account(), self.is_restricted()));
        self.identity.set_grants((*grants).clone());
        self.scripts.set_grants(Arc::clone(&grants));
        grants
    }

    /// The idle timeout of the session's user's consumer group (`IDLE_TIMEOUT`), if it has one:
    /// a server ends the session after this long without a statement (or sooner, by its own
    /// bound).
    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        let security = self.engine.scripts().security();
        security
            .group_of(&self.identity.account())
            .and_then(|g| g.idle_timeout)
            .filter(|s| *s > 0)
            .map(std::time::Duration::from_secs)
    }

    /// The user whose privileges this session has: `SYS` for the embedding program's sessions,
    /// else the catalog user it was opened for ([`Engine::session_as`]).
    pub fn account(&self) -> String {
        self.identity.account()
    }

    /// The id of the statement this session started last, as `accelsql.udf_calls` and
    /// [`Engine::recent_calls`] name it; `None` before the first planned statement.
    pub fn last_statement_id(&self) -> Option<u64> {
        match self.last_statement.load(Ordering::Acquire) {
            0 => None,
            id => Some(id),
        }
    }

    /// Restricts this session for SQL from an untrusted user, for good: from now on it refuses
    /// (error 42501) script DDL, `ALTER SESSION SET SCRIPT_LANGUAGES`, `CREATE/DROP CONNECTION`,
    /// file access (`CREATE EXTERNAL TABLE`, `COPY … TO`, files named as tables), and settings
    /// that could lift a resource limit. Scripts and UDFs that exist can still be called.
    ///
    /// Set the session up first (languages, settings), then restrict it and hand it over.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let session = accelsql_engine::Engine::new().unwrap().session();
    /// session.restrict();
    /// let e = session.sql("COPY (SELECT 1) TO '/tmp/x.csv'").await.unwrap_err();
    /// assert_eq!(e.code(), "42501");
    /// # });
    /// ```
    pub fn restrict(&self) {
        self.restricted.store(true, Ordering::Release);
    }

    /// Whether this session is restricted ([`Session::restrict`]).
    pub fn is_restricted(&self) -> bool {
        self.restricted.load(Ordering::Acquire)
    }

    /// The DataFusion context (to register tables, read settings, or use the DataFrame API).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The engine this session belongs to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Registers a scalar UDF in this session only (other sessions do not see it): the way an
    /// embedding language adds its own functions (the Python package's `register_udf`). The
    /// accelerator annotation and the placement rule apply as for engine UDFs; registering a name
    /// again replaces this session's earlier UDF of that name.
    ///
    /// Fails with 42E01 if the name belongs to an engine UDF, a script or a built-in function.
    pub fn register_scalar_udf(&self, udf: ScalarUdf) -> Result<()> {
        // Scripts created or dropped meanwhile first, so that the next sync keeps this UDF.
        self.sync_scripts();
        let name = udf.name().to_string();
        if self.engine.udfs().contains(&name) {
            return Err(definition_err!(
                "a UDF named {name} is already registered in the engine"
            ));
        }
        if self
            .engine
            .scripts()
            .entries()
            .iter()
            .any(|e| e.name == name)
        {
            return Err(definition_err!(
                "{name} is a script; drop it or pick another name"
            ));
        }
        let builtin = {
            let state = self.ctx.state_ref();
            let state = state.read();
            match state.scalar_functions().get(&name) {
                // An accelsql UDF here that is neither an engine UDF nor a script is one of ours.
                Some(f) => as_accel_udf(f.inner().as_ref()).is_none(),
                None => {
                    state.aggregate_functions().contains_key(&name)
                        || state.window_functions().contains_key(&name)
                }
            }
        };
        if builtin {
            return Err(definition_err!(
                "{name} is a built-in function; pick another name"
            ));
        }
        self.ctx
            .register_udf(ScalarUDF::new_from_impl(AccelScalarUdf::new(Arc::new(udf))));
        Ok(())
    }

    /// Runs one or more `;`-separated statements and returns the last one's result.
    ///
    /// A failing statement stops the list; the statements before it keep their effects, and the
    /// session stays usable.
    pub async fn sql(&self, text: &str) -> Result<Vec<RecordBatch>> {
        let stream = self.sql_stream(text).await?;
        Ok(stream.try_collect::<Vec<_>>().await?)
    }

    /// Like [`Session::sql`], but streams the last statement's result. The statement's GPU lease
    /// (if it needs one) is taken on the first poll and held until the stream ends, fails or is
    /// dropped.
    ///
    /// Each statement is parsed just before it runs, in the session's dialect
    /// (`SET datafusion.sql_parser.dialect = 'postgres'` applies to the statements after it).
    pub async fn sql_stream(&self, text: &str) -> Result<SendableRecordBatchStream> {
        self.sql_stream_with_params(text, &[]).await
    }

    /// Like [`Session::sql`], with values for the last statement's placeholders: `?` (numbered in
    /// order), `$1`, `$2`, …. The values are bound in the plan, never pasted into the text.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use accelsql_engine::datafusion::common::ScalarValue;
    /// let engine = accelsql_engine::Engine::new().unwrap();
    /// let batches = engine
    ///     .session()
    ///     .sql_with_params("SELECT ? || '!'", &[ScalarValue::from("it's")])
    ///     .await
    ///     .unwrap();
    /// # assert_eq!(batches[0].num_rows(), 1);
    /// # });
    /// ```
    pub async fn sql_with_params(
        &self,
        text: &str,
        params: &[ScalarValue],
    ) -> Result<Vec<RecordBatch>> {
        let stream = self.sql_stream_with_params(text, params).await?;
        Ok(stream.try_collect::<Vec<_>>().await?)
    }

    /// Like [`Session::sql_stream`], with values for the last statement's placeholders (see
    /// [`Session::sql_with_params`]).
    pub async fn sql_stream_with_params(
        &self,
        text: &str,
        params: &[ScalarValue],
    ) -> Result<SendableRecordBatchStream> {
        Ok(self.sql_stream_shaped(text, params).await?.0)
    }

    /// Like [`Session::sql_stream_with_params`], and how the last statement's result may be
    /// split among readers (a server offers an unordered query's result as several endpoints).
    pub async fn sql_stream_shaped(
        &self,
        text: &str,
        params: &[ScalarValue],
    ) -> Result<(SendableRecordBatchStream, ResultShape)> {
        // Boxed: planning's future is large, and a caller's task (or a debug build's stack)
        // should hold a pointer to it, not the whole state.
        let (stream, shape) =
            super::guard::catch_panic(Box::pin(self.run_statements(text, params))).await?;
        Ok((super::guard::CatchPanics::wrap(stream), shape))
    }

    /// The statements of `text`, run one after another (see [`Session::sql_stream_shaped`]).
    async fn run_statements(
        &self,
        text: &str,
        params: &[ScalarValue],
    ) -> Result<(SendableRecordBatchStream, ResultShape)> {
        if self.identity.kill.is_killed() {
            return Err(EngineError::SessionKilled {
                session: self.identity.id,
            });
        }
        let limit = self.engine.state().max_statement_depth;
        if let Some(depth) = super::depth::statement_depth(text)
            && depth > limit
        {
            return Err(EngineError::StatementTooComplex { depth, limit });
        }
        let pieces = split_statements(text);
        if pieces.is_empty() {
            return Err(EngineError::Sql(DataFusionError::Plan(
                "no SQL statement given".into(),
            )));
        }
        let mut last_stream = None;
        for (i, piece) in pieces.iter().enumerate() {
            let is_last_piece = i + 1 == pieces.len();
            if self.identity.kill.is_killed() {
                return Err(EngineError::SessionKilled {
                    session: self.identity.id,
                });
            }
            let grants = self.refresh_grants();
            self.txn.begin_statement();
            self.txn.set_user(Some(
                self.identity
                    .user()
                    .unwrap_or_else(|| self.identity.account()),
            ));
            if is_script_ddl(&piece.text) {
                self.run_script_ddl(&piece.text, &grants)?;
                if is_last_piece {
                    last_stream = Some((empty_stream()?, ResultShape::SINGLE));
                }
                continue;
            }
            if let Some(statement) = parse_security_statement(&piece.text)? {
                self.run_security(statement, &grants).await?;
                if is_last_piece {
                    last_stream = Some((empty_stream()?, ResultShape::SINGLE));
                }
                continue;
            }
            let exasol = self.accelsql_options().sql_dialect == SqlDialect::Exasol;
            let exasol_piece = exasol.then(|| exasol_text(&piece.text));
            if let Some(statement) =
                parse_exasol_statement(exasol_piece.as_deref().unwrap_or(&piece.text))?
            {
                let statement = match statement {
                    ExasolStatement::Import(t) if exasol => {
                        ExasolStatement::Import(t.into_written())
                    }
                    ExasolStatement::Export(t) if exasol => {
                        ExasolStatement::Export(t.into_written())
                    }
                    other => other,
                };
                self.check_connection_change(&statement, &grants)?;
                let stream = self.run_exasol(statement).await?;
                if is_last_piece {
                    last_stream = Some((stream, ResultShape::SINGLE));
                } else {
                    stream.try_collect::<Vec<_>>().await?;
                }
                continue;
            }
            if let Some(statement) =
                parse_table_statement(exasol_piece.as_deref().unwrap_or(&piece.text))?
            {
                let stream = self.run_table_statement(statement, &grants).await?;
                if is_last_piece {
                    last_stream = Some((stream, ResultShape::SINGLE));
                } else {
                    stream.try_collect::<Vec<_>>().await?;
                }
                continue;
            }
            let text = self.expand_import_subselects(&piece.text).await?;
            let text = if exasol { exasol_text(&text) } else { text };
            let text = rewrite_exasol_text(&text);
            let table_text = rewrite_table_text(&text)?;
            self.next_temporary
                .store(table_text.temporary, Ordering::Release);
            let text = table_text.text;
            // An INSERT's target columns matter only to an EMITS call without its list.
            let emits = text.to_ascii_uppercase().contains("EMITS")
                || self.engine.scripts().entries().iter().any(|e| {
                    matches!(
                        e.output,
                        crate::udf::script::definition::StoredOutput::DynamicEmits
                    )
                });
            let target = if emits {
                self.insert_target_columns(&text).await
            } else {
                None
            };
            let (text, extra) = self
                .scripts
                .rewrite_dynamic(&text, self.engine.scripts(), target.as_deref(), exasol)
                .await?;
            let mut statements = self.parse(&text)?;
            let last = if is_last_piece {
                statements.pop_back()
            } else {
                None
            };
            for statement in statements {
                let (stream, _) = self.execute(statement, &extra, &[]).await?;
                stream.try_collect::<Vec<_>>().await?;
            }
            if let Some(last) = last {
                last_stream = Some(self.execute(last, &extra, params).await?);
            }
        }
        match last_stream {
            Some(stream) => Ok(stream),
            None => Err(EngineError::Sql(DataFusionError::Plan(
                "no SQL statement given".into(),
            ))),
        }
    }

    /// For `INSERT INTO t [(cols)] …`: the target's columns (those listed, or all) as (name, SQL
    /// type), which an `EMITS (...)` call without an EMITS list emits, as in Exasol. `None` for
    /// other statements, or when `t` is unknown (planning then says so).
    async fn insert_target_columns(&self, text: &str) -> Option<Vec<(String, String)>> {
        use datafusion::sql::sqlparser::ast::{Statement, TableObject};
        if !text.trim_start().get(..6)?.eq_ignore_ascii_case("INSERT") {
            return None;
        }
        let statement = self.parse(text).ok()?.pop_front()?;
        let DfStatement::Statement(inner) = statement else {
            return None;
        };
        let Statement::Insert(insert) = *inner else {
            return None;
        };
        let TableObject::TableName(name) = &insert.table else {
            return None;
        };
        let table = self.ctx.table_provider(name.to_string()).await.ok()?;
        let schema = table.schema();
        // The columns listed, in the list's order (the script's columns fill them in that
        // order), or all of them.
        let fields: Vec<_> = if insert.columns.is_empty() {
            schema.fields().iter().cloned().collect()
        } else {
            insert
                .columns
                .iter()
                .map(|c| {
                    let name = c.to_string();
                    let name = name.trim_matches('"');
                    schema
                        .fields()
                        .iter()
                        .find(|f| f.name().eq_ignore_ascii_case(name))
                        .cloned()
                })
                .collect::<Option<_>>()?
        };
        fields
            .iter()
            .map(|f| {
                let ty = accelsql_udf_runtime::script::SqlType::from_arrow(f.data_type()).ok()?;
                Some((f.name().clone(), ty.to_string()))
            })
            .collect()
    }

    /// Runs one script statement (`CREATE … SCRIPT`, `DROP SCRIPT`, `ALTER SESSION SET
    /// SCRIPT_LANGUAGES`).
    fn run_script_ddl(&self, text: &str, grants: &Grants) -> Result<()> {
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
    async fn run_security(
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
    fn check_connection_change(&self, statement: &ExasolStatement, grants: &Grants) -> Result<()> {
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
    async fn expand_import_subselects(&self, text: &str) -> Result<String> {
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
                        return Err(EngineError::Sql(DataFusionError::Plan(format!(
                            "not an IMPORT … FROM SCRIPT in a sub-select: {statement}"
                        ))));
                    }
                },
            }
        }
        Ok(out)
    }

    /// What IMPORT and EXPORT use of this session.
    fn transfer_context<'a>(&'a self, grants: &'a Grants) -> Result<TransferContext<'a>> {
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
    async fn run_exasol(&self, statement: ExasolStatement) -> Result<SendableRecordBatchStream> {
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

    /// What Exasol's niladic functions (`SESSIONTIMEZONE`, `CURRENT_SCHEMA`, …) say now.
    fn session_values(&self, state: &SessionState) -> SessionValues {
        let zone = state
            .config_options()
            .execution
            .time_zone
            .clone()
            .filter(|z| !z.is_empty())
            .unwrap_or_else(|| "UTC".to_string());
        SessionValues {
            db_time_zone: "UTC".to_string(),
            session_time_zone: zone,
            current_schema: self.scripts.open_schema().map(|s| exasol_name(&s)),
            current_user: self
                .identity
                .user()
                .unwrap_or_else(|| self.identity.account()),
        }
    }

    /// The catalog accelsql's schemas live in (`datafusion.catalog.default_catalog`).
    fn default_catalog(&self) -> String {
        self.ctx
            .copied_config()
            .options()
            .catalog
            .default_catalog
            .clone()
    }

    /// Whether schema `name` exists in the default catalog.
    fn schema_exists(&self, name: &str) -> bool {
        self.ctx
            .catalog(&self.default_catalog())
            .is_some_and(|c| c.schema(name).is_some())
    }

    /// The current schema: unqualified tables and scripts resolve there.
    pub fn current_schema(&self) -> String {
        self.scripts.current_schema()
    }

    /// The open schema as Exasol names it (`FN1`); `None` after `CLOSE SCHEMA`, as Exasol's
    /// `CURRENT_SCHEMA` and its drivers' `currentSchema` attribute show it.
    pub fn exasol_schema(&self) -> Option<String> {
        self.scripts.open_schema().map(|s| exasol_name(&s))
    }

    /// Makes `name` the current schema for tables (DataFusion's default schema) and scripts.
    fn set_current_schema(&self, name: &str) {
        self.resolve_in(name, true);
    }

    /// `CLOSE SCHEMA`: no schema is open; unqualified names still resolve in the default one.
    fn close_schema(&self) {
        self.resolve_in(DEFAULT_SCHEMA, false);
    }

    /// Unqualified tables and scripts resolve in `name` from now on; `open`: it is the open schema.
    fn resolve_in(&self, name: &str, open: bool) {
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state.config_mut().options_mut().catalog.default_schema = name.to_string();
        self.scripts.set_current_schema(name, open);
    }

    /// Before a `DROP SCHEMA`: without CASCADE, a schema holding scripts stays; with it, a
    /// restricted session may not drop them.
    fn check_schema_change(&self, change: &SchemaChange) -> Result<()> {
        let SchemaChange::Drop { names, cascade } = change else {
            return Ok(());
        };
        for name in names {
            let scripts = self.engine.scripts().scripts_in(name);
            if scripts.is_empty() {
                continue;
            }
            if !cascade {
                return Err(schema_has_scripts(name, &scripts));
            }
            let grants = self.identity.grants();
            let owners: Vec<Option<String>> = self
                .engine
                .scripts()
                .entries()
                .iter()
                .filter(|e| &e.schema == name)
                .map(|e| e.owner.clone())
                .collect();
            grants
                .check(|h, as_owner| {
                    h.has(SystemPrivilege::DropAnyScript)
                        || (as_owner && owners.iter().all(|o| grants.owns(o.as_deref())))
                })
                .map_err(|d| {
                    privileges::refusal(
                        d,
                        &format!(
                            "DROP SCHEMA {name} CASCADE would drop its scripts ({})",
                            scripts.join(", ")
                        ),
                        "owning them, or the DROP ANY SCRIPT privilege",
                    )
                })?;
        }
        Ok(())
    }

    /// After a schema statement succeeded: a created schema becomes current; a dropped one takes
    /// its scripts with it (CASCADE) and, if it was current, the default schema is current again.
    fn apply_schema_change(&self, change: SchemaChange) -> Result<()> {
        match change {
            SchemaChange::Create(name) => self.set_current_schema(&name),
            SchemaChange::Drop { names, cascade } => {
                let current = self.current_schema();
                for name in names {
                    if cascade {
                        self.engine.scripts().drop_schema_scripts(&name)?;
                    }
                    if name == current {
                        self.close_schema();
                    }
                }
            }
        }
        Ok(())
    }

    /// Registers scripts created (or dropped) since the last statement, by any session.
    fn sync_scripts(&self) {
        self.scripts
            .sync(&self.ctx, self.engine.scripts(), &|ctx, udf| match udf {
                ScriptUdf::Scalar(def) => {
                    ctx.register_udf(ScalarUDF::new_from_impl(AccelScalarUdf::new(Arc::new(def))))
                }
                ScriptUdf::Set(def) => register_set_udf(ctx, Arc::new(def)),
            });
    }

    /// The field an `ALTER TABLE … ADD [COLUMN]` adds, planned as a `CREATE TABLE` of that
    /// one column would plan it (the Exasol dialect's declared type kept); `None` for other
    /// changes.
    async fn added_column(
        &self,
        alter: &datafusion::sql::sqlparser::ast::AlterTable,
        state: &SessionState,
        exasol: bool,
    ) -> Result<Option<datafusion::arrow::datatypes::Field>> {
        use datafusion::sql::sqlparser::ast::AlterTableOperation;
        let [AlterTableOperation::AddColumn { column_def, .. }] = alter.operations.as_slice()
        else {
            return Ok(None);
        };
        let text = format!("CREATE TABLE accelsql_added_column ({column_def})");
        let Some(statement) = self.parse(&text)?.pop_front() else {
            return Ok(None);
        };
        let declared = if exasol {
            super::passes::exasol_types::declared_column_types(&statement)
        } else {
            Vec::new()
        };
        let plan = state.statement_to_plan(statement).await?;
        let plan = with_declared_types(plan, &declared)?;
        let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) = plan else {
            return Ok(None);
        };
        Ok(c.input
            .schema()
            .fields()
            .first()
            .map(|f| f.as_ref().clone()))
    }

    /// Parses `text` in the session's current SQL dialect.
    fn parse(&self, text: &str) -> Result<VecDeque<DfStatement>> {
        let config = self.ctx.copied_config();
        let options = config.options();
        let name = &options.sql_parser.dialect;
        let dialect = dialect_from_str(name).ok_or_else(|| {
            EngineError::Sql(DataFusionError::Plan(format!(
                "unsupported SQL dialect: {name}"
            )))
        })?;
        Ok(DFParserBuilder::new(text)
            .with_dialect(dialect.as_ref())
            .with_recursion_limit(options.sql_parser.recursion_limit.get())
            .build()?
            .parse_statements()?)
    }

    /// `RESET accelsql.<name>`: DataFusion resets only its own namespaces.
    fn reset_own_setting(&self, statement: &DfStatement) -> Option<Result<()>> {
        let DfStatement::Reset(ResetStatement::Variable(name)) = statement else {
            return None;
        };
        let name = name.to_string().to_ascii_lowercase();
        let key = name.strip_prefix("accelsql.")?.to_string();
        if let Err(e) = privileges::check_setting(
            &name,
            None,
            &AccelsqlOptions::default(),
            &self.identity.grants(),
        ) {
            return Some(Err(e));
        }
        let state = self.ctx.state_ref();
        let mut state = state.write();
        let options = state.config_mut().options_mut();
        Some(match options.extensions.get_mut::<AccelsqlOptions>() {
            Some(own) => own.reset_to(
                &key,
                &AccelsqlOptions::for_session(
                    self.engine.state().statement_timeout,
                    self.engine.state().session_memory_limit,
                    self.engine.state().sql_dialect,
                ),
            ),
            None => Ok(()),
        })
    }

    /// Plans and starts one statement; `extra` are UDFs for this statement only (call-site
    /// EMITS).
    async fn execute(
        &self,
        statement: DfStatement,
        extra: &[ScriptUdf],
        params: &[ScalarValue],
    ) -> Result<(SendableRecordBatchStream, ResultShape)> {
        self.sync_scripts();
        if let Some(reset) = self.reset_own_setting(&statement) {
            reset?;
            return Ok((empty_stream()?, ResultShape::SINGLE));
        }
        let mut state = self.ctx.state();
        for udf in extra {
            match as_functions(udf) {
                Function::Scalar(f) => {
                    state.register_udf(Arc::new(f))?;
                }
                Function::Aggregate(f) => {
                    state.register_udaf(Arc::new(f))?;
                }
            }
        }
        let own = state
            .config_options()
            .extensions
            .get::<AccelsqlOptions>()
            .cloned()
            .unwrap_or_default();
        let exasol = own.sql_dialect == SqlDialect::Exasol;
        if exasol {
            // Exasol's exact literals: `1.5` is a DECIMAL, up to 36 digits.
            state
                .config_mut()
                .options_mut()
                .sql_parser
                .parse_float_as_decimal = true;
        }
        let current = self.scripts.current_schema();
        let scripts = self.engine.scripts().entries();
        let values = self.session_values(&state);
        let emits_udf = |name: &str| emits_udf(&state, name);
        let has_table = |name: &str| self.ctx.table_exist(name).unwrap_or(false);
        let passes = PassContext {
            scripts: &scripts,
            names: NameScope {
                current: &current,
                builtins: self.scripts.builtins(),
                exasol,
            },
            emits_udf: &emits_udf,
            values: &values,
            has_table: &has_table,
            exasol,
        };
        let mut rewritten = rewrite_names(statement, &passes)?;
        let engine = self.engine.state();
        let id = engine.next_statement_id();
        self.last_statement.store(id, Ordering::Release);
        // On a cluster the calls are placed for the nodes' devices, not this process's.
        let devices_present = engine
            .distributor
            .as_ref()
            .and_then(|d| d.devices_per_node())
            .unwrap_or(engine.devices.len());
        engine.owners.record(
            id,
            StatementOwner {
                session: self.identity.id,
                user: self.identity.user(),
                text: rewritten.label.clone(),
            },
        );
        let grants = self.identity.grants();
        let group = grants.group.as_ref();
        // Each limit is the smallest of the session's (which starts at the server's) and its
        // user's consumer group's.
        let memory_limit = smallest(
            own.memory_limit()?,
            group.and_then(|g| g.session_ram_limit).map(|b| b as usize),
        );
        let statement_timeout = smallest(
            own.statement_timeout()?,
            group.and_then(|g| g.query_timeout()),
        );
        let mut scope = StatementScope::new(id, devices_present);
        scope.session = self.identity.id;
        scope.node_id = engine.node.id;
        scope.client = engine.id;
        scope.run_timeout = own.udf_timeout()?;
        // The session's budget as this statement sees it bounds each of its script workers.
        scope.memory_limit = memory_limit.map(|b| b as u64);
        scope.optional_when_busy = own.optional_gpu_when_busy;
        scope.user = (grants.user != SYS_USER).then(|| grants.user.clone());
        scope.gpu_class = group.map(crate::core::groups::GpuClass::of);
        scope.client_hold = engine.max_lease_hold;
        scope.gpu_allowed = grants.has(SystemPrivilege::UseGpu);
        let scope = Arc::new(scope);
        rewritten.bind(&passes)?;
        let declared_types = std::mem::take(&mut rewritten.declared_types);
        let statement = rewritten.statement;
        if let DfStatement::Statement(inner) = &statement
            && let datafusion::sql::sqlparser::ast::Statement::AlterTable(alter) = inner.as_ref()
            && self.table_store().is_some()
        {
            let added = self.added_column(alter, &state, exasol).await?;
            let stream = self.alter_table(alter, added, &grants).await?;
            return Ok((stream, ResultShape::SINGLE));
        }
        state.add_analyzer_rule(Arc::new(PlacementRule::new(Arc::clone(&scope))));
        if exasol {
            state.add_analyzer_rule(Arc::new(ExasolBooleans));
            state.add_analyzer_rule(Arc::new(EmptyStringsAreNull));
            state.register_expr_planner(Arc::new(StringsInArithmetic))?;
        }
        let schema_change = schema_change(&statement)
            .filter(|c| own.create_schema_opens || !matches!(c, SchemaChange::Create(_)));
        let upper_case = own.identifier_case == IdentifierCase::Upper;
        let described_query = exasol.then(|| described_query(&statement)).flatten();
        let mut plan = match state.statement_to_plan(statement).await {
            Ok(plan) => plan,
            Err(e) if exasol => return Err(exasol_plan_error(e).into()),
            Err(e) => return Err(e.into()),
        };
        if let (LogicalPlan::DescribeTable(describe), Some(query)) = (&mut plan, described_query) {
            // `DESCRIBE SELECT …` shows the types the query's columns have once analyzed
            // (a literal 'abc' is CHAR(3) ASCII), as its result would carry them.
            let query = state.statement_to_plan(query).await?;
            let analyzed =
                state
                    .analyzer()
                    .execute_and_check(query, state.config_options(), |_, _| {})?;
            describe.schema = Arc::new(analyzed.schema().as_arrow().clone());
        }
        if !grants.is_all() {
            privileges::check_plan(
                &plan,
                &grants,
                &own,
                &self.script_functions(&scripts),
                engine.data_dir.as_deref(),
            )?;
        }
        if !params.is_empty() {
            let params = params_as_planned(&plan, params)?;
            plan = plan.with_param_values(params)?;
        }
        // The Exasol dialect keeps declared types (`VARCHAR(10)`) as field metadata; the
        // default dialect's plans stay DataFusion's (whose EXPLAIN and recursive queries show
        // and compare field metadata).
        let plan = if exasol {
            with_declared_types(plan, &declared_types)?
        } else {
            plan
        };
        if !grants.is_all() {
            self.check_table_access(&plan, &grants).await?;
        }
        if is_table_ddl(&plan) {
            self.commit_before_ddl().await?;
        }
        let mut plan = dml_without_subqueries(plan, &state).await?;
        if dml_never_matches(&plan)? {
            return Ok((count_stream(0)?, ResultShape::SINGLE));
        }
        if let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(c)) = &plan
            && c.file_type.eq_ignore_ascii_case("delta")
        {
            self.attach_delta(c).await?;
            return Ok((empty_stream()?, ResultShape::SINGLE));
        }
        // CREATE TABLE in the engine's store, or a temporary one: made here, from the rows of
        // its query (run as this statement's query).
        let temporary = self.next_temporary.swap(false, Ordering::AcqRel);
        let mut made_here: Option<(CreateMemoryTable, Option<ResolvedTableReference>)> = None;
        if let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) = &plan {
            let target = if temporary {
                None
            } else {
                self.stored_target(c)
            };
            if temporary || target.is_some() {
                if Self::creates_empty(c) {
                    let columns = Arc::new(c.input.schema().as_arrow().clone());
                    match &target {
                        Some(target) => {
                            self.create_stored(c, target, columns, None, &grants)
                                .await?
                        }
                        None => self.create_temporary(c, columns, Vec::new())?,
                    }
                    return Ok((empty_stream()?, ResultShape::SINGLE));
                }
                made_here = Some((c.clone(), target));
                plan = c.input.as_ref().clone();
            }
        }
        // A CTAS's query runs as a query of this statement; the table is made from its rows.
        let exists = match &plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                self.ctx.table_exist(c.name.clone())?
            }
            _ => false,
        };
        let ctas = ctas_query(&plan, exists, exasol);
        if let Some((_, query)) = &ctas {
            plan = query.clone();
        }
        let plan = insert_with_table_fields(truncate_as_delete(plan))?;
        let batch_size = state.config().batch_size();
        match &plan {
            // DDL and SET change the session: they go through the context.
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                if let Some(change) = &schema_change {
                    self.check_schema_change(change)?;
                }
                let created = match &plan {
                    LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                        self.created_in_memory(c, &grants);
                        Some(c.name.clone())
                    }
                    _ => None,
                };
                let stream = if let LogicalPlan::Ddl(DdlStatement::DropCatalogSchema(drop)) = &plan
                {
                    use datafusion::catalog::CatalogProvider;
                    let name = drop.name.schema_name();
                    if self
                        .catalog
                        .deregister_schema(name, drop.cascade)?
                        .is_none()
                        && !drop.if_exists
                    {
                        return Err(EngineError::Sql(DataFusionError::Execution(format!(
                            "Schema '{}' doesn't exist.",
                            drop.name
                        ))));
                    }
                    empty_stream()?
                } else {
                    self.ctx
                        .execute_logical_plan(plan)
                        .await?
                        .execute_stream()
                        .await?
                };
                if let Some(change) = schema_change {
                    self.apply_schema_change(change)?;
                }
                if let Some(table) = created {
                    if let Ok(table) = self.ctx.table_provider(table).await {
                        compact_table(&table, batch_size).await?;
                    }
                }
                return Ok((stream, ResultShape::SINGLE));
            }
            LogicalPlan::Explain(_) => {
                let df = DataFrame::new(state, plan);
                let task = Arc::new(df.task_ctx());
                let physical = df.create_physical_plan().await?;
                // EXPLAIN reports analyzer failures as plan text; a placement failure still
                // fails the statement, as running it would.
                if let Some(e) = scope.placement_failure() {
                    return Err(e);
                }
                let schema = physical.schema();
                let mut batches: Vec<RecordBatch> =
                    execute_stream(physical, task)?.try_collect().await?;
                batches.push(placement_rows(&schema, &scope)?);
                let stream = Box::pin(MemoryStream::try_new(batches, schema, None)?);
                return Ok((stream, ResultShape::SINGLE));
            }
            _ => {}
        }
        let wait_timeout = own.gpu_wait_timeout()?.or(engine.default_wait_timeout);
        self.memory.set_budget(memory_limit);
        engine.spill.bound_statement(self.identity.id, &grants.user);
        // A group's USER_ and GROUP_TEMP_DB_RAM_LIMIT: budgets its users' sessions share.
        if let Some(group) = group {
            self.memory.set_shared(vec![
                engine
                    .shared_budgets
                    .get(&format!("user {}", grants.user), group.user_ram_limit),
                engine.shared_budgets.get(
                    &format!("consumer group {}", group.name),
                    group.group_ram_limit,
                ),
            ]);
        }
        let is_analyze = matches!(plan, LogicalPlan::Analyze(_));
        // A write runs to its end before the statement returns: its effect must not depend on
        // the client reading the count (a client that moves on to its next statement drops an
        // unread result).
        let is_write = matches!(plan, LogicalPlan::Dml(_));
        let described = match &plan {
            LogicalPlan::DescribeTable(d) => Some(Arc::clone(&d.schema)),
            _ => None,
        };
        // A memory table that INSERTs leave in many small batches is compacted after each (the
        // plan holds the table it writes to).
        let insert_target = match &plan {
            LogicalPlan::Dml(DmlStatement {
                target,
                op: WriteOp::Insert(_),
                ..
            }) => source_as_provider(target).ok(),
            _ => None,
        };
        let ordered = asks_for_order(&plan);
        // Writes (INSERT into this session's tables, COPY TO) change this process's state:
        // they run here; queries go to the distributor, if any.
        let distribute = !matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Copy(_));
        let df = DataFrame::new(state, plan);
        let task = Arc::new(df.task_ctx());
        let mut physical = df.create_physical_plan().await?;
        if let (Some(distributor), true) = (&engine.distributor, distribute) {
            let distributed = distributor.distribute(Arc::clone(&physical), &task)?;
            if !Arc::ptr_eq(&distributed, &physical) {
                scope.remote.store(true, Ordering::Release);
            }
            physical = distributed;
        }
        let shape = ResultShape {
            ordered,
            partitions: physical.properties().partitioning.partition_count().max(1),
        };
        let mut stream = StatementStream::start(
            Arc::clone(engine),
            scope,
            physical,
            task,
            wait_timeout,
            statement_timeout,
            Some(Arc::clone(&self.identity.kill)),
        )?;
        if is_analyze {
            stream = stream.with_call_report();
        }
        if let Some((create, target)) = made_here {
            let stream: SendableRecordBatchStream = Box::pin(stream);
            let stream = if exasol { exasol_rows(stream) } else { stream };
            let columns = stream.schema();
            match target {
                Some(target) => {
                    self.create_stored(&create, &target, columns, Some(stream), &grants)
                        .await?
                }
                None => {
                    let rows = Self::collect(stream).await?;
                    self.create_temporary(&create, columns, rows)?
                }
            }
            return Ok((empty_stream()?, ResultShape::SINGLE));
        }
        if let Some((create, _)) = ctas {
            let name = create.name.clone();
            let schema = RecordBatchStream::schema(&stream);
            let mut rows: Vec<RecordBatch> = stream.try_collect().await?;
            let schema = if exasol {
                // What the plan left of the empty strings (an aggregate's, an EMITS call's).
                let schema = nullable_strings(&schema);
                rows = rows
                    .iter()
                    .map(|b| empty_strings_as_null(b, &schema))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(DataFusionError::from)?;
                schema
            } else {
                schema
            };
            let create = ctas_with_rows(create, schema, rows)?;
            self.ctx
                .execute_logical_plan(create)
                .await?
                .collect()
                .await?;
            if let Ok(table) = self.ctx.table_provider(name).await {
                compact_table(&table, batch_size).await?;
            }
            return Ok((empty_stream()?, ResultShape::SINGLE));
        }
        let stream: SendableRecordBatchStream = match &insert_target {
            Some(table) => compact_after(Box::pin(stream), table, batch_size),
            None => Box::pin(stream),
        };
        let stream: SendableRecordBatchStream = if is_write {
            let schema = stream.schema();
            let batches: Vec<RecordBatch> = stream.try_collect().await?;
            Box::pin(MemoryStream::try_new(batches, schema, None)?)
        } else {
            stream
        };
        let stream: SendableRecordBatchStream = match rewritten
            .output
            .rename(&stream.schema(), upper_case && !exasol)
        {
            Some(schema) => with_schema(stream, schema),
            None => stream,
        };
        if exasol {
            return Ok((exasol_result(stream, described), shape));
        }
        Ok((stream, shape))
    }
}

/// How a statement's result may be split among readers: a server offers an unordered query's
/// result as several endpoints, read at once; an ordered one as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultShape {
    /// The statement asked for an order (ORDER BY): one reader reads every row, in order.
    pub ordered: bool,
    /// The partitions the plan produces its result in (1 for anything but a query).
    pub partitions: usize,
}

impl ResultShape {
    /// One unordered stream: statements other than queries, and results built whole.
    pub const SINGLE: Self = Self {
        ordered: false,
        partitions: 1,
    };
}

/// Whether the query asks for its rows in an order (`ORDER BY` at its top, under projections,
/// limits and aliases). Rows that merely happen to be sorted (a sorted source) do not count.
fn asks_for_order(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Projection(p) => asks_for_order(&p.input),
        LogicalPlan::Limit(l) => asks_for_order(&l.input),
        LogicalPlan::SubqueryAlias(a) => asks_for_order(&a.input),
        _ => false,
    }
}

/// The smaller of two optional bounds (`None`: no bound).
fn smallest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The EMITS UDF registered in `state` under `name`, if any.
fn emits_udf(state: &SessionState, name: &str) -> Option<Arc<SetUdf>> {
    if let Some(def) = state.scalar_functions().get(name).and_then(|f| emits_of(f)) {
        return Some(Arc::clone(def));
    }
    state
        .aggregate_functions()
        .get(name)
        .and_then(|f| emits_of_aggregate(f))
        .map(Arc::clone)
}

/// A UDF as DataFusion registers it.
enum Function {
    Scalar(ScalarUDF),
    Aggregate(AggregateUDF),
}

/// The DataFusion function of a set or EMITS UDF: an aggregate (SET RETURNS), or an EMITS
/// placeholder (aggregate for SET, scalar for SCALAR).
fn set_function(def: Arc<SetUdf>) -> Result<Function> {
    Ok(match (def.input_type(), def.output()) {
        (InputType::Set, Output::Returns(_)) => {
            Function::Aggregate(AggregateUDF::new_from_impl(AccelAggregateUdf::new(def)?))
        }
        (InputType::Set, Output::Emits(_)) => {
            Function::Aggregate(AggregateUDF::new_from_impl(EmitsAggregate::new(def)))
        }
        (InputType::Scalar, _) => Function::Scalar(ScalarUDF::new_from_impl(EmitsScalar::new(def))),
    })
}

/// The DataFusion function of a script.
fn as_functions(udf: &ScriptUdf) -> Function {
    match udf {
        ScriptUdf::Scalar(def) => Function::Scalar(ScalarUDF::new_from_impl(AccelScalarUdf::new(
            Arc::new(def.clone()),
        ))),
        ScriptUdf::Set(def) => match set_function(Arc::new(def.clone())) {
            Ok(f) => f,
            // Only SET RETURNS can fail, and only for a definition that is not one.
            Err(_) => Function::Scalar(ScalarUDF::new_from_impl(EmitsScalar::new(Arc::new(
                def.clone(),
            )))),
        },
    }
}

/// Registers a set or EMITS UDF in `ctx` as its kind asks.
fn register_set_udf(ctx: &SessionContext, def: Arc<SetUdf>) {
    match set_function(def) {
        Ok(Function::Scalar(f)) => ctx.register_udf(f),
        Ok(Function::Aggregate(f)) => ctx.register_udaf(f),
        Err(e) => log::error!("UDF unavailable in this session: {e}"),
    }
}

/// Every function name `ctx` has: DataFusion's, accelsql's built-ins, the engine's Rust UDFs.
fn function_names(ctx: &SessionContext) -> std::collections::HashSet<String> {
    let state = ctx.state_ref();
    let state = state.read();
    state
        .scalar_functions()
        .keys()
        .chain(state.aggregate_functions().keys())
        .chain(state.window_functions().keys())
        .cloned()
        .collect()
}

/// The EXPLAIN rows that show each call's placement and why.
fn placement_rows(schema: &SchemaRef, scope: &StatementScope) -> Result<RecordBatch> {
    let calls = scope.calls();
    let text = if calls.is_empty() {
        "no accelsql UDF calls".to_string()
    } else {
        calls
            .iter()
            .map(|c| c.decision.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let columns = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let value = if i == 0 {
                "gpu_placement"
            } else {
                text.as_str()
            };
            Arc::new(StringArray::from(vec![value])) as _
        })
        .collect();
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| EngineError::Sql(e.into()))
}

impl Session {
    /// Every function name that calls a script (qualified, and plain where the plain name is
    /// the script's), for the privilege checks.
    fn script_functions(
        &self,
        entries: &[Arc<crate::udf::script::definition::ScriptEntry>],
    ) -> std::collections::HashMap<String, ScriptRef> {
        let current = self.current_schema();
        let builtins = self.scripts.builtins();
        let mut out = std::collections::HashMap::new();
        for e in entries {
            let script = super::scripts::languages::script_ref(e);
            out.insert(
                crate::udf::script::names::qualified_function(&e.schema, &e.name),
                script.clone(),
            );
            if !builtins.contains(&e.name)
                && crate::udf::script::names::owns_plain_name(e, entries, &current)
            {
                out.insert(e.name.clone(), script);
            }
        }
        out
    }

    /// The session's accelsql settings.
    pub(crate) fn accelsql_options(&self) -> AccelsqlOptions {
        self.context()
            .state_ref()
            .read()
            .config_options()
            .extensions
            .get::<AccelsqlOptions>()
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl SqlRunner for Session {
    async fn run_sql(&self, sql: &str) -> Result<SendableRecordBatchStream> {
        Box::pin(self.sql_stream(sql)).await
    }
}

/// A session's place at its node's GPU lease ([`Session::gpu_lease_place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeasePlace {
    /// It holds the lease: its statement uses `devices` of the node's GPUs (all of them, or
    /// under memory sharing those it reserved memory on).
    Holding {
        /// How many GPUs the lease uses.
        devices: usize,
    },
    /// It waits, `ahead` statements before it; `blocked_on`: its turn has come, but a device
    /// is locked by another process.
    Waiting {
        /// Statements served before it.
        ahead: usize,
        /// The device another process holds, when that is what it waits for.
        blocked_on: Option<String>,
    },
}

/// `params` cast to the types the plan infers for its placeholders (`$1` in `INSERT INTO t
/// VALUES ($1)` is the column's type): DataFusion binds a value as it comes, and a `VALUES` row
/// whose value's type differs from its column's (a `Utf8` string for a `Utf8View` column) read
/// back wrong (as `''`). A value that cannot be cast is bound as it is (DataFusion then says why).
fn params_as_planned(plan: &LogicalPlan, params: &[ScalarValue]) -> Result<Vec<ScalarValue>> {
    let types = plan.get_parameter_types()?;
    Ok(params
        .iter()
        .enumerate()
        .map(|(i, value)| match types.get(&format!("${}", i + 1)) {
            Some(Some(wanted)) if wanted != &value.data_type() => {
                value.cast_to(wanted).unwrap_or_else(|_| value.clone())
            }
            _ => value.clone(),
        })
        .collect())
}

/// The query of a `DESCRIBE SELECT …` statement, as a statement of its own.
fn described_query(statement: &DfStatement) -> Option<DfStatement> {
    use datafusion::sql::sqlparser::ast::{DescribeAlias, Statement};
    let DfStatement::Statement(inner) = statement else {
        return None;
    };
    match inner.as_ref() {
        Statement::Explain {
            describe_alias: DescribeAlias::Describe | DescribeAlias::Desc,
            statement,
            ..
        } if matches!(statement.as_ref(), Statement::Query(_)) => {
            Some(DfStatement::Statement(statement.clone()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of `sql`'s result in a session planning `partitions` partitions.
    async fn shape(sql: &str, partitions: usize) -> ResultShape {
        let session = crate::Engine::new().unwrap().session();
        let set = format!("SET datafusion.execution.target_partitions = {partitions}");
        session.sql(&set).await.unwrap();
        let (stream, shape) = session.sql_stream_shaped(sql, &[]).await.unwrap();
        drop(stream);
        shape
    }

    #[tokio::test]
    async fn a_result_is_ordered_only_when_the_query_asks_and_spans_its_plans_partitions() {
        let spread = "SELECT value FROM generate_series(1, 100000) WHERE value % 7 <> 0";
        // A sorted source is not an order the query asked for, nor is a subquery's ORDER BY
        // (SQL promises the outer query's rows no order).
        let unordered = shape(spread, 4).await;
        assert_eq!(
            unordered,
            ResultShape {
                ordered: false,
                partitions: 4
            }
        );
        for asked in [
            format!("{spread} ORDER BY value DESC"),
            format!("SELECT * FROM ({spread}) AS t ORDER BY value LIMIT 5"),
        ] {
            let ordered = shape(&asked, 4).await;
            assert!(ordered.ordered, "{asked}: {ordered:?}");
            assert_eq!(ordered.partitions, 1, "{asked}");
        }
        assert_eq!(shape("SELECT 1", 4).await.partitions, 1);
        assert_eq!(
            shape("CREATE TABLE t AS SELECT 1 AS a", 4).await,
            ResultShape::SINGLE
        );
    }
}
