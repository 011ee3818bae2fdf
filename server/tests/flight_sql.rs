//! The Flight SQL server driven by arrow-flight's own client over loopback: statements of every
//! kind, prepared statements with parameters, metadata RPCs, authentication, coded errors, and
//! the GPU lease's lifetime (released on disconnect, cancel, and a client that stops reading).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};
use accelsql_server::{ServerAuth, ServerHandle, ServerOptions, add_user, status_code};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables, SqlInfo};
use arrow_flight::{Action, CancelFlightInfoRequest, FlightInfo};
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::transport::Channel;
use tonic::{Code, Status};

type Client = FlightSqlServiceClient<Channel>;

/// An engine with `gpus` simulated GPUs and the test fixtures (`slow_gpu`, `gpu_probe_required`).
fn engine(gpus: usize, max_lease_hold: Option<Duration>) -> Engine {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(gpus),
        max_lease_hold,
        ..EngineOptions::default()
    })
    .unwrap();
    accelsql_engine::testing::register_fixtures(&engine).unwrap();
    engine
}

/// A server on loopback: with `users`, their users file; else its default, a random token.
async fn start(engine: &Engine, users: Option<&Path>) -> ServerHandle {
    let options = ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: users.map_or(ServerAuth::Token(None), |u| {
            ServerAuth::Users(u.to_path_buf())
        }),
        ..ServerOptions::default()
    };
    ServerHandle::start(engine.clone(), options).await.unwrap()
}

/// A client of `server`, logged in with the server's token when it has one.
async fn client(server: &ServerHandle) -> Client {
    connect(server.url().to_string(), "tester", server.token()).await
}

/// A client of the server at `url`, logged in as `user` with `token` when given.
async fn connect(url: String, user: &str, token: Option<&str>) -> Client {
    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
    let mut c = FlightSqlServiceClient::new(channel);
    if let Some(token) = token {
        c.handshake(user, token).await.unwrap();
    }
    c
}

/// `message` as a raw request carrying `c`'s bearer token (for calls made past the Flight SQL
/// client, on its inner Flight client).
fn authed<T>(c: &Client, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = c.token() {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

/// The first endpoint's result of `info`.
async fn fetch(client: &mut Client, info: FlightInfo) -> Result<Vec<RecordBatch>, FlightError> {
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    client.do_get(ticket).await?.try_collect().await
}

async fn query(client: &mut Client, sql: &str) -> Result<Vec<RecordBatch>, FlightError> {
    let info = client.execute(sql.to_string(), None).await?;
    fetch(client, info).await
}

fn single_i64(batches: &[RecordBatch]) -> i64 {
    let rows: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(rows.len(), 1, "{batches:?}");
    rows[0]
}

/// The status inside a client error (the server's, with its metadata).
fn status(e: &FlightError) -> &Status {
    match e {
        FlightError::Tonic(s) => s,
        other => panic!("not a gRPC status: {other:?}"),
    }
}

fn code(e: &FlightError) -> String {
    status_code(status(e)).unwrap_or_default()
}

fn mt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn statements_of_every_kind_run_over_the_wire() {
    mt().block_on(async {
        let engine = engine(0, None);
        let server = start(&engine, None).await;
        let mut c = client(&server).await;
        query(&mut c, "CREATE TABLE t(x BIGINT) AS VALUES (1), (2), (3)")
            .await
            .unwrap();
        let n = c
            .execute_update("INSERT INTO t VALUES (4), (5)".into(), None)
            .await
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            single_i64(&query(&mut c, "SELECT sum(x) FROM t").await.unwrap()),
            15
        );
        // Settings are the session's.
        query(&mut c, "SET datafusion.execution.batch_size = 2")
            .await
            .unwrap();
        let batches = query(&mut c, "SELECT x FROM t ORDER BY x").await.unwrap();
        assert!(batches.len() >= 2, "batch_size applies: {batches:?}");
        // Script DDL: the body's `;` and `/` survive.
        query(
            &mut c,
            "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT halve(x DOUBLE) RETURNS DOUBLE AS\n\
             def run(ctx):\n    return ctx.x / 2; \n/\n",
        )
        .await
        .unwrap();
        let batches = query(&mut c, "SELECT halve(9) AS h").await.unwrap();
        let h = batches[0]
            .column(0)
            .as_primitive::<accelsql_engine::datafusion::arrow::datatypes::Float64Type>();
        assert_eq!(h.value(0), 4.5);
        // EXPLAIN and system tables.
        let explain = query(&mut c, "EXPLAIN SELECT halve(x) FROM t")
            .await
            .unwrap();
        assert!(explain.iter().map(|b| b.num_rows()).sum::<usize>() > 0);
        let scripts = query(&mut c, "SELECT script_name FROM exa_all_scripts")
            .await
            .unwrap();
        assert_eq!(scripts.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        // Another connection is another session: the engine's tables, its own temporary ones.
        let mut other = client(&server).await;
        let rows = query(&mut other, "SELECT * FROM t").await.unwrap();
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
        query(&mut c, "CREATE TEMPORARY TABLE scratch AS SELECT 1 AS x")
            .await
            .unwrap();
        let e = query(&mut other, "SELECT * FROM scratch")
            .await
            .unwrap_err();
        assert_eq!(code(&e), "42000", "{e}");
        // ...the engine's scripts.
        let batches = query(&mut other, "SELECT halve(3) AS h").await.unwrap();
        assert_eq!(batches[0].num_rows(), 1);
        server.stop().await.unwrap();
    });
}

#[test]
fn prepared_statements_bind_parameters_and_die_when_closed() {
    mt().block_on(async {
        let engine = engine(0, None);
        let server = start(&engine, None).await;
        let mut c = client(&server).await;
        let mut prepared = c.prepare("SELECT $1 + 1 AS y".into(), None).await.unwrap();
        let params = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![41]))],
        )
        .unwrap();
        prepared.set_parameters(params).unwrap();
        let info = prepared.execute().await.unwrap();
        assert_eq!(single_i64(&fetch(&mut c, info).await.unwrap()), 42);
        // Many rows for an update: once per row.
        query(&mut c, "CREATE TABLE p(x BIGINT)").await.unwrap();
        let mut insert = c
            .prepare("INSERT INTO p VALUES ($1)".into(), None)
            .await
            .unwrap();
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        insert.set_parameters(rows).unwrap();
        assert_eq!(insert.execute_update().await.unwrap(), 3);
        assert_eq!(
            single_i64(&query(&mut c, "SELECT sum(x) FROM p").await.unwrap()),
            6
        );
        // A ticket is fetched once.
        let info = c.execute("SELECT 1".into(), None).await.unwrap();
        fetch(&mut c, info.clone()).await.unwrap();
        let e = fetch(&mut c, info).await.unwrap_err();
        assert_eq!(status(&e).code(), Code::NotFound);
        assert_eq!(code(&e), "26000");
        // A closed prepared statement is gone.
        let mut again = c.prepare("SELECT 7".into(), None).await.unwrap();
        let handle_info = again.execute().await.unwrap();
        fetch(&mut c, handle_info).await.unwrap();
        let mut copy = again.clone();
        again.close().await.unwrap();
        let e = copy.execute().await.unwrap_err();
        assert_eq!(code(&e), "26000", "{e}");
        server.stop().await.unwrap();
    });
}

