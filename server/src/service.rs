//! The Flight SQL service: every RPC a Flight SQL client (ADBC, arrow-rs, …) sends, answered
//! from one accelsql [`Engine`]; each client is its own [`Session`](accelsql_engine::Session).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use accelsql_engine::datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use accelsql_engine::datafusion::arrow::datatypes::{Schema, SchemaRef};
use accelsql_engine::datafusion::common::{ScalarValue, TableReference};
use accelsql_engine::datafusion::execution::SendableRecordBatchStream;
use accelsql_engine::{Engine, EngineError};
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys,
    CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementIngest, CommandStatementQuery,
    CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TableExistsOption, TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::parse_bearer;
use crate::conn::{ConnState, Connections, conn_of};
use crate::error::{Result, ServerError};
use crate::login::Login;
use crate::results::{LogSink, ResultStream, StatementLog, flight_status, log_word};
use crate::sessions::{
    Caller, ClientSession, PendingResult, RunningSlot, SessionLimits, Sessions, endpoint_ticket,
};
use crate::{bad_request_err, metadata, unauthenticated_err};

/// The stream type of every DoGet answer.
type DoGetStream = <AccelsqlFlightSql as FlightService>::DoGetStream;

/// The Flight SQL action that ends the caller's session (Flight's session management).
const CLOSE_SESSION: &str = "CloseSession";
/// The most endpoints a result is offered as (one per output partition up to this).
const MAX_ENDPOINTS: usize = 64;
/// Flight's action that cancels a statement by its FlightInfo.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The service behind `accelsql serve` (clone it freely: the clones share everything).
#[derive(Clone)]
pub struct AccelsqlFlightSql {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) sessions: Sessions,
    pub(crate) login: Login,
    pub(crate) connections: Arc<Connections>,
    /// The most statements one user may run (or hold results of) at once.
    max_statements_per_user: usize,
    log: Option<LogSink>,
    next_statement: AtomicU64,
}

impl AccelsqlFlightSql {
    /// A service over `engine`. When `login` requires it, every client must authenticate
    /// (handshake with HTTP basic credentials) and use the bearer token it gets; otherwise a
    /// client without a token gets a session per connection. `log` receives one line per
    /// statement.
    pub(crate) fn new(
        engine: Engine,
        login: Login,
        limits: SessionLimits,
        connections: Arc<Connections>,
        max_statements_per_user: usize,
        admin: Option<String>,
        log: Option<LogSink>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                sessions: Sessions::new(engine.clone(), limits, Arc::clone(&connections), admin),
                engine,
                login,
                connections,
                max_statements_per_user: max_statements_per_user.max(1),
                log,
                next_statement: AtomicU64::new(1),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    pub(crate) fn log(&self, line: &str) {
        if let Some(sink) = &self.inner.log {
            sink(line);
        }
    }

    /// Checks a request's headers before its body is read: a request with a valid bearer
    /// token authenticates its connection; one without needs a server without
    /// authentication, or must be a handshake (basic credentials, checked by the handshake).
    pub(crate) fn intercept(&self, request: Request<()>) -> Result<Request<()>, Status> {
        if !self.inner.login.required() {
            return Ok(request);
        }
        let header = request
            .metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap_or(""));
        match header {
            Some(h) => match parse_bearer(h) {
                Some(token) if self.inner.sessions.knows_token(token) => {
                    if let Some(conn) = conn_of(&request) {
                        conn.authenticate();
                    }
                    Ok(request)
                }
                Some(_) => Err(unauthenticated_err!(
                    "unknown or expired session token: authenticate again (handshake)"
                )
                .into()),
                // Basic credentials: only the handshake takes them, and checks them.
                None => Ok(request),
            },
            None => Err(unauthenticated_err!(
                "this server needs a user and password: authenticate first (handshake)"
            )
            .into()),
        }
    }

