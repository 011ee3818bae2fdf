//! Running a session's text: its statements one after another, each classified, planned and
//! started under its GPU lease.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{
    ResolvedTableReference, ScalarValue, exec_datafusion_err, plan_datafusion_err,
};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::source_as_provider;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::{FunctionRegistry, RecordBatchStream};
use datafusion::logical_expr::{
    CreateMemoryTable, DdlStatement, DmlStatement, LogicalPlan, WriteOp,
};
use datafusion::physical_plan::execute_stream;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::sql::parser::{DFParserBuilder, ResetStatement, Statement as DfStatement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use futures::TryStreamExt;

use super::compact::{compact_after, compact_table};
use super::exasol::dialect::{exasol_plan_error, exasol_result, exasol_text};
use super::exasol::schemas::{SchemaChange, schema_change};
use super::exasol::text::rewrite_exasol_text;
use super::functions::{Function, as_functions, emits_udf};
use super::passes::exasol_functions::SessionValues;
use super::passes::script_calls::NameScope;
use super::passes::{OutputNames, PassContext, Rewritten, rewrite_names};
use super::privileges::{self, ScriptRef};
use super::results::{ResultShape, empty_stream, with_schema};
use super::session::Session;
use super::splitter::split_statements;
use super::statements::StatementKind;
use super::tables::{exasol_rows, is_table_ddl, rewrite_table_text};
use super::writes::{
    count_stream, ctas_query, ctas_with_rows, dml_never_matches, dml_without_subqueries,
    insert_with_table_fields, truncate_as_delete, with_declared_types,
};
use crate::core::error::{EngineError, Result};
use crate::core::groups::ConsumerGroup;
use crate::core::names::exasol_name;
use crate::core::options::{AccelsqlOptions, IdentifierCase, SqlDialect};
use crate::core::owners::StatementOwner;
use crate::core::privileges::{Grants, SYS_USER, SystemPrivilege};
use crate::exec::stream::StatementStream;
use crate::plan::empty_strings::{empty_strings_as_null, nullable_strings};
use crate::plan::rules::{RuleSet, analyzer_rules};
use crate::plan::statement::StatementScope;
use crate::plan::string_arithmetic::StringsInArithmetic;
use crate::udf::script::udf::ScriptUdf;

impl Session {
    /// The statements of `text`, run one after another (see [`Session::sql_stream_shaped`]):
    /// each is classified ([`StatementKind`]) and run by its kind's step; the last one's result
    /// is the result, the others' are read to their ends.
    pub(super) async fn run_statements(
        &self,
        text: &str,
        params: &[ScalarValue],
    ) -> Result<(SendableRecordBatchStream, ResultShape)> {
        self.check_not_killed()?;
        let limit = self.engine.state().max_statement_depth;
        if let Some(depth) = super::depth::statement_depth(text)
            && depth > limit
        {
            return Err(EngineError::StatementTooComplex { depth, limit });
        }
        let pieces = split_statements(text);
        let mut last_stream = None;
        for (i, piece) in pieces.iter().enumerate() {
            let is_last_piece = i + 1 == pieces.len();
            self.check_not_killed()?;
            let grants = self.refresh_grants();
            self.txn.begin_statement();
            self.txn.set_user(Some(
                self.identity
                    .user()
                    .unwrap_or_else(|| self.identity.account()),
            ));
            let exasol = self.accelsql_options().sql_dialect == SqlDialect::Exasol;
            let stream = match StatementKind::of(&piece.text, exasol)? {
                StatementKind::ScriptDdl => {
                    self.run_script_ddl(&piece.text, &grants)?;
                    None
                }
                StatementKind::Security(statement) => {
                    self.run_security(statement, &grants).await?;
                    None
                }
                StatementKind::Exasol(statement) => {
                    self.check_connection_change(&statement, &grants)?;
                    Some(self.run_exasol(statement).await?)
                }
                StatementKind::Table(statement) => {
                    Some(self.run_table_statement(statement, &grants).await?)
                }
                StatementKind::Sql => {
                    let last_params = is_last_piece.then_some(params);
                    if let Some(result) =
                        self.run_sql_text(&piece.text, exasol, last_params).await?
                    {
                        last_stream = Some(result);
                    }
                    continue;
                }
            };
            match stream {
                _ if is_last_piece => {
                    let stream = match stream {
                        Some(stream) => stream,
                        None => empty_stream()?,
                    };
                    last_stream = Some((stream, ResultShape::SINGLE));
                }
                Some(stream) => {
                    stream.try_collect::<Vec<_>>().await?;
                }
                None => {}
            }
        }
        last_stream.ok_or_else(|| plan_datafusion_err!("no SQL statement given").into())
    }

    /// 57014 once the session was killed (`KILL SESSION`, a dropped user).
    fn check_not_killed(&self) -> Result<()> {
        if self.identity.kill.is_killed() {
            return Err(EngineError::SessionKilled {
                session: self.identity.id,
            });
        }
        Ok(())
    }

    /// Runs SQL text for DataFusion: the front end's text rewrites (sub-select IMPORTs, the
    /// Exasol dialect's names, `CREATE TEMPORARY`, call-site EMITS), then each statement it
    /// parses into. `last`: this is the session's last statement, with its parameters; its
    /// result is returned, other results are read to their ends.
    async fn run_sql_text(
        &self,
        text: &str,
        exasol: bool,
        last: Option<&[ScalarValue]>,
    ) -> Result<Option<(SendableRecordBatchStream, ResultShape)>> {
        let text = self.expand_import_subselects(text).await?;
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
        let last_statement = match last {
            Some(params) => statements.pop_back().map(|s| (s, params)),
            None => None,
        };
        for statement in statements {
            let (stream, _) = self.execute(statement, &extra, &[]).await?;
            stream.try_collect::<Vec<_>>().await?;
        }
        match last_statement {
            Some((statement, params)) => Ok(Some(self.execute(statement, &extra, params).await?)),
            None => Ok(None),
        }
    }

    /// For `INSERT INTO t [(cols)] …`: the target's columns (those listed, or all) as (name, SQL
    /// type), which an `EMITS (...)` call without an EMITS list emits, as in Exasol. `None` for
    /// other statements, or when `t` is unknown (planning then says so).
    pub(super) async fn insert_target_columns(&self, text: &str) -> Option<Vec<(String, String)>> {
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

    /// What Exasol's niladic functions (`SESSIONTIMEZONE`, `CURRENT_SCHEMA`, …) say now.
    pub(super) fn session_values(&self, state: &SessionState) -> SessionValues {
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

    /// The field an `ALTER TABLE … ADD [COLUMN]` adds, planned as a `CREATE TABLE` of that
    /// one column would plan it (the Exasol dialect's declared type kept); `None` for other
    /// changes.
    pub(super) async fn added_column(
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
    pub(super) fn parse(&self, text: &str) -> Result<VecDeque<DfStatement>> {
        let config = self.ctx.copied_config();
        let options = config.options();
        let name = &options.sql_parser.dialect;
        let dialect = dialect_from_str(name).ok_or_else(|| {
            EngineError::from(plan_datafusion_err!("unsupported SQL dialect: {name}"))
        })?;
        Ok(DFParserBuilder::new(text)
            .with_dialect(dialect.as_ref())
            .with_recursion_limit(options.sql_parser.recursion_limit.get())
            .build()?
            .parse_statements()?)
    }

    /// `RESET accelsql.<name>`: DataFusion resets only its own namespaces.
    pub(super) fn reset_own_setting(&self, statement: &DfStatement) -> Option<Result<()>> {
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
    /// EMITS). As DataFusion's `execute_logical_plan`: the plan step ([`Session::plan_statement`]),
    /// then one run step per kind of plan ([`Session::run_plan`]).
    pub(super) async fn execute(
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
        match self.plan_statement(statement, extra, params).await? {
            Prepared::AlterTable {
                alter,
                added,
                grants,
            } => {
                let stream = self.alter_table(&alter, added, &grants).await?;
                Ok((stream, ResultShape::SINGLE))
            }
            Prepared::Plan(plan, state, planned) => self.run_plan(plan, *state, *planned).await,
        }
    }

    /// The plan step: the statement's session state (its own UDFs, the dialect's literals), the
    /// front end's passes, its id and scope, the logical plan with accelsql's analyzer rules,
    /// and the checks a plan must pass before it runs (privileges, parameters, declared types).
    async fn plan_statement(
        &self,
        statement: DfStatement,
        extra: &[ScriptUdf],
        params: &[ScalarValue],
    ) -> Result<Prepared> {
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
        let (mut rewritten, id) = self.rewrite(statement, &state, exasol)?;
        let declared_types = std::mem::take(&mut rewritten.declared_types);
        let statement = rewritten.statement;
        let grants = self.identity.grants();
        if let DfStatement::Statement(inner) = &statement
            && let datafusion::sql::sqlparser::ast::Statement::AlterTable(alter) = inner.as_ref()
            && self.table_store().is_some()
        {
            let added = self.added_column(alter, &state, exasol).await?;
            return Ok(Prepared::AlterTable {
                alter: Box::new(alter.clone()),
                added,
                grants,
            });
        }
        let limits = Limits::of(&own, grants.group.as_ref())?;
        let scope = self.statement_scope(id, &own, &grants, &limits)?;
        for rule in analyzer_rules(RuleSet::Statement {
            scope: &scope,
            exasol,
        }) {
            state.add_analyzer_rule(rule);
        }
        if exasol {
            state.register_expr_planner(Arc::new(StringsInArithmetic))?;
        }
        let schema_change = schema_change(&statement)
            .filter(|c| own.create_schema_opens || !matches!(c, SchemaChange::Create(_)));
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
            let scripts = self.engine.scripts().entries();
            privileges::check_plan(
                &plan,
                &grants,
                &own,
                &self.script_functions(&scripts),
                self.engine.state().data_dir.as_deref(),
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
        let batch_size = state.config().batch_size();
        Ok(Prepared::Plan(
            plan,
            Box::new(state),
            Box::new(Planned {
                batch_size,
                exasol,
                upper_case: own.identifier_case == IdentifierCase::Upper,
                gpu_wait_timeout: own.gpu_wait_timeout()?,
                scope,
                grants,
                limits,
                output: rewritten.output,
                schema_change,
            }),
        ))
    }

    /// The front end's passes over `statement` ([`rewrite_names`], then
    /// [`Rewritten::bind`](super::passes::Rewritten::bind)); between them the statement gets
    /// its id, under its label as the catalog of running statements shows it.
    fn rewrite(
        &self,
        statement: DfStatement,
        state: &SessionState,
        exasol: bool,
    ) -> Result<(Rewritten, u64)> {
        let current = self.scripts.current_schema();
        let scripts = self.engine.scripts().entries();
        let values = self.session_values(state);
        let emits_udf = |name: &str| emits_udf(state, name);
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
        engine.owners.record(
            id,
            StatementOwner {
                session: self.identity.id,
                user: self.identity.user(),
                text: rewritten.label.clone(),
            },
        );
        rewritten.bind(&passes)?;
        Ok((rewritten, id))
    }

    /// The scope statement `id` is planned and run in: the devices its calls are placed for
    /// (on a cluster, a node's), who runs it, and the bounds of its calls.
    fn statement_scope(
        &self,
        id: u64,
        own: &AccelsqlOptions,
        grants: &Grants,
        limits: &Limits,
    ) -> Result<Arc<StatementScope>> {
        let engine = self.engine.state();
        // On a cluster the calls are placed for the nodes' devices, not this process's.
        let devices_present = engine
            .distributor
            .as_ref()
            .and_then(|d| d.devices_per_node())
            .unwrap_or(engine.devices.len());
        let group = grants.group.as_ref();
        let mut scope = StatementScope::new(id, devices_present);
        scope.session = self.identity.id;
        scope.node_id = engine.node.id;
        scope.client = engine.id;
        scope.run_timeout = own.udf_timeout()?;
        // The session's budget as this statement sees it bounds each of its script workers.
        scope.memory_limit = limits.memory.map(|b| b as u64);
        scope.optional_when_busy = own.optional_gpu_when_busy;
        scope.user = (grants.user != SYS_USER).then(|| grants.user.clone());
        scope.gpu_class = group.map(crate::core::groups::GpuClass::of);
        scope.client_hold = engine.max_lease_hold;
        scope.gpu_allowed = grants.has(SystemPrivilege::UseGpu);
        Ok(Arc::new(scope))
    }

    /// The run step: a plan runs by its kind. Table DDL commits first; a DML's sub-queries are
    /// run first; `CREATE TABLE` in the engine's store (or a temporary one) is made here from
    /// its query's rows; DDL and `SET` change the session; EXPLAIN shows placement; the rest is
    /// a query started under the statement's GPU lease ([`Session::run_query`]).
    async fn run_plan(
        &self,
        plan: LogicalPlan,
        state: SessionState,
        planned: Planned,
    ) -> Result<(SendableRecordBatchStream, ResultShape)> {
        let Planned { exasol, grants, .. } = &planned;
        if is_table_ddl(&plan) {
            self.commit_before_ddl().await?;
        }
        let plan = dml_without_subqueries(plan, &state).await?;
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
        if let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) = &plan {
            let target = if temporary {
                None
            } else {
                self.stored_target(c)
            };
            if temporary || target.is_some() {
                let c = c.clone();
                if Self::creates_empty(&c) {
                    let columns = Arc::new(c.input.schema().as_arrow().clone());
                    match &target {
                        Some(target) => {
                            self.create_stored(&c, target, columns, None, grants)
                                .await?
                        }
                        None => self.create_temporary(&c, columns, Vec::new())?,
                    }
                    return Ok((empty_stream()?, ResultShape::SINGLE));
                }
                let query = insert_with_table_fields(truncate_as_delete(c.input.as_ref().clone()))?;
                let (stream, _) = self.run_query(&planned, state, query).await?;
                self.create_from_rows(&c, target, stream, *exasol, grants)
                    .await?;
                return Ok((empty_stream()?, ResultShape::SINGLE));
            }
        }
        // A CTAS's query runs as a query of this statement; the table is made from its rows.
        let exists = match &plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                self.ctx.table_exist(c.name.clone())?
            }
            _ => false,
        };
        if let Some((create, query)) = ctas_query(&plan, exists, *exasol) {
            let query = insert_with_table_fields(truncate_as_delete(query))?;
            let (stream, _) = self.run_query(&planned, state, query).await?;
            self.create_in_memory_from(create, stream, *exasol, planned.batch_size)
                .await?;
            return Ok((empty_stream()?, ResultShape::SINGLE));
        }
        let plan = insert_with_table_fields(truncate_as_delete(plan))?;
        match &plan {
            // DDL and SET change the session: they go through the context.
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                let stream = self.run_session_change(&planned, plan).await?;
                Ok((stream, ResultShape::SINGLE))
            }
            LogicalPlan::Explain(_) => {
                let stream = self.run_explain(&planned, state, plan).await?;
                Ok((stream, ResultShape::SINGLE))
            }
            _ => self.run_result(&planned, state, plan).await,
        }
    }

    /// DDL and `SET`: through the context (a `DROP SCHEMA` through the session's catalog),
    /// with the current schema kept in step.
    async fn run_session_change(
        &self,
        planned: &Planned,
        plan: LogicalPlan,
    ) -> Result<SendableRecordBatchStream> {
        if let Some(change) = &planned.schema_change {
            self.check_schema_change(change)?;
        }
        let created = match &plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                self.created_in_memory(c, &planned.grants);
                Some(c.name.clone())
            }
            _ => None,
        };
        let stream = if let LogicalPlan::Ddl(DdlStatement::DropCatalogSchema(drop)) = &plan {
            use datafusion::catalog::CatalogProvider;
            let name = drop.name.schema_name();
            if self
                .catalog
                .deregister_schema(name, drop.cascade)?
                .is_none()
                && !drop.if_exists
            {
                return Err(exec_datafusion_err!("Schema '{}' doesn't exist.", drop.name).into());
            }
            empty_stream()?
        } else {
            self.ctx
                .execute_logical_plan(plan)
                .await?
                .execute_stream()
                .await?
        };
        if let Some(change) = planned.schema_change.clone() {
            self.apply_schema_change(change)?;
        }
        if let Some(table) = created
            && let Ok(table) = self.ctx.table_provider(table).await
        {
            compact_table(&table, planned.batch_size).await?;
        }
        Ok(stream)
    }

    /// EXPLAIN: DataFusion's plan text and a row saying where each call was placed and why.
    async fn run_explain(
        &self,
        planned: &Planned,
        state: SessionState,
        plan: LogicalPlan,
    ) -> Result<SendableRecordBatchStream> {
        let df = DataFrame::new(state, plan);
        let task = Arc::new(df.task_ctx());
        let physical = df.create_physical_plan().await?;
        // EXPLAIN reports analyzer failures as plan text; a placement failure still
        // fails the statement, as running it would.
        if let Some(e) = planned.scope.placement_failure() {
            return Err(e);
        }
        let schema = physical.schema();
        let mut batches: Vec<RecordBatch> = execute_stream(physical, task)?.try_collect().await?;
        batches.push(placement_rows(&schema, &planned.scope)?);
        Ok(Box::pin(MemoryStream::try_new(batches, schema, None)?))
    }

    /// Starts `plan` as this statement's query: the session's budgets set, the physical plan
    /// (distributed, on a cluster) run under the statement's GPU lease and timeouts.
    async fn run_query(
        &self,
        planned: &Planned,
        state: SessionState,
        plan: LogicalPlan,
    ) -> Result<(StatementStream, ResultShape)> {
        let engine = self.engine.state();
        let grants = &planned.grants;
        let wait_timeout = planned.gpu_wait_timeout.or(engine.default_wait_timeout);
        self.memory.set_budget(planned.limits.memory);
        engine.spill.bound_statement(self.identity.id, &grants.user);
        // A group's USER_ and GROUP_TEMP_DB_RAM_LIMIT: budgets its users' sessions share.
        if let Some(group) = grants.group.as_ref() {
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
                planned.scope.remote.store(true, Ordering::Release);
            }
            physical = distributed;
        }
        let shape = ResultShape {
            ordered,
            partitions: physical.properties().partitioning.partition_count().max(1),
        };
        let mut stream = StatementStream::start(
            Arc::clone(engine),
            Arc::clone(&planned.scope),
            physical,
            task,
            wait_timeout,
            planned.limits.statement_timeout,
            Some(Arc::clone(&self.identity.kill)),
        )?;
        if is_analyze {
            stream = stream.with_call_report();
        }
        Ok((stream, shape))
    }

    /// A query's or a write's result: a write runs to its end before the statement returns
    /// (its effect must not depend on the client reading the count: a client that moves on to
    /// its next statement drops an unread result); an INSERT into a memory table compacts it
    /// after; the columns get the names the user wrote; the Exasol dialect's values.
    async fn run_result(
        &self,
        planned: &Planned,
        state: SessionState,
        plan: LogicalPlan,
    ) -> Result<(SendableRecordBatchStream, ResultShape)> {
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
        let (stream, shape) = self.run_query(planned, state, plan).await?;
        let batch_size = planned.batch_size;
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
        let stream = match planned
            .output
            .rename(&stream.schema(), planned.upper_case && !planned.exasol)
        {
            Some(schema) => with_schema(stream, schema),
            None => stream,
        };
        if planned.exasol {
            return Ok((exasol_result(stream, described), shape));
        }
        Ok((stream, shape))
    }

    /// `CREATE TABLE` in the engine's store (`target`) or a temporary one (`None`), from the
    /// rows of its query's `stream`.
    async fn create_from_rows(
        &self,
        create: &CreateMemoryTable,
        target: Option<ResolvedTableReference>,
        stream: StatementStream,
        exasol: bool,
        grants: &Grants,
    ) -> Result<()> {
        let stream: SendableRecordBatchStream = Box::pin(stream);
        let stream = if exasol { exasol_rows(stream) } else { stream };
        let columns = stream.schema();
        match target {
            Some(target) => {
                self.create_stored(create, &target, columns, Some(stream), grants)
                    .await
            }
            None => {
                let rows = Self::collect(stream).await?;
                self.create_temporary(create, columns, rows)
            }
        }
    }

    /// A CTAS into a memory table: its query's rows (the Exasol dialect's empty strings as
    /// NULL), then the table made of them and compacted.
    async fn create_in_memory_from(
        &self,
        create: CreateMemoryTable,
        stream: StatementStream,
        exasol: bool,
        batch_size: usize,
    ) -> Result<()> {
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
        Ok(())
    }
    /// Every function name that calls a script (qualified, and plain where the plain name is
    /// the script's), for the privilege checks.
    pub(super) fn script_functions(
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
}

