//! A [`Session`]: one connection's state (its settings, identity, memory budget, transaction,
//! temporary tables and scripts) and the entry points that run SQL in it (`sql`, `sql_stream`,
//! with parameters, shaped); running the statements is [`execute`](super::execute)'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::ScalarUDF;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;

use super::engine::Engine;
use super::functions::{function_names, register_set_udf};
use super::results::ResultShape;
use super::scripts::languages::SessionScripts;
use crate::catalog::files::enable_url_tables;
use crate::core::error::Result;
use crate::core::memory::{SessionPool, session_runtime};
use crate::core::options::AccelsqlOptions;
use crate::core::owners::SessionIdentity;
use crate::core::privileges::Grants;
use crate::definition_err;
use crate::exec::planner::AccelQueryPlanner;
use crate::plan::rules::{RuleSet, analyzer_rules};
use crate::udf::node_functions::node_functions;
use crate::udf::script::udf::ScriptUdf;
use crate::udf::sized::bound_growing_functions;
use crate::udf::{AccelScalarUdf, ScalarUdf, as_accel_udf};

/// One connection: its own settings and tables, the engine's GPUs and UDFs.
pub struct Session {
    pub(super) engine: Engine,
    pub(super) ctx: SessionContext,
    pub(super) scripts: SessionScripts,
    /// Set once by [`Session::restrict`] (or from birth), never cleared; shared with the file
    /// table factory.
    pub(super) restricted: Arc<AtomicBool>,
    /// The id of the statement this session started last (0: none yet).
    pub(super) last_statement: std::sync::atomic::AtomicU64,
    /// Its number, user and right to see other sessions' SQL (also a config extension).
    pub(super) identity: Arc<SessionIdentity>,
    /// Its memory budget within the engine's pool (`accelsql.memory_limit`).
    pub(super) memory: Arc<SessionPool>,
    /// Its transaction: the versions its statements read, its uncommitted writes (also a
    /// config extension, where the tables find it).
    pub(super) txn: Arc<accelsql_storage::Transaction>,
    /// Its temporary tables (`CREATE TEMPORARY TABLE`).
    pub(super) temporary: Arc<crate::catalog::session_tables::TemporaryTables>,
    /// Its catalog as registered (DataFusion's file-table wrapper around it cannot drop a
    /// schema: `DROP SCHEMA` goes here).
    pub(super) catalog: Arc<crate::catalog::session_tables::SessionCatalog>,
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

impl Session {
    pub(super) fn new(engine: Engine) -> Self {
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
        for rule in analyzer_rules(RuleSet::Session) {
            ctx.add_analyzer_rule(rule);
        }
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

    /// Registers scripts created (or dropped) since the last statement, by any session.
    pub(super) fn sync_scripts(&self) {
        self.scripts
            .sync(&self.ctx, self.engine.scripts(), &|ctx, udf| match udf {
                ScriptUdf::Scalar(def) => {
                    ctx.register_udf(ScalarUDF::new_from_impl(AccelScalarUdf::new(Arc::new(def))))
                }
                ScriptUdf::Set(def) => register_set_udf(ctx, Arc::new(def)),
            });
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