    /// The caller's session: by its bearer token, or (on a server without authentication) by
    /// its connection.
    fn client<T>(&self, request: &Request<T>) -> Result<Arc<ClientSession>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap_or(""));
        let conn = conn_of(request);
        let caller = self.caller(header, conn.as_deref())?;
        Ok(self.inner.sessions.find(caller, conn.map(|c| c.id))?)
    }

    /// A catalog command's FlightInfo (its result's schema, one endpoint whose ticket is the
    /// command), for a caller with a session.
    fn metadata_info(
        &self,
        command: &impl ProstMessageExt,
        schema: &Schema,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.client(&request)?;
        command_info(command, schema, request.into_inner())
    }

    /// A catalog command's result that has no rows (accelsql's tables have no keys), for a
    /// caller with a session.
    fn no_rows(
        &self,
        request: &Request<Ticket>,
        schema: SchemaRef,
    ) -> Result<Response<DoGetStream>, Status> {
        self.client(request)?;
        batch_response(Ok(RecordBatch::new_empty(schema)))
    }

    fn caller<'a>(&self, header: Option<&'a str>, conn: Option<&ConnState>) -> Result<Caller<'a>> {
        match header {
            Some(h) => match parse_bearer(h) {
                Some(token) => Ok(Caller::Token(token)),
                None => Err(unauthenticated_err!(
                    "expected authorization: Bearer <token> (from the handshake)"
                )),
            },
            None if self.inner.login.required() => Err(unauthenticated_err!(
                "this server needs a user and password: authenticate first (handshake)"
            )),
            None => match conn {
                Some(conn) => Ok(Caller::Connection(conn.id)),
                None => Err(ServerError::Internal {
                    message: "a request without its connection".into(),
                }),
            },
        }
    }

    /// Refuses a new statement of a user who has as many as allowed.
    pub(crate) fn check_statement_cap(&self, client: &ClientSession) -> Result<()> {
        let max = self.inner.max_statements_per_user;
        if client.user != "-" && self.inner.sessions.statements_of(&client.user) >= max {
            return Err(ServerError::TooManyUserStatements {
                user: client.user.clone(),
                max,
            });
        }
        Ok(())
    }

    /// Plans and starts `sql` (its stream not yet polled: no lease taken).
    async fn execute(
        &self,
        client: &ClientSession,
        sql: &str,
        params: &[ScalarValue],
    ) -> Result<PendingResult> {
        self.check_statement_cap(client)?;
        let number = self.inner.next_statement.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let before = client.session.last_statement_id();
        let result = client.session.sql_stream_shaped(sql, params).await;
        let statement_id = client
            .session
            .last_statement_id()
            .filter(|id| Some(*id) != before);
        match result {
            Ok((stream, shape)) => Ok(PendingResult {
                stream,
                endpoints: if shape.ordered {
                    1
                } else {
                    shape.partitions.clamp(1, MAX_ENDPOINTS)
                },
                ordered: shape.ordered,
                number,
                statement_id,
                sql: sql.to_string(),
                started,
            }),
            Err(e) => {
                let log = StatementLog {
                    number,
                    statement_id,
                    sql: sql.to_string(),
                    started,
                };
                let outcome = format!("error[{}]", e.code());
                self.log(&log.line(&self.inner.engine, client, 0, &outcome));
                Err(e.into())
            }
        }
    }

    /// Runs `sql` to its end; the number of rows it changed (-1 when it is not DML).
    async fn run_update(
        &self,
        client: &Arc<ClientSession>,
        sql: &str,
        params: &[ScalarValue],
    ) -> Result<i64> {
        let count = |batches: &[RecordBatch]| affected_rows(batches).max(0) as u64;
        let (_, batches) = self.run_to_end(client, sql, params, count).await?;
        Ok(affected_rows(&batches))
    }

    /// Runs `sql` to its end for a client that takes whole results (Exasol's protocol): the
    /// result's schema and batches.
    pub(crate) async fn run_collect(
        &self,
        client: &Arc<ClientSession>,
        sql: &str,
        params: &[ScalarValue],
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let count = |batches: &[RecordBatch]| batches.iter().map(|b| b.num_rows() as u64).sum();
        self.run_to_end(client, sql, params, count).await
    }

    /// Runs `sql` to its end and logs it as every statement is, with the rows `count` says.
    async fn run_to_end(
        &self,
        client: &Arc<ClientSession>,
        sql: &str,
        params: &[ScalarValue],
        count: impl Fn(&[RecordBatch]) -> u64,
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let pending = self.execute(client, sql, params).await?;
        let schema = pending.stream.schema();
        let (stream, log) = Self::split_pending(pending);
        let result: Result<Vec<RecordBatch>, _> = stream.try_collect().await;
        let result = result.map_err(EngineError::from);
        match &result {
            Ok(batches) => self.log_ended(&log, client, count(batches), None),
            Err(e) => self.log_ended(&log, client, 0, Some(e.code())),
        }
        Ok((schema, result?))
    }

    /// Starts `sql` for a client that reads its batches itself (Exasol's HTTP transport):
    /// the stream, and what [`Self::log_ended`] logs when the client has read it.
    pub(crate) async fn run_started(
        &self,
        client: &Arc<ClientSession>,
        sql: &str,
    ) -> Result<(SendableRecordBatchStream, StatementLog)> {
        let pending = self.execute(client, sql, &[]).await?;
        Ok(Self::split_pending(pending))
    }

    fn split_pending(pending: PendingResult) -> (SendableRecordBatchStream, StatementLog) {
        let log = StatementLog {
            number: pending.number,
            statement_id: pending.statement_id,
            sql: pending.sql,
            started: pending.started,
        };
        (pending.stream, log)
    }

    /// Logs the end of a statement as every statement's is: its `rows`, and the code it
    /// failed with, if it did.
    pub(crate) fn log_ended(
        &self,
        log: &StatementLog,
        client: &ClientSession,
        rows: u64,
        failed: Option<&str>,
    ) {
        let outcome = failed.map_or_else(|| "ok".to_string(), |code| format!("error[{code}]"));
        self.log(&log.line(&self.inner.engine, client, rows, &outcome));
    }

    /// The FlightInfo of an executed statement: its schema and its endpoints, one per output
    /// partition of an unordered query (read them at once, in any order: each batch goes to
    /// the reader that asks first), else one, `ordered` when the query asked for an order.
    fn result_info(
        &self,
        client: &ClientSession,
        pending: PendingResult,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = pending.stream.schema();
        let (endpoints, ordered) = (pending.endpoints, pending.ordered);
        let handle = client.store_result(pending);
        let mut info = FlightInfo::new()
            .try_with_schema(schema.as_ref())
            .map_err(|e| engine_status(EngineError::Sql(e.into())))?
            .with_descriptor(descriptor)
            .with_ordered(ordered);
        for index in 0..endpoints {
            let ticket = TicketStatementQuery {
                statement_handle: endpoint_ticket(&handle, index, endpoints)
                    .into_bytes()
                    .into(),
            };
            info = info.with_endpoint(
                FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
            );
        }
        Ok(Response::new(info))
    }

    /// The DoGet answer for endpoint `index` of the result `handle`, streamed from `slot`.
    fn stream_result(
        &self,
        client: Arc<ClientSession>,
        (handle, index, slot): (String, usize, Arc<RunningSlot>),
    ) -> Response<DoGetStream> {
        let schema = Arc::clone(&slot.schema);
        let results = ResultStream::new(
            slot,
            client,
            handle,
            index,
            self.inner.engine.clone(),
            self.inner.log.clone(),
        );
        let encoded = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(results)
            .map_err(flight_status);
        Response::new(Box::pin(encoded))
    }

    /// The one parameter row of a prepared query (none when nothing is bound).
    fn query_params(prepared: &crate::sessions::Prepared) -> Result<Vec<ScalarValue>> {
        match prepared.params.as_slice() {
            [] => Ok(Vec::new()),
            [row] => Ok(row.clone()),
            rows => Err(bad_request_err!(
                "{} parameter rows are bound to a query, which takes one; run it as an update \
                 (executemany) to run it once per row",
                rows.len()
            )),
        }
    }
}