#[test]
fn errors_carry_the_engine_code_and_a_fitting_status() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let mut c = client(&server).await;
        let e = query(&mut c, "SELEKT 1").await.unwrap_err();
        assert_eq!(status(&e).code(), Code::InvalidArgument);
        assert_eq!(code(&e), "42000");
        assert!(status(&e).message().starts_with("[42000]"), "{e}");
        assert!(status(&e).metadata().get("x-accelsql-code").is_some());
        // Two required GPU calls in one select: the second gets 22069.
        let e = query(&mut c, "SELECT slow_gpu(1), gpu_probe_required()")
            .await
            .unwrap_err();
        assert_eq!(code(&e), "22069", "{e}");
        assert_eq!(status(&e).code(), Code::FailedPrecondition);
        // An execution error arrives inside the stream, coded.
        let e = query(&mut c, "SELECT bad_length_gpu()").await.unwrap_err();
        assert_eq!(code(&e), "22E02", "{e}");
        // The session is still usable and nothing holds the lease.
        assert_eq!(single_i64(&query(&mut c, "SELECT 5").await.unwrap()), 5);
        assert!(engine.lease_queue().snapshot().holder.is_none());
        // A malformed command and an unknown action are refused, not fatal.
        let mut raw = c.inner().clone();
        let bad = raw
            .get_flight_info(authed(
                &c,
                arrow_flight::FlightDescriptor::new_cmd(b"\x01\x02garbage".to_vec()),
            ))
            .await
            .unwrap_err();
        assert_ne!(bad.code(), Code::Ok);
        let unknown = raw
            .do_action(authed(&c, Action::new("NoSuchAction", Vec::<u8>::new())))
            .await
            .unwrap_err();
        assert_eq!(unknown.code(), Code::InvalidArgument);
        let forged_ticket = raw
            .do_get(authed(
                &c,
                arrow_flight::Ticket::new(b"not a ticket".to_vec()),
            ))
            .await
            .unwrap_err();
        assert_ne!(forged_ticket.code(), Code::Ok);
        assert_eq!(single_i64(&query(&mut c, "SELECT 6").await.unwrap()), 6);
        server.stop().await.unwrap();
    });
}