/// What the plan step hands the run step: a statement the table store runs, or a plan.
enum Prepared {
    /// `ALTER TABLE` of a table in the engine's store (the column it adds, planned).
    AlterTable {
        alter: Box<datafusion::sql::sqlparser::ast::AlterTable>,
        added: Option<datafusion::arrow::datatypes::Field>,
        grants: Arc<Grants>,
    },
    /// A logical plan, the statement's session state (its own UDFs and rules; moved into the
    /// plan's run, not copied), and what running it needs.
    Plan(LogicalPlan, Box<SessionState>, Box<Planned>),
}

/// A planned statement's context for its run step.
struct Planned {
    /// `datafusion.execution.batch_size` as the statement sees it.
    batch_size: usize,
    /// The Exasol dialect.
    exasol: bool,
    /// `accelsql.identifier_case = 'upper'`.
    upper_case: bool,
    /// `accelsql.gpu_wait_timeout`.
    gpu_wait_timeout: Option<std::time::Duration>,
    /// Its placement scope.
    scope: Arc<StatementScope>,
    /// Who runs it.
    grants: Arc<Grants>,
    /// Its bounds.
    limits: Limits,
    /// The names of its result columns as the user wrote them.
    output: OutputNames,
    /// What it does to the current schema.
    schema_change: Option<SchemaChange>,
}