/// Rows changed by a DML statement (its one `count` column), or -1 for other statements.
pub(crate) fn affected_rows(batches: &[RecordBatch]) -> i64 {
    let counts: Option<u64> = batches
        .iter()
        .map(|b| {
            let [column] = b.columns() else {
                return None;
            };
            if !b.schema().field(0).name().eq_ignore_ascii_case("count") {
                return None;
            }
            let counts = column.as_any().downcast_ref::<UInt64Array>()?;
            Some(counts.iter().flatten().sum::<u64>())
        })
        .sum();
    match counts {
        Some(n) if !batches.is_empty() => i64::try_from(n).unwrap_or(i64::MAX),
        _ => -1,
    }
}

fn engine_status(e: EngineError) -> Status {
    ServerError::Engine(e).to_status()
}

/// A prepared statement or ticket handle as text.
fn handle_text(bytes: &[u8], what: &str) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        crate::unknown_handle_err!("malformed {what} handle (not one this server issued)")
    })
}

/// The parameter rows of a DoPut (each row one value per placeholder, in order).
async fn decode_param_rows(stream: PeekableFlightDataStream) -> Result<Vec<Vec<ScalarValue>>> {
    let (_, batches) = decode_batches(stream).await?;
    let mut rows = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let values = batch
                .columns()
                .iter()
                .map(|c| ScalarValue::try_from_array(c, row))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad_request_err!("unusable parameter value: {e}"))?;
            rows.push(values);
        }
    }
    Ok(rows)
}

