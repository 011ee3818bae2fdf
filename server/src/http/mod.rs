//! The operator's HTTP endpoint (`serve --http HOST:PORT`), beside the data ports: `/metrics`
//! (Prometheus' text format), `/healthz` and `/readyz` for process managers, and a live
//! dashboard at `/` (served from the binary) with its JSON (`/api/state`: devices, the lease
//! queue, sessions, recent UDF calls, per node) and `/api/kill` (`KILL SESSION n`).
//!
//! Every page but the probes asks for the data port's login — HTTP basic credentials (a user
//! of the users file, or any name with the token), or `Authorization: Bearer TOKEN` — and for
//! the `SELECT ANY DICTIONARY` privilege. The dashboard's data are the system tables read in a
//! session of that user, so it shows what the user could read with SQL and no more; its kill
//! runs as that user. Requests are small and bounded: bodies of 4 KiB at most, one scrape at a
//! time; the endpoint shares nothing with the data ports but the engine.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accelsql_engine::Session;
use accelsql_engine::datafusion::arrow::array::{Array, RecordBatch};
use accelsql_engine::datafusion::arrow::util::display::array_value_to_string;
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::service::AccelsqlFlightSql;
use crate::sessions::Caller;

/// The dashboard page: one file, no requests beyond this endpoint.
const DASHBOARD: &str = include_str!("dashboard.html");

/// What the handlers share.
#[derive(Clone)]
struct Http {
    service: AccelsqlFlightSql,
    /// Credentials that passed lately (a hash of the header, with the user and when): a
    /// scraper's every request need not check a password hash and privileges again.
    passed: Arc<std::sync::Mutex<Passed>>,
}

/// Credentials that passed: a SHA-256 of the header and the peer, with the user and when.
type Passed = HashMap<[u8; 32], (String, Instant)>;

/// A user's session for one request, and its token to close it with.
type RequestSession = (String, Arc<crate::sessions::ClientSession>);

/// A refusal as the handlers pass it on (boxed: a response is large).
type Refused = Box<Response>;

/// How long credentials that passed are taken without a check.
const PASSED_FOR: Duration = Duration::from_secs(10);
/// The most credentials remembered.
const PASSED_MAX: usize = 64;

/// Serves the endpoint on `listener` until the task is dropped, over TLS where `tls` is given;
/// every connection within [`accelsql_ops::Limits`] (header timeout and size, a cap on
/// connections), so that a slow or hostile HTTP client never reaches the data ports.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    service: AccelsqlFlightSql,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let http = Http {
        service,
        passed: Arc::default(),
    };
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/", get(dashboard))
        .route("/api/state", get(state))
        .route("/api/kill", post(kill))
        .route("/api/cancel", post(cancel))
        .layer(DefaultBodyLimit::max(4096))
        .with_state(http)
        .merge(accelsql_ops::probes());
    accelsql_ops::serve(listener, app, tls, accelsql_ops::Limits::default()).await;
}

/// A refusal: status and a one-line message with accelsql's code.
fn refused(status: StatusCode, code: &str, message: &str) -> Refused {
    let text = if message.starts_with('[') {
        format!("{message}\n")
    } else {
        format!("[{code}] {message}\n")
    };
    let mut response = (status, text).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"accelsql\", charset=\"UTF-8\""),
        );
    }
    Box::new(response)
}