#[test]
fn metadata_rpcs_answer_from_the_session() {
    mt().block_on(async {
        let engine = engine(0, None);
        let server = start(&engine, None).await;
        let mut c = client(&server).await;
        query(&mut c, "CREATE TABLE visible(a BIGINT, b VARCHAR)")
            .await
            .unwrap();
        let info = c.get_catalogs().await.unwrap();
        let catalogs = fetch(&mut c, info).await.unwrap();
        assert!(catalogs.iter().map(|b| b.num_rows()).sum::<usize>() >= 1);
        let info = c
            .get_db_schemas(CommandGetDbSchemas {
                catalog: None,
                db_schema_filter_pattern: Some("acc%".into()),
            })
            .await
            .unwrap();
        let schemas = fetch(&mut c, info).await.unwrap();
        let names: Vec<String> = schemas
            .iter()
            .flat_map(|b| {
                let col = b.column(1).as_string::<i32>();
                (0..col.len())
                    .map(|i| col.value(i).to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(names, ["accelsql"]);
        let info = c
            .get_tables(CommandGetTables {
                catalog: None,
                db_schema_filter_pattern: None,
                table_name_filter_pattern: Some("visible".into()),
                table_types: vec![],
                include_schema: true,
            })
            .await
            .unwrap();
        let tables = fetch(&mut c, info).await.unwrap();
        assert_eq!(tables.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert_eq!(tables[0].num_columns(), 5, "with the table's schema");
        let info = c.get_table_types().await.unwrap();
        assert_eq!(fetch(&mut c, info).await.unwrap()[0].num_rows(), 3);
        let info = c
            .get_sql_info(vec![SqlInfo::FlightSqlServerName])
            .await
            .unwrap();
        assert_eq!(fetch(&mut c, info).await.unwrap()[0].num_rows(), 1);
        let info = c
            .get_primary_keys(arrow_flight::sql::CommandGetPrimaryKeys {
                catalog: None,
                db_schema: None,
                table: "visible".into(),
            })
            .await
            .unwrap();
        let keys = fetch(&mut c, info).await.unwrap();
        assert_eq!(keys.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
        let info = c
            .get_xdbc_type_info(arrow_flight::sql::CommandGetXdbcTypeInfo { data_type: None })
            .await
            .unwrap();
        assert!(fetch(&mut c, info).await.unwrap()[0].num_rows() >= 5);
        server.stop().await.unwrap();
    });
}

#[test]
fn authentication_refuses_wrong_passwords_and_foreign_tokens() {
    mt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users");
        add_user(&users, "alice", "pw", 1000).unwrap();
        let engine = engine(0, None);
        let server = start(&engine, Some(&users)).await;
        let mut c = client(&server).await;
        // No token at all.
        let e = query(&mut c, "SELECT 1").await.unwrap_err();
        assert_eq!(status(&e).code(), Code::Unauthenticated);
        assert_eq!(code(&e), "28000");
        // A wrong password, an unknown user.
        let e = c.handshake("alice", "wrong").await.unwrap_err();
        assert!(
            e.to_string().contains("28000") || e.to_string().contains("Unauthenticated"),
            "{e}"
        );
        assert!(c.handshake("mallory", "pw").await.is_err());
        // A forged token.
        c.set_token("0123456789abcdef".into());
        let e = query(&mut c, "SELECT 1").await.unwrap_err();
        assert_eq!(status(&e).code(), Code::Unauthenticated);
        // The right password (arrow-rs would send its token instead of the credentials).
        c.clear_token();
        c.handshake("alice", "pw").await.unwrap();
        assert_eq!(single_i64(&query(&mut c, "SELECT 3").await.unwrap()), 3);
        // Another session's ticket is not this session's.
        let mut other = client(&server).await;
        other.handshake("alice", "pw").await.unwrap();
        let info = other.execute("SELECT 4".into(), None).await.unwrap();
        let e = fetch(&mut c, info.clone()).await.unwrap_err();
        assert_eq!(code(&e), "26000");
        assert_eq!(single_i64(&fetch(&mut other, info).await.unwrap()), 4);
        server.stop().await.unwrap();
    });
}

/// A GPU statement that runs for about `batches × ms` (one sleep per one-row batch).
const LONG_GPU: &str = "SELECT slow_gpu(50) FROM generate_series(1, 400)";

async fn long_gpu_client(server: &ServerHandle) -> Client {
    let mut c = client(server).await;
    query(&mut c, "SET datafusion.execution.batch_size = 1")
        .await
        .unwrap();
    c
}

/// Runs a short GPU statement on a fresh connection and returns how long it took.
async fn short_gpu_statement(server: &ServerHandle) -> Duration {
    let mut c = client(server).await;
    let started = Instant::now();
    let batches = query(&mut c, "SELECT slow_gpu(1)").await.unwrap();
    assert_eq!(single_i64(&batches), 1);
    started.elapsed()
}

#[test]
fn a_dropped_stream_releases_the_lease_at_once() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let mut a = long_gpu_client(&server).await;
        let info = a.execute(LONG_GPU.into(), None).await.unwrap();
        let mut stream: FlightRecordBatchStream = a
            .do_get(info.endpoint[0].ticket.clone().unwrap())
            .await
            .unwrap();
        stream.next().await.unwrap().unwrap();
        assert!(engine.lease_queue().snapshot().holder.is_some());
        drop(stream);
        // The whole statement would take 20 s; the next one needs the lease at once.
        let took = short_gpu_statement(&server).await;
        assert!(took < Duration::from_secs(5), "took {took:?}");
        server.stop().await.unwrap();
    });
}