/// The schema and record batches a client sent with DoPut.
async fn decode_batches(
    stream: PeekableFlightDataStream,
) -> Result<(Option<SchemaRef>, Vec<RecordBatch>)> {
    // A message with no Arrow header (the command's descriptor alone) carries no data.
    let messages = stream
        .map_err(FlightError::from)
        .try_filter(|m| futures::future::ready(!m.data_header.is_empty()));
    let mut decoder = FlightDataDecoder::new(messages);
    let mut schema = None;
    let mut batches = Vec::new();
    while let Some(item) = decoder.next().await {
        let item = item.map_err(|e| match e {
            FlightError::Tonic(status) => bad_request_err!("{}", status.message()),
            other => bad_request_err!("malformed Arrow data: {other}"),
        })?;
        match item.payload {
            DecodedPayload::Schema(s) => schema = Some(s),
            DecodedPayload::RecordBatch(b) => batches.push(b),
            DecodedPayload::None => {}
        }
    }
    Ok((schema, batches))
}

/// A one-batch DoGet answer.
fn batch_response(batch: Result<RecordBatch>) -> Result<Response<DoGetStream>, Status> {
    let batch = batch?;
    let schema = batch.schema();
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async { Ok(batch) }))
        .map_err(flight_status);
    Ok(Response::new(Box::pin(stream)))
}

/// The FlightInfo of a metadata command: its result schema and a ticket that is the command.
fn command_info(
    command: &impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| engine_status(EngineError::Sql(e.into())))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// The result handles a FlightInfo's endpoints name.
fn ticket_handles(info: &FlightInfo) -> Vec<String> {
    info.endpoint
        .iter()
        .filter_map(|e| e.ticket.as_ref())
        .filter_map(|t| Any::decode(&*t.ticket).ok())
        .filter_map(|any| any.unpack::<TicketStatementQuery>().ok().flatten())
        .filter_map(|t| String::from_utf8(t.statement_handle.to_vec()).ok())
        .collect()
}