/// A statement's bounds: each the smallest of the session's (which starts at the server's)
/// and its user's consumer group's.
struct Limits {
    /// Memory, in bytes.
    memory: Option<usize>,
    /// Time to run.
    statement_timeout: Option<std::time::Duration>,
}

impl Limits {
    fn of(own: &AccelsqlOptions, group: Option<&ConsumerGroup>) -> Result<Self> {
        Ok(Self {
            memory: smallest(
                own.memory_limit()?,
                group.and_then(|g| g.session_ram_limit).map(|b| b as usize),
            ),
            statement_timeout: smallest(
                own.statement_timeout()?,
                group.and_then(|g| g.query_timeout()),
            ),
        })
    }
}

/// Whether the query asks for its rows in an order (`ORDER BY` at its top, under projections,
/// limits and aliases). Rows that merely happen to be sorted (a sorted source) do not count.
pub(super) fn asks_for_order(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Projection(p) => asks_for_order(&p.input),
        LogicalPlan::Limit(l) => asks_for_order(&l.input),
        LogicalPlan::SubqueryAlias(a) => asks_for_order(&a.input),
        _ => false,
    }
}

/// The smaller of two optional bounds (`None`: no bound).
pub(super) fn smallest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The EXPLAIN rows that show each call's placement and why.
pub(super) fn placement_rows(schema: &SchemaRef, scope: &StatementScope) -> Result<RecordBatch> {
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

/// `params` cast to the types the plan infers for its placeholders (`$1` in `INSERT INTO t
/// VALUES ($1)` is the column's type): DataFusion binds a value as it comes, and a `VALUES` row
/// whose value's type differs from its column's (a `Utf8` string for a `Utf8View` column) read
/// back wrong (as `''`). A value that cannot be cast is bound as it is (DataFusion then says why).
pub(super) fn params_as_planned(
    plan: &LogicalPlan,
    params: &[ScalarValue],
) -> Result<Vec<ScalarValue>> {
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
pub(super) fn described_query(statement: &DfStatement) -> Option<DfStatement> {
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