#[test]
fn a_client_that_stops_reading_loses_the_lease_after_the_limit() {
    mt().block_on(async {
        let engine = engine(1, Some(Duration::from_millis(1500)));
        let server = start(&engine, None).await;
        let mut a = long_gpu_client(&server).await;
        let info = a.execute(LONG_GPU.into(), None).await.unwrap();
        let mut stream = a
            .do_get(info.endpoint[0].ticket.clone().unwrap())
            .await
            .unwrap();
        stream.next().await.unwrap().unwrap();
        // `a` stops reading but keeps its stream open; `b` gets the lease once the limit hits.
        let took = short_gpu_statement(&server).await;
        assert!(took < Duration::from_secs(8), "took {took:?}");
        // When `a` reads again, its statement has failed with 57G03.
        let e = loop {
            match stream.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break e,
                None => panic!("the statement should have been stopped"),
            }
        };
        assert_eq!(code(&e), "57G03", "{e}");
        assert_eq!(status(&e).code(), Code::ResourceExhausted);
        server.stop().await.unwrap();
    });
}

#[test]
fn cancel_flight_info_stops_a_running_statement() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let mut a = long_gpu_client(&server).await;
        let info = a.execute(LONG_GPU.into(), None).await.unwrap();
        let mut stream = a
            .do_get(info.endpoint[0].ticket.clone().unwrap())
            .await
            .unwrap();
        stream.next().await.unwrap().unwrap();
        // The same connection (session) cancels it.
        let request = CancelFlightInfoRequest { info: Some(info) };
        let mut raw = a.inner().clone();
        let mut results = raw
            .do_action(authed(
                &a,
                Action::new("CancelFlightInfo", request.encode_to_vec()),
            ))
            .await
            .unwrap()
            .into_inner();
        let result = results.next().await.unwrap().unwrap();
        let result = arrow_flight::CancelFlightInfoResult::decode(&*result.body).unwrap();
        assert_eq!(result.status, arrow_flight::CancelStatus::Cancelled as i32);
        let e = loop {
            match stream.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break e,
                None => panic!("the cancelled statement should end with an error"),
            }
        };
        assert_eq!(code(&e), "57014", "{e}");
        assert_eq!(status(&e).code(), Code::Cancelled);
        let took = short_gpu_statement(&server).await;
        assert!(took < Duration::from_secs(5), "took {took:?}");
        server.stop().await.unwrap();
    });
}

#[test]
fn two_clients_gpu_statements_take_turns_in_arrival_order() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let mut a = client(&server).await;
        let mut b = client(&server).await;
        let started = Instant::now();
        let first = tokio::spawn(async move { query(&mut a, "SELECT slow_gpu(400)").await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = tokio::spawn(async move { query(&mut b, "SELECT slow_gpu(400)").await });
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(800));
        let recent = engine.lease_queue().snapshot().recent;
        let last_two = &recent[recent.len() - 2..];
        // One after the other: the second was granted after the first ended, and waited.
        assert!(
            last_two[1].waited >= Duration::from_millis(200),
            "{last_two:?}"
        );
        server.stop().await.unwrap();
    });
}

#[test]
fn shutdown_cancels_running_statements_and_frees_the_lease() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let mut a = long_gpu_client(&server).await;
        let info = a.execute(LONG_GPU.into(), None).await.unwrap();
        let mut stream = a
            .do_get(info.endpoint[0].ticket.clone().unwrap())
            .await
            .unwrap();
        stream.next().await.unwrap().unwrap();
        let stopping = Instant::now();
        server.stop().await.unwrap();
        assert!(stopping.elapsed() < Duration::from_secs(10));
        // The cancelled statement's plan task gives the lease back as the runtime drops it, a
        // moment after `stop` returns (never while a kernel may still run): within 5 s.
        let freed = tokio::time::timeout(Duration::from_secs(5), async {
            while engine.lease_queue().snapshot().holder.is_some() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(freed.is_ok(), "{:?}", engine.lease_queue().snapshot());
        // The client's stream ends (with the cancellation or a transport error), never hangs.
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(item) = stream.next().await {
                if item.is_err() {
                    break;
                }
            }
        })
        .await;
        assert!(ended.is_ok());
    });
}

/// Another handle on `c`'s connection and session (one stream per endpoint).
fn same_session(c: &Client) -> Client {
    let mut other = FlightSqlServiceClient::new_from_inner(c.inner().clone());
    if let Some(token) = c.token() {
        other.set_token(token.clone());
    }
    other
}

/// The error reading `ticket` ends with (at DoGet or in its stream).
async fn read_error(c: &mut Client, ticket: arrow_flight::Ticket) -> FlightError {
    match c.do_get(ticket).await {
        Err(e) => e,
        Ok(stream) => stream.try_collect::<Vec<_>>().await.unwrap_err(),
    }
}

/// The first column's values of `batches`, sorted.
fn sorted_values(batches: &[RecordBatch]) -> Vec<i64> {
    let mut values: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    values.sort_unstable();
    values
}

/// An unordered query over 4 partitions (the filter spreads the rows round robin).
const SPREAD: &str = "SELECT value FROM generate_series(1, 100000) WHERE value % 7 <> 0";