#[tonic::async_trait]
impl FlightSqlService for AccelsqlFlightSql {
    type FlightService = AccelsqlFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let header = request
            .metadata()
            .get("authorization")
            .map(|v| v.to_str().unwrap_or("").to_string());
        let conn = conn_of(&request);
        let peer = conn.as_ref().and_then(|c| c.peer);
        let user = match self
            .inner
            .login
            .check(header.as_deref(), peer.map(|p| p.ip()))
            .await
        {
            Ok(user) => user,
            Err(e) => {
                self.log(&format!(
                    "handshake refused from {}: {}",
                    peer.map_or("?".into(), |p| p.to_string()),
                    log_word(&e.to_string())
                ));
                return Err(e.into());
            }
        };
        if let Some(conn) = &conn {
            conn.authenticate();
        }
        let (token, client) = self
            .inner
            .sessions
            .open_with_token(&user, conn.as_ref().map(|c| c.id))?;
        self.log(&format!(
            "session={} user={} opened from {}",
            client.id,
            log_word(&user),
            peer.map_or("?".to_string(), |a| a.to_string())
        ));
        let output = futures::stream::iter(vec![Ok(HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into_bytes().into(),
        })]);
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(output));
        let value = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::internal("[XX000] token not representable as metadata"))?;
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let client = self.client(&request)?;
        let pending = self.execute(&client, &query.query, &[]).await?;
        self.result_info(&client, pending, request.into_inner())
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let client = self.client(&request)?;
        let handle = handle_text(&cmd.prepared_statement_handle, "prepared statement")?;
        let prepared = client.prepared(&handle)?;
        let params = Self::query_params(&prepared)?;
        let pending = self.execute(&client, &prepared.sql, &params).await?;
        self.result_info(&client, pending, request.into_inner())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.metadata_info(&query, &schema, request)
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(&query, &schema, request)
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(&query, &schema, request)
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.metadata_info(&query, &schema, request)
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(metadata::sql_info()?).schema();
        self.metadata_info(&query, &schema, request)
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.metadata_info(&query, &metadata::primary_keys_schema(), request)
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.metadata_info(&query, &metadata::foreign_keys_schema(), request)
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.metadata_info(&query, &metadata::foreign_keys_schema(), request)
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.metadata_info(&query, &metadata::foreign_keys_schema(), request)
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder(metadata::xdbc_info()?).schema();
        self.metadata_info(&query, &schema, request)
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let client = self.client(&request)?;
        let ticket = handle_text(&ticket.statement_handle, "ticket")?;
        let claimed = client.claim(&ticket)?;
        Ok(self.stream_result(client, claimed))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let client = self.client(&request)?;
        let handle = handle_text(&query.prepared_statement_handle, "prepared statement")?;
        let prepared = client.prepared(&handle)?;
        let params = Self::query_params(&prepared)?;
        let pending = self.execute(&client, &prepared.sql, &params).await?;
        let handle = client.direct_handle();
        let slot = client.run_direct(&handle, pending);
        Ok(self.stream_result(client, (handle, 0, slot)))
    }

    async fn do_get_catalogs(
        &self,
        _query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let client = self.client(&request)?;
        batch_response(metadata::catalogs(&client.session))
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let client = self.client(&request)?;
        batch_response(metadata::schemas(&client.session, query))
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let client = self.client(&request)?;
        batch_response(metadata::tables(&client.session, query).await)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.client(&request)?;
        let mut builder = query.into_builder();
        for t in metadata::TABLE_TYPES {
            builder.append(t);
        }
        batch_response(builder.build().map_err(metadata::metadata_failed))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.client(&request)?;
        let batch = query
            .into_builder(metadata::sql_info()?)
            .build()
            .map_err(metadata::metadata_failed);
        batch_response(batch)
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.no_rows(&request, metadata::primary_keys_schema())
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.no_rows(&request, metadata::foreign_keys_schema())
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.no_rows(&request, metadata::foreign_keys_schema())
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.no_rows(&request, metadata::foreign_keys_schema())
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.client(&request)?;
        let batch = query
            .into_builder(metadata::xdbc_info()?)
            .build()
            .map_err(metadata::metadata_failed);
        batch_response(batch)
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let client = self.client(&request)?;
        Ok(self.run_update(&client, &command.query, &[]).await?)
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let client = self.client(&request)?;
        if command.transaction_id.is_some() {
            return Err(bad_request_err!("accelsql has no transactions").into());
        }
        // Named as SQL names it (unquoted parts fold to lower case), as the in-process
        // import does.
        let text = [
            command.catalog.as_deref(),
            command.schema.as_deref(),
            Some(command.table.as_str()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(".");
        let name = TableReference::from(text.as_str());
        let options = command.table_definition_options.unwrap_or_default();
        let ctx = client.session.context();
        let exists = ctx
            .table_exist(name.clone())
            .map_err(|e| engine_status(e.into()))?;
        let if_exists = TableExistsOption::try_from(options.if_exists).unwrap_or_default();
        let if_not_exist = TableNotExistOption::try_from(options.if_not_exist).unwrap_or_default();
        if exists {
            match if_exists {
                TableExistsOption::Append => {}
                TableExistsOption::Replace => {
                    ctx.deregister_table(name.clone())
                        .map_err(|e| engine_status(e.into()))?;
                }
                TableExistsOption::Fail | TableExistsOption::Unspecified => {
                    return Err(ServerError::IngestTarget {
                        message: format!("table {name} exists (ingest mode: create)"),
                    }
                    .into());
                }
            }
        } else if if_not_exist == TableNotExistOption::Fail {
            return Err(ServerError::IngestTarget {
                message: format!("table {name} does not exist (ingest mode: append)"),
            }
            .into());
        }
        let (schema, batches) = decode_batches(request.into_inner()).await?;
        let Some(schema) = schema.or_else(|| batches.first().map(|b| b.schema())) else {
            return Err(bad_request_err!("bulk ingestion sent no Arrow schema").into());
        };
        let rows = client
            .session
            .import_batches(&text, schema, batches)
            .await
            .map_err(engine_status)?;
        self.log(&format!(
            "session={} user={} ingest table={} rows={rows}",
            client.id,
            log_word(&client.user),
            log_word(&name.to_string())
        ));
        Ok(i64::try_from(rows).unwrap_or(i64::MAX))
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let client = self.client(&request)?;
        let handle = handle_text(&query.prepared_statement_handle, "prepared statement")?;
        let rows = decode_param_rows(request.into_inner()).await?;
        client.bind(&handle, rows)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle.into_bytes().into()),
        })
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let client = self.client(&request)?;
        let handle = handle_text(&query.prepared_statement_handle, "prepared statement")?;
        let prepared = client.prepared(&handle)?;
        let mut rows = decode_param_rows(request.into_inner()).await?;
        if rows.is_empty() {
            rows = prepared.params.clone();
        }
        if rows.is_empty() {
            return Ok(self.run_update(&client, &prepared.sql, &[]).await?);
        }
        let mut total = 0i64;
        let mut known = false;
        for row in &rows {
            let n = self.run_update(&client, &prepared.sql, row).await?;
            if n >= 0 {
                total = total.saturating_add(n);
                known = true;
            }
        }
        Ok(if known { total } else { -1 })
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let client = self.client(&request)?;
        if query.transaction_id.is_some() {
            return Err(bad_request_err!("accelsql has no transactions").into());
        }
        if query.query.trim().is_empty() {
            return Err(bad_request_err!("no SQL statement given").into());
        }
        let handle = client.prepare(query.query)?;
        // The result's schema is known when the statement runs (a script's DDL, say, has
        // none to plan): clients read it from the FlightInfo and the stream.
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into_bytes().into(),
            dataset_schema: Default::default(),
            parameter_schema: Default::default(),
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let client = self.client(&request)?;
        let handle = handle_text(&query.prepared_statement_handle, "prepared statement")?;
        Ok(client.close_prepared(&handle)?)
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let client = self.client(&request)?;
        let info = FlightInfo::decode(&*query.info)
            .map_err(|e| bad_request_err!("malformed FlightInfo to cancel: {e}"))?;
        let cancelled = ticket_handles(&info)
            .iter()
            .fold(false, |any, h| client.cancel(h) | any);
        // CancelResult: 1 cancelled, 3 not cancellable (nothing of this session's).
        Ok(ActionCancelQueryResult {
            result: if cancelled { 1 } else { 3 },
        })
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let kind = request.get_ref().r#type.clone();
        let body = match kind.as_str() {
            CANCEL_FLIGHT_INFO => {
                let client = self.client(&request)?;
                let cancel = CancelFlightInfoRequest::decode(&*request.get_ref().body)
                    .map_err(|e| bad_request_err!("malformed CancelFlightInfoRequest: {e}"))?;
                let cancelled = cancel.info.as_ref().is_some_and(|info| {
                    ticket_handles(info)
                        .iter()
                        .fold(false, |any, h| client.cancel(h) | any)
                });
                let status = if cancelled {
                    CancelStatus::Cancelled
                } else {
                    CancelStatus::NotCancellable
                };
                CancelFlightInfoResult {
                    status: status as i32,
                }
                .encode_to_vec()
            }
            CLOSE_SESSION => {
                let header = request
                    .metadata()
                    .get("authorization")
                    .map(|v| v.to_str().unwrap_or(""));
                let conn = conn_of(&request);
                let caller = self.caller(header, conn.as_deref())?;
                self.inner.sessions.close(caller);
                // CloseSessionResult { status: CLOSED (1) }.
                vec![0x08, 0x01]
            }
            other => {
                return Err(bad_request_err!("unknown Flight action {other:?}").into());
            }
        };
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(Box::pin(futures::stream::iter(vec![Ok(
            result,
        )]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![
            Ok(ActionType {
                r#type: CANCEL_FLIGHT_INFO.into(),
                description: "Cancels a running or unfetched statement by its FlightInfo".into(),
            }),
            Ok(ActionType {
                r#type: CLOSE_SESSION.into(),
                description: "Ends the caller's session (cancels its statements)".into(),
            }),
        ])
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