/// The user the request's credentials name, if they may monitor (see the module docs).
async fn authorize(http: &Http, headers: &HeaderMap, peer: SocketAddr) -> Result<String, Refused> {
    let inner = http.service.inner();
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let basic = match given {
        Some(v) if v.len() > 8192 => None,
        Some(v) => match v.strip_prefix("Bearer ") {
            Some(token) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("sys:{token}"))
            )),
            None => Some(v.to_string()),
        },
        None => None,
    };
    if !inner.login.required() {
        return Ok("-".to_string());
    }
    let Some(basic) = basic else {
        return Err(refused(
            StatusCode::UNAUTHORIZED,
            "28000",
            "log in with the data port's credentials (a user, or the token)",
        ));
    };
    let key: [u8; 32] = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(peer.ip().to_string().as_bytes());
        h.update([0]);
        h.update(basic.as_bytes());
        h.finalize().into()
    };
    {
        let passed = http.passed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((user, at)) = passed.get(&key)
            && at.elapsed() < PASSED_FOR
        {
            return Ok(user.clone());
        }
    }
    let user = match inner.login.check(Some(&basic), Some(peer.ip())).await {
        Ok(user) => user,
        Err(e) => {
            http.service
                .log(&format!("HTTP login refused from {peer}: {e}"));
            return Err(refused(StatusCode::UNAUTHORIZED, e.code(), &e.to_string()));
        }
    };
    let (token, client) = open(http, &user)?;
    let may = client
        .session
        .sql(
            "SELECT count(*) AS n FROM exa_session_privs \
             WHERE privilege = 'SELECT ANY DICTIONARY'",
        )
        .await
        .map(|b| batch_rows(&b))
        .ok()
        .and_then(|rows| rows.first().and_then(|r| r.first().cloned()))
        .and_then(|(_, n)| n)
        .is_some_and(|n| n != "0");
    inner.sessions.close(Caller::Token(&token));
    if !may {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "42000",
            "insufficient privileges: the monitoring endpoint needs SELECT ANY DICTIONARY",
        ));
    }
    let mut passed = http.passed.lock().unwrap_or_else(|e| e.into_inner());
    passed.retain(|_, (_, at)| at.elapsed() < PASSED_FOR);
    if passed.len() < PASSED_MAX {
        passed.insert(key, (user.clone(), Instant::now()));
    }
    Ok(user)
}

/// A session of `user` for one request (close it with its token).
fn open(http: &Http, user: &str) -> Result<RequestSession, Refused> {
    let (token, client) = http
        .service
        .inner()
        .sessions
        .open_with_token(user, None)
        .map_err(|e| refused(StatusCode::SERVICE_UNAVAILABLE, e.code(), &e.to_string()))?;
    client.session.set_client("HTTP dashboard");
    Ok((token, client))
}

/// Runs `handle` in a session of the user the request's credentials name (once they passed),
/// closing it afterwards; the refusal where they do not pass.
async fn in_session<F, Fut>(
    http: &Http,
    headers: &HeaderMap,
    peer: SocketAddr,
    handle: F,
) -> Response
where
    F: FnOnce(Arc<crate::sessions::ClientSession>) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let opened = match authorize(http, headers, peer).await {
        Ok(user) => open(http, &user),
        Err(refusal) => Err(refusal),
    };
    let (token, client) = match opened {
        Ok(opened) => opened,
        Err(refusal) => return *refusal,
    };
    let answer = handle(client).await;
    http.service.inner().sessions.close(Caller::Token(&token));
    answer
}

async fn metrics_page(
    State(http): State<Http>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = authorize(&http, &headers, peer).await {
        return *refusal;
    }
    let inner = http.service.inner();
    let text =
        crate::metrics::render(&inner.engine, inner.sessions.len(), inner.connections.len()).await;
    (
        [(header::CONTENT_TYPE, accelsql_ops::OPENMETRICS_CONTENT_TYPE)],
        text,
    )
        .into_response()
}

async fn dashboard(
    State(http): State<Http>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    match authorize(&http, &headers, peer).await {
        Ok(_) => Html(DASHBOARD).into_response(),
        Err(refusal) => *refusal,
    }
}