/// A client whose statements plan 4 partitions of small batches.
async fn spread_client(server: &ServerHandle) -> Client {
    let mut c = client(server).await;
    for set in [
        "SET datafusion.execution.target_partitions = 4",
        "SET datafusion.execution.batch_size = 1024",
    ] {
        query(&mut c, set).await.unwrap();
    }
    c
}

#[test]
fn an_unordered_result_is_offered_as_endpoints_read_at_once_or_in_any_order() {
    mt().block_on(async {
        let engine = engine(0, None);
        let server = start(&engine, None).await;
        let mut c = spread_client(&server).await;
        let expected: Vec<i64> = (1..=100_000).filter(|v| v % 7 != 0).collect();

        // Read at once: every row exactly once.
        let info = c.execute(SPREAD.into(), None).await.unwrap();
        assert_eq!(info.endpoint.len(), 4, "{info:?}");
        assert!(!info.ordered);
        let reads = info.endpoint.iter().map(|e| {
            let mut reader = same_session(&c);
            let ticket = e.ticket.clone().unwrap();
            async move {
                let stream = reader.do_get(ticket).await?;
                stream.try_collect::<Vec<_>>().await
            }
        });
        let parts = futures::future::try_join_all(reads).await.unwrap();
        let all: Vec<RecordBatch> = parts.into_iter().flatten().collect();
        assert_eq!(sorted_values(&all), expected);

        // One after the other, the last endpoint first: the first reader gets what the others
        // do not; every row once.
        let info = c.execute(SPREAD.into(), None).await.unwrap();
        let mut all = Vec::new();
        for e in info.endpoint.iter().rev() {
            let batches: Vec<RecordBatch> = c
                .do_get(e.ticket.clone().unwrap())
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            all.extend(batches);
        }
        assert_eq!(sorted_values(&all), expected);
        // A ticket is read once.
        let e = read_error(&mut c, info.endpoint[0].ticket.clone().unwrap()).await;
        assert!(status(&e).message().contains("fetched already"), "{e}");

        // A client that reads the first endpoint only still gets every row.
        let batches = query(&mut c, SPREAD).await.unwrap();
        assert_eq!(sorted_values(&batches), expected);

        // An ordered result is one endpoint, marked ordered, in its order.
        let sql = format!("{SPREAD} ORDER BY value DESC");
        let info = c.execute(sql, None).await.unwrap();
        assert_eq!(info.endpoint.len(), 1);
        assert!(info.ordered);
        let batches = fetch(&mut c, info).await.unwrap();
        let got: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        let mut descending = expected.clone();
        descending.reverse();
        assert_eq!(got, descending);

        // Errors reach every endpoint's reader.
        let info = c
            .execute(
                "SELECT 10 / (value - 50000) FROM generate_series(1, 100000) WHERE value % 7 <> 0"
                    .into(),
                None,
            )
            .await
            .unwrap();
        for e in &info.endpoint {
            let failed = read_error(&mut c, e.ticket.clone().unwrap()).await;
            assert_eq!(code(&failed), "22000", "{failed}");
        }
        server.stop().await.unwrap();
    });
}

#[test]
fn a_statements_log_line_counts_every_endpoints_rows_once_and_names_its_gpu_calls() {
    mt().block_on(async {
        let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink_lines = Arc::clone(&lines);
        let options = ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            log: Some(Arc::new(move |line: &str| {
                sink_lines.lock().unwrap().push(line.into())
            })),
            ..ServerOptions::default()
        };
        let server = ServerHandle::start(engine(1, None), options).await.unwrap();
        let mut c = spread_client(&server).await;
        let info = c.execute(SPREAD.into(), None).await.unwrap();
        assert!(info.endpoint.len() > 1);
        let reads = info.endpoint.iter().map(|e| {
            let mut reader = same_session(&c);
            let ticket = e.ticket.clone().unwrap();
            async move { reader.do_get(ticket).await?.try_collect::<Vec<_>>().await }
        });
        futures::future::try_join_all(reads).await.unwrap();
        assert_eq!(
            single_i64(&query(&mut c, "SELECT slow_gpu(1)").await.unwrap()),
            1
        );
        server.stop().await.unwrap();
        let lines = lines.lock().unwrap();
        let spread: Vec<_> = lines.iter().filter(|l| l.contains("% 7 <> 0")).collect();
        assert_eq!(spread.len(), 1, "{lines:#?}");
        assert!(spread[0].contains(" rows=85715 ") && spread[0].contains("outcome=ok"));
        assert!(
            lines.iter().any(|l| l.contains("udfs=[slow_gpu:GPU[0]]")),
            "{lines:#?}"
        );
    });
}

#[test]
fn a_results_lease_lives_until_its_last_reader_stops_and_a_cancel_reaches_every_reader() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let mut a = spread_client(&server).await;
        query(&mut a, "SET datafusion.execution.batch_size = 1")
            .await
            .unwrap();
        let sql = "SELECT slow_gpu(20) FROM generate_series(1, 400) WHERE value % 7 <> 0";
        let info = a.execute(sql.into(), None).await.unwrap();
        assert!(info.endpoint.len() > 2, "{info:?}");
        let ticket = |i: usize| info.endpoint[i].ticket.clone().unwrap();
        let mut first = same_session(&a).do_get(ticket(0)).await.unwrap();
        first.next().await.unwrap().unwrap();
        let mut second = same_session(&a).do_get(ticket(1)).await.unwrap();
        second.next().await.unwrap().unwrap();
        // One reader stops: the other still reads, under the lease.
        drop(first);
        second.next().await.unwrap().unwrap();
        assert!(engine.lease_queue().snapshot().holder.is_some());
        // The last reader stops with endpoints unread: the statement is dropped, its lease
        // released at once, and the unread endpoints say so.
        drop(second);
        let took = short_gpu_statement(&server).await;
        assert!(took < Duration::from_secs(5), "took {took:?}");
        let e = read_error(&mut a, ticket(2)).await;
        assert_eq!(code(&e), "57014", "{e}");

        // A cancel ends every reader's stream with 57014 and frees the lease.
        let info = a.execute(sql.into(), None).await.unwrap();
        let mut readers = Vec::new();
        for e in &info.endpoint[..2] {
            let mut stream = same_session(&a)
                .do_get(e.ticket.clone().unwrap())
                .await
                .unwrap();
            stream.next().await.unwrap().unwrap();
            readers.push(stream);
        }
        let request = CancelFlightInfoRequest { info: Some(info) };
        let mut raw = a.inner().clone();
        raw.do_action(authed(
            &a,
            Action::new("CancelFlightInfo", request.encode_to_vec()),
        ))
        .await
        .unwrap();
        for mut stream in readers {
            let e = loop {
                match stream.next().await {
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break e,
                    None => panic!("a cancelled statement's reader should get an error"),
                }
            };
            assert_eq!(code(&e), "57014", "{e}");
        }
        let took = short_gpu_statement(&server).await;
        assert!(took < Duration::from_secs(5), "took {took:?}");
        server.stop().await.unwrap();
    });
}

/// Resident memory of this process in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// One client's mixed statements for `for_how_long`; returns how many ran.
async fn mixed_load(
    server_url: String,
    token: Option<String>,
    seed: usize,
    for_how_long: Duration,
) -> usize {
    let mut c = connect(server_url, &format!("load{seed}"), token.as_deref()).await;
    let started = Instant::now();
    let mut n = 0usize;
    while started.elapsed() < for_how_long {
        let i = seed + n;
        match i % 5 {
            0 => {
                let v = single_i64(&query(&mut c, &format!("SELECT {i} + 0")).await.unwrap());
                assert_eq!(v, i as i64);
            }
            1 => {
                let b = query(&mut c, "SELECT slow_gpu(2)").await.unwrap();
                assert_eq!(single_i64(&b), 2);
            }
            2 => {
                let e = query(&mut c, "SELECT nope FROM nowhere").await.unwrap_err();
                assert_eq!(code(&e), "42000");
            }
            3 => {
                let e = query(&mut c, "SELECT slow_gpu(1), gpu_probe_required()")
                    .await
                    .unwrap_err();
                assert_eq!(code(&e), "22069");
            }
            _ => {
                let mut p = c
                    .prepare(
                        "SELECT count(*) FROM generate_series(1, 100) WHERE value <= $1".into(),
                        None,
                    )
                    .await
                    .unwrap();
                let params = RecordBatch::try_new(
                    Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)])),
                    vec![Arc::new(Int64Array::from(vec![i as i64 % 100 + 1]))],
                )
                .unwrap();
                p.set_parameters(params).unwrap();
                let info = p.execute().await.unwrap();
                assert_eq!(
                    single_i64(&fetch(&mut c, info).await.unwrap()),
                    i as i64 % 100 + 1
                );
                p.close().await.unwrap();
            }
        }
        n += 1;
    }
    n
}

#[test]
fn thirty_two_clients_of_mixed_statements_leak_nothing() {
    mt().block_on(async {
        let engine = engine(1, None);
        let server = start(&engine, None).await;
        let run = |secs: u64| {
            let url = server.url().to_string();
            let token = server.token().map(str::to_string);
            async move {
                let tasks: Vec<_> = (0..32)
                    .map(|i| {
                        let load =
                            mixed_load(url.clone(), token.clone(), i, Duration::from_secs(secs));
                        tokio::spawn(load)
                    })
                    .collect();
                let mut total = 0;
                for t in tasks {
                    total += t.await.unwrap();
                }
                total
            }
        };
        // Warm-up, then the baseline, then the load.
        run(1).await;
        let baseline = rss();
        let total = run(5).await;
        assert!(total > 32, "statements run: {total}");
        let snapshot = engine.lease_queue().snapshot();
        assert!(
            snapshot.holder.is_none() && snapshot.waiting.is_empty(),
            "{snapshot:?}"
        );
        let after = rss();
        assert!(
            after < baseline + (128 << 20),
            "memory grew from {baseline} to {after} bytes over {total} statements"
        );
        server.stop().await.unwrap();
    });
}

/// `GET path` over TLS (trusting `ca_pem`, the server named `localhost`) with the bearer
/// `token`: the whole answer.
async fn https_get(at: std::net::SocketAddr, ca_pem: &[u8], path: &str, token: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8(answer).unwrap()
}