/// The rows of `sql` in `session` as JSON objects; an error as `{"error": …}`.
async fn json_rows(session: &Session, sql: &str) -> Value {
    match session.sql(sql).await {
        Ok(batches) => Value::Array(
            batch_rows(&batches)
                .into_iter()
                .map(|row| {
                    Value::Object(
                        row.into_iter()
                            .map(|(k, v)| (k, v.map_or(Value::Null, Value::String)))
                            .collect::<Map<_, _>>(),
                    )
                })
                .collect(),
        ),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

async fn state(
    State(http): State<Http>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let http = &http;
    in_session(http, &headers, peer, |client| async move {
    let session = &client.session;
    let own = session.id();
    let body = json!({
        "devices": json_rows(session, "SELECT * FROM accelsql.gpu_devices ORDER BY node, index").await,
        "leases": json_rows(
            session,
            "SELECT * FROM accelsql.gpu_leases WHERE state IN ('holding', 'waiting') \
             ORDER BY node, state, lease_id",
        )
        .await,
        "sessions": json_rows(
            session,
            &format!("SELECT * FROM exa_all_sessions WHERE session_id <> {own} ORDER BY session_id"),
        )
        .await,
        "calls": json_rows(
            session,
            "SELECT * FROM accelsql.udf_calls ORDER BY statement_id DESC, call_id LIMIT 50",
        )
        .await,
        "statements": running_statements(http, &client),
    });
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
    })
    .await
}

/// The statements running now: all of them for a user who sees other sessions' SQL, else the
/// user's own (as the system tables show them).
fn running_statements(http: &Http, client: &crate::sessions::ClientSession) -> Value {
    let sees_all = client.session.sees_others();
    let me = client.session.user().unwrap_or_else(|| client.user.clone());
    Value::Array(
        http.service
            .inner()
            .sessions
            .running()
            .into_iter()
            .filter(|r| sees_all || r.user == me)
            .map(|r| {
                json!({
                    "session": r.session,
                    "user": r.user,
                    "number": r.number,
                    "statement_id": r.statement_id,
                    "sql": r.sql.chars().take(200).collect::<String>(),
                    "elapsed_ms": u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
                    "rows": r.rows,
                })
            })
            .collect(),
    )
}

/// `POST /api/cancel?session=N&statement=M`: stops statement M (its log number) of session N,
/// for a user who sees that session's statements; its client gets 57014.
async fn cancel(
    State(http): State<Http>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let http = &http;
    in_session(http, &headers, peer, |client| async move {
        let number = |key: &str| query.get(key).and_then(|s| s.parse::<u64>().ok());
        let sessions = &http.service.inner().sessions;
        match (number("session"), number("statement")) {
            (Some(session), Some(statement)) => {
                let me = client.session.user().unwrap_or_else(|| client.user.clone());
                let visible = client.session.sees_others()
                    || sessions
                        .running()
                        .iter()
                        .any(|r| r.session == session && r.number == statement && r.user == me);
                if visible && sessions.cancel_statement(session, statement) {
                    http.service.log(&format!(
                    "session={session} stmt={statement} cancelled from the HTTP dashboard by {}",
                    client.user
                ));
                    axum::Json(json!({ "cancelled": statement, "session": session }))
                        .into_response()
                } else {
                    *refused(
                        StatusCode::NOT_FOUND,
                        "42704",
                        &format!(
                            "no running statement {statement} in session {session} that you may see"
                        ),
                    )
                }
            }
            _ => *refused(
                StatusCode::BAD_REQUEST,
                "22023",
                "give the statement to stop: /api/cancel?session=N&statement=M",
            ),
        }
    })
    .await
}

/// `POST /api/kill?session=N`: `KILL SESSION N`, as the user who asks.
async fn kill(
    State(http): State<Http>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let http = &http;
    in_session(http, &headers, peer, |client| async move {
        let target = query.get("session").and_then(|s| s.parse::<u64>().ok());
        match target {
            None => *refused(
                StatusCode::BAD_REQUEST,
                "22023",
                "give the session to end: /api/kill?session=N",
            ),
            Some(id) => match client.session.sql(&format!("KILL SESSION {id}")).await {
                Ok(_) => {
                    http.service.log(&format!(
                        "session={id} killed from the HTTP dashboard by {}",
                        client.user
                    ));
                    axum::Json(json!({ "killed": id })).into_response()
                }
                Err(e) => *refused(StatusCode::BAD_REQUEST, e.code(), &e.to_string()),
            },
        }
    })
    .await
}

/// The rows of `batches`, each as (column, value text) pairs.
fn batch_rows(batches: &[RecordBatch]) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        for row in 0..batch.num_rows() {
            out.push(
                schema
                    .fields()
                    .iter()
                    .zip(batch.columns())
                    .map(|(f, c)| {
                        let value = (!c.is_null(row))
                            .then(|| array_value_to_string(c, row).ok())
                            .flatten();
                        (f.name().clone(), value)
                    })
                    .collect(),
            );
        }
    }
    out
}