#[test]
fn tls_clients_connect_with_the_servers_certificate() {
    mt().block_on(async {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let engine = engine(0, None);
        let options = ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: Some((data.join("cert.pem"), data.join("key.pem"))),
            http_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..ServerOptions::default()
        };
        let server = ServerHandle::start(engine, options).await.unwrap();
        assert!(server.url().starts_with("grpc+tls://"), "{}", server.url());
        // The HTTP endpoint is HTTPS with the same certificate.
        let metrics = https_get(
            server.http_addr().unwrap(),
            &std::fs::read(data.join("ca.pem")).unwrap(),
            "/metrics",
            server.token().unwrap(),
        )
        .await;
        assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics:.200}");
        assert!(metrics.ends_with("# EOF\n"), "{metrics:.200}");
        let ca =
            tonic::transport::Certificate::from_pem(std::fs::read(data.join("ca.pem")).unwrap());
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(ca)
            .domain_name("localhost");
        let channel = Channel::from_shared(format!("https://{}", server.addr()))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = FlightSqlServiceClient::new(channel);
        c.handshake("tester", server.token().unwrap())
            .await
            .unwrap();
        assert_eq!(single_i64(&query(&mut c, "SELECT 8").await.unwrap()), 8);
        // A plain-text client gets no answer from a TLS server.
        let plain = Channel::from_shared(format!("http://{}", server.addr()))
            .unwrap()
            .connect()
            .await;
        if let Ok(channel) = plain {
            let mut c = FlightSqlServiceClient::new(channel);
            assert!(query(&mut c, "SELECT 1").await.is_err());
        }
        server.stop().await.unwrap();
    });
}

#[test]
fn an_oversized_message_is_refused_and_the_server_goes_on() {
    mt().block_on(async {
        let engine = engine(0, None);
        let options = ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            max_message_size: 1 << 20,
            ..ServerOptions::default()
        };
        let server = ServerHandle::start(engine, options).await.unwrap();
        let mut c = client(&server).await;
        let huge = format!("SELECT '{}' AS s", "x".repeat(2 << 20));
        let e = c.execute(huge, None).await.unwrap_err();
        assert_ne!(status(&e).code(), Code::Ok);
        assert_eq!(single_i64(&query(&mut c, "SELECT 9").await.unwrap()), 9);
        server.stop().await.unwrap();
    });
}

/// A small deterministic generator for the fuzz test (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `valid` with a few bytes flipped, cut short, or extended with noise.
    fn mutate(&mut self, valid: &[u8]) -> Vec<u8> {
        let mut out = valid.to_vec();
        match self.below(4) {
            0 if !out.is_empty() => {
                for _ in 0..1 + self.below(4) {
                    let i = self.below(out.len());
                    out[i] ^= 1 << self.below(8);
                }
            }
            1 if !out.is_empty() => out.truncate(self.below(out.len())),
            2 => out.extend((0..self.below(64)).map(|_| self.next() as u8)),
            _ => out = (0..self.below(128)).map(|_| self.next() as u8).collect(),
        }
        out
    }
}

#[test]
fn malformed_requests_are_refused_and_never_stop_the_server() {
    use arrow_flight::sql::{
        ActionClosePreparedStatementRequest, CommandPreparedStatementQuery, CommandStatementQuery,
        ProstMessageExt, TicketStatementQuery,
    };
    use arrow_flight::{FlightData, FlightDescriptor, Ticket};
    mt().block_on(async {
        let engine = engine(1, None);
        // Without authentication, so that the mutated requests reach the service itself.
        let options = ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            auth: ServerAuth::None,
            ..ServerOptions::default()
        };
        let server = ServerHandle::start(engine.clone(), options).await.unwrap();
        let mut c = client(&server).await;
        let mut raw = c.inner().clone();
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let valid_commands: Vec<Vec<u8>> = vec![
            CommandStatementQuery {
                query: "SELECT 1".into(),
                transaction_id: None,
            }
            .as_any()
            .encode_to_vec(),
            CommandPreparedStatementQuery {
                prepared_statement_handle: b"p-1-1".to_vec().into(),
            }
            .as_any()
            .encode_to_vec(),
        ];
        let valid_ticket = TicketStatementQuery {
            statement_handle: b"r-1-1".to_vec().into(),
        }
        .as_any()
        .encode_to_vec();
        let valid_close = ActionClosePreparedStatementRequest {
            prepared_statement_handle: b"p-1-1".to_vec().into(),
        }
        .as_any()
        .encode_to_vec();
        for round in 0..2000 {
            match round % 4 {
                0 => {
                    let which = rng.below(valid_commands.len());
                    let cmd = rng.mutate(&valid_commands[which]);
                    let _ = raw.get_flight_info(FlightDescriptor::new_cmd(cmd)).await;
                }
                1 => {
                    let ticket = rng.mutate(&valid_ticket);
                    if let Ok(response) = raw.do_get(Ticket::new(ticket)).await {
                        let _ = response.into_inner().collect::<Vec<_>>().await;
                    }
                }
                2 => {
                    let kind = [
                        "CreatePreparedStatement",
                        "ClosePreparedStatement",
                        "CancelFlightInfo",
                        "CloseSession",
                        "CancelQuery",
                    ][rng.below(5)];
                    let body = rng.mutate(&valid_close);
                    if let Ok(response) = raw.do_action(Action::new(kind, body)).await {
                        let _ = response.into_inner().collect::<Vec<_>>().await;
                    }
                }
                _ => {
                    let which = rng.below(valid_commands.len());
                    let cmd = rng.mutate(&valid_commands[which]);
                    let header = rng.mutate(&[]);
                    let data = FlightData {
                        flight_descriptor: Some(FlightDescriptor::new_cmd(cmd)),
                        data_header: header.into(),
                        ..Default::default()
                    };
                    if let Ok(response) = raw.do_put(futures::stream::iter(vec![data])).await {
                        let _ = response.into_inner().collect::<Vec<_>>().await;
                    }
                }
            }
            if round % 50 == 49 {
                assert_eq!(single_i64(&query(&mut c, "SELECT 11").await.unwrap()), 11);
            }
        }
        assert!(engine.lease_queue().snapshot().holder.is_none());
        assert_eq!(single_i64(&query(&mut c, "SELECT 12").await.unwrap()), 12);
        server.stop().await.unwrap();
    });
}

/// Strings of the first column of `batches`.
fn strings_of(batches: &[RecordBatch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let column =
                accelsql_engine::datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8)
                    .unwrap();
            let column = column.as_string::<i32>().clone();
            (0..column.len())
                .map(move |i| column.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn catalog_users_log_in_with_their_passwords_and_see_only_what_they_may() {
    mt().block_on(async {
        let engine = Engine::with_options(EngineOptions {
            scheduler: SchedulerConfig::default().with_simulated_gpus(1),
            password_rounds: 1000,
            ..EngineOptions::default()
        })
        .unwrap();
        accelsql_engine::testing::register_fixtures(&engine).unwrap();
        let sys = engine.session();
        for sql in [
            "CREATE USER ann IDENTIFIED BY \"ann-pw\"",
            "CREATE USER bob IDENTIFIED BY \"bob-pw\"",
            "CREATE USER eve IDENTIFIED BY \"eve-pw\"",
            "GRANT CREATE SESSION TO ann, bob",
            "GRANT CREATE SCRIPT, USE GPU TO ann",
        ] {
            sys.sql(sql).await.unwrap();
        }
        // The default server (a token): catalog users log in with their own passwords.
        let server = start(&engine, None).await;
        let mut ann = client(&server).await;
        ann.clear_token();
        ann.handshake("ann", "ann-pw").await.unwrap();
        let mut bob = client(&server).await;
        bob.clear_token();
        bob.handshake("BOB", "bob-pw").await.unwrap();
        assert_eq!(strings_of(&query(&mut ann, "SELECT CURRENT_USER").await.unwrap()), ["ANN"]);
        assert_eq!(strings_of(&query(&mut bob, "SELECT CURRENT_USER").await.unwrap()), ["BOB"]);
        // A wrong password, and a user without CREATE SESSION, are refused.
        let mut other = client(&server).await;
        other.clear_token();
        assert!(other.handshake("ann", "bob-pw").await.is_err());
        assert!(other.handshake("eve", "eve-pw").await.is_err());

        query(
            &mut ann,
            "CREATE PYTHON3 SCALAR SCRIPT ann_f(x INT) RETURNS INT AS\ndef run(ctx):\n    return ctx.x + 1\n/",
        )
        .await
        .unwrap();
        assert_eq!(strings_of(&query(&mut ann, "SELECT ann_f(1)").await.unwrap()), ["2"]);
        // Bob may neither run nor see ann's script, nor read the DBA views, nor use the GPU.
        let e = query(&mut bob, "SELECT ann_f(1)").await.unwrap_err();
        assert_eq!(code(&e), "42501", "{e}");
        assert_eq!(status(&e).code(), Code::PermissionDenied);
        let visible = query(&mut bob, "SELECT count(*) FROM exa_all_scripts").await.unwrap();
        assert_eq!(single_i64(&visible), 0);
        let e = query(&mut bob, "SELECT * FROM exa_dba_users").await.unwrap_err();
        assert_eq!(code(&e), "42501", "{e}");
        let e = query(&mut bob, "SELECT gpu_probe_required()").await.unwrap_err();
        assert_eq!(code(&e), "42501", "{e}");
        assert_eq!(
            strings_of(&query(&mut ann, "SELECT gpu_probe_required()").await.unwrap()),
            ["0"]
        );
        // Once granted, from bob's next statement on.
        sys.sql("GRANT EXECUTE ON SCRIPT ann_f TO bob").await.unwrap();
        assert_eq!(strings_of(&query(&mut bob, "SELECT ann_f(2)").await.unwrap()), ["3"]);
        // DROP USER ends the user's sessions.
        sys.sql("DROP USER bob").await.unwrap();
        let e = query(&mut bob, "SELECT 1").await.unwrap_err();
        assert_eq!(status(&e).code(), Code::Unauthenticated, "{e}");
        server.stop().await.unwrap();
    });
}
