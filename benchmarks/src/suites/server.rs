//! `server`: accelsql over Arrow Flight SQL (`accelsql serve`'s service on loopback, in this
//! process) against accelsql in process: the result throughput of a wide query fetched whole
//! (in process, arrow-rs's Flight SQL client, ADBC's driver from Python), tiny statements per
//! second from 1, 8 and 32 clients, and the GPU lease's hand-off between clients on one
//! simulated GPU.

use std::time::{Duration, Instant};

use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};
use accelsql_server::{ServerHandle, ServerOptions};
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::StreamExt;
use tonic::transport::Channel;

use crate::bench_err;
use crate::error::Result;
use crate::measure::{Stats, percentile_of_sorted};
use crate::peers::python_env::{output_of, scripts_dir};
use crate::progress::Progress;
use crate::results::{Distribution, Figure, Outcome, SuiteResult, Table};

use super::Context;

/// Rows of the wide result at `--scale 1`.
pub const BASE_ROWS: u64 = 10_000_000;
/// The client counts of the tiny-statement rate.
pub const CLIENTS: [usize; 3] = [1, 8, 32];
/// How long each client count runs.
pub const WINDOW: Duration = Duration::from_secs(2);
/// GPU statements per client in the hand-off measurement.
pub const HANDOFFS: usize = 200;
/// The goal for a memory table's rows: the arrow-rs client's throughput at least this fraction
/// of pyarrow's C++ Flight DoGet of the same table.
pub const GOAL_VS_ANCHOR: f64 = 0.8;
/// The goal for a computed result: each client's throughput at least this fraction of
/// in-process.
pub const GOAL_VS_IN_PROCESS: f64 = 0.6;
/// The goal for ADBC: at most this many times the arrow-rs client's time.
pub const GOAL_ADBC: f64 = 1.3;
/// The goal for `SELECT 1` from one client: its median over the wire at most this many times
/// in process.
pub const GOAL_SELECT1_LATENCY: f64 = 2.0;
/// The goal for `SELECT 1` from 8 clients: at least this fraction of 8 in-process sessions'
/// statements per second.
pub const GOAL_SELECT1_RATE: f64 = 0.6;

const IN_PROCESS: &str = "accelsql in process";
const FLIGHT_RS: &str = "Flight SQL, arrow-rs client";
const ADBC: &str = "Flight SQL, ADBC (Python)";
const IN_PROCESS_SESSIONS: &str = "accelsql in process, sessions";
const FLIGHT_RS_CLIENTS: &str = "Flight SQL, arrow-rs clients";
const PYARROW_FLIGHT: &str = "Arrow Flight DoGet, pyarrow C++ (anchor)";
/// The rows per batch of the memory table (DataFusion's batch size, which `generate_series`
/// produces).
const TABLE_BATCH_ROWS: usize = 8192;

type Client = FlightSqlServiceClient<Channel>;

/// Where the suite's server is, and the token its clients log in with (the server's default
/// authentication is on, as users run it).
#[derive(Debug, Clone)]
struct Endpoint {
    url: String,
    token: Option<String>,
}

async fn client(at: &Endpoint) -> Result<Client> {
    let url = &at.url;
    // Windows as a bulk-transfer client sets them (tonic's default 64 KiB paces the stream by
    // window updates).
    let channel = Channel::from_shared(url.to_string())
        .map_err(|e| bench_err!("bad URL {url}: {e}"))?
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(32 << 20))
        .max_frame_size(Some(1 << 20))
        .connect()
        .await
        .map_err(|e| bench_err!("cannot connect to {url}: {e}"))?;
    let mut c = FlightSqlServiceClient::new(channel);
    if let Some(token) = &at.token {
        c.handshake("bench", token)
            .await
            .map_err(|e| bench_err!("cannot log in to {url}: {e}"))?;
    }
    Ok(c)
}

/// Runs `sql` and fetches its whole result, reading its endpoints at once (each on its own
/// stream of the one connection); returns the rows.
async fn fetch(c: &mut Client, sql: &str) -> Result<u64> {
    Ok(fetch_endpoints(c, sql).await?.0)
}

/// [`fetch`], also returning how many endpoints the result was offered as.
async fn fetch_endpoints(c: &mut Client, sql: &str) -> Result<(u64, usize)> {
    let info = c
        .execute(sql.to_string(), None)
        .await
        .map_err(|e| bench_err!("{sql}: {e}"))?;
    let c_token = c.token().cloned();
    let endpoints = info.endpoint.len();
    let reads = info.endpoint.into_iter().map(|endpoint| {
        // Another handle on the same connection and session.
        let mut c = FlightSqlServiceClient::new_from_inner(c.inner().clone());
        if let Some(token) = c_token.clone() {
            c.set_token(token);
        }
        async move {
            let ticket = endpoint
                .ticket
                .ok_or_else(|| bench_err!("an endpoint without a ticket"))?;
            let mut stream = c
                .do_get(ticket)
                .await
                .map_err(|e| bench_err!("{sql}: {e}"))?;
            let mut rows = 0u64;
            while let Some(batch) = stream.next().await {
                rows += batch.map_err(|e| bench_err!("{sql}: {e}"))?.num_rows() as u64;
            }
            Ok::<_, crate::error::BenchError>(rows)
        }
    });
    let rows = futures::future::try_join_all(reads)
        .await?
        .into_iter()
        .sum();
    Ok((rows, endpoints))
}

fn measured(case: &str, engine: &str, rows: u64, samples: &[Duration]) -> Figure {
    match Stats::of(samples) {
        Some(stats) => Figure::new(case, engine, rows, Outcome::Measured { stats }),
        None => Figure::new(case, engine, rows, Outcome::unavailable("no run finished")),
    }
}

/// The two wide results: a memory table's rows (in process they are handed over without a copy:
/// the wire's worst case), and the same columns computed by the query.
fn wide_cases(rows: u64) -> [(String, String, String, bool); 2] {
    let columns = "value AS a, value * 2 AS b, CAST(value AS DOUBLE) / 3 AS c, value % 97 AS d";
    [
        (
            format!("{rows} rows × 4 columns, memory table"),
            format!("CREATE TABLE wide AS SELECT {columns} FROM generate_series(1, {rows})"),
            "SELECT a, b, c, d FROM wide".to_string(),
            true,
        ),
        (
            format!("{rows} rows × 4 columns, computed"),
            "SELECT 1".to_string(),
            format!("SELECT {columns} FROM generate_series(1, {rows})"),
            false,
        ),
    ]
}

/// One wide result: in process, through arrow-rs's client, through ADBC.
async fn wide_result(
    ctx: &Context,
    engine: &Engine,
    at: &Endpoint,
    (case, setup, query, from_table): &(String, String, String, bool),
    rows: u64,
    table: &mut Table,
) -> Result<()> {
    let query = query.as_str();
    let session = engine.session();
    session.sql(setup).await?;
    let mut samples = Vec::new();
    for i in 0..ctx.plan.total() {
        let started = Instant::now();
        let mut stream = session.sql_stream(query).await?;
        let mut n = 0u64;
        while let Some(batch) = stream.next().await {
            n += batch?.num_rows() as u64;
        }
        if n != rows {
            return Err(bench_err!("in process: {n} rows, expected {rows}"));
        }
        if i >= ctx.plan.warmup {
            samples.push(started.elapsed());
        }
    }
    table.push(measured(case, IN_PROCESS, rows, &samples));

    let mut c = client(at).await?;
    fetch(&mut c, setup).await?;
    let mut samples = Vec::new();
    let mut endpoints = 0;
    for i in 0..ctx.plan.total() {
        let started = Instant::now();
        let (n, offered) = fetch_endpoints(&mut c, query).await?;
        endpoints = offered;
        if n != rows {
            return Err(bench_err!("arrow-rs client: {n} rows, expected {rows}"));
        }
        if i >= ctx.plan.warmup {
            samples.push(started.elapsed());
        }
    }
    table
        .push(measured(case, FLIGHT_RS, rows, &samples).with_metric("endpoints", endpoints as f64));

    let adbc = python_peer(
        ctx,
        "adbc_fetch.py",
        &[
            at.url.as_str(),
            setup.as_str(),
            query,
            &ctx.plan.warmup.to_string(),
            &ctx.plan.runs.to_string(),
            at.token.as_deref().unwrap_or(""),
        ],
        (case, ADBC, "adbc-driver-flightsql"),
        rows,
    );
    table.push(adbc);
    if *from_table {
        // The anchor: pyarrow's C++ Flight serving and reading the same table in batches of
        // the memory table's size.
        let anchor = python_peer(
            ctx,
            "pyarrow_flight.py",
            &[
                &rows.to_string(),
                &TABLE_BATCH_ROWS.to_string(),
                &ctx.plan.warmup.to_string(),
                &ctx.plan.runs.to_string(),
            ],
            (case, PYARROW_FLIGHT, "pyarrow"),
            rows,
        );
        table.push(anchor);
    }
    Ok(())
}

/// A Python peer's figure: runs `script` with `args` in the peers' virtualenv; it prints JSON
/// with `times` (seconds), `rows` and `version`.
fn python_peer(
    ctx: &Context,
    script: &str,
    args: &[&str],
    (case, engine, package): (&str, &str, &str),
    rows: u64,
) -> Figure {
    let python = match ctx.python() {
        Err(why) => return Figure::new(case, engine, rows, Outcome::unavailable(why)),
        Ok(python) => python,
    };
    let out = output_of(
        std::process::Command::new(python)
            .arg(scripts_dir().join(script))
            .args(args),
    );
    let v = match out.and_then(|o| {
        serde_json::from_str::<serde_json::Value>(o.trim()).map_err(|e| e.to_string())
    }) {
        Err(why) => return Figure::new(case, engine, rows, Outcome::unavailable(why)),
        Ok(v) => v,
    };
    if let Some(version) = v["version"].as_str() {
        ctx.note_version(package, version);
    }
    let fetched = v["rows"].as_u64().unwrap_or(0);
    let samples: Vec<f64> = v["times"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    match Stats::of_secs(&samples) {
        Some(stats) if fetched == rows => {
            Figure::new(case, engine, rows, Outcome::Measured { stats })
        }
        _ => Figure::new(
            case,
            engine,
            rows,
            Outcome::unavailable(format!("fetched {fetched} rows of {rows}")),
        ),
    }
}

/// Runs `statement` back to back on each of `runners` (a task each) for [`WINDOW`]: every
/// statement's latency, and how long it all took.
async fn back_to_back<R, F, Fut>(runners: Vec<R>, statement: F) -> Result<(Vec<Duration>, Duration)>
where
    R: Send + 'static,
    F: Fn(R) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<R>> + Send,
{
    let start = Instant::now();
    let deadline = start + WINDOW;
    let tasks: Vec<_> = runners
        .into_iter()
        .map(|mut runner| {
            let statement = statement.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    runner = statement(runner).await?;
                    latencies.push(t.elapsed());
                }
                Ok::<_, crate::error::BenchError>(latencies)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok((all, start.elapsed()))
}

/// `SELECT 1` back to back from `k` clients for [`WINDOW`]: every statement's latency.
async fn tiny_statements(at: &Endpoint, k: usize) -> Result<(Vec<Duration>, Duration)> {
    let mut clients = Vec::with_capacity(k);
    for _ in 0..k {
        clients.push(client(at).await?);
    }
    back_to_back(clients, |mut c: Client| async move {
        fetch(&mut c, "SELECT 1").await?;
        Ok(c)
    })
    .await
}

/// `SELECT 1` back to back from `k` in-process sessions for [`WINDOW`]: every statement's
/// latency (the baseline of [`tiny_statements`]).
async fn tiny_in_process(engine: &Engine, k: usize) -> Result<(Vec<Duration>, Duration)> {
    let sessions = (0..k).map(|_| engine.session()).collect();
    back_to_back(sessions, |session: accelsql_engine::Session| async move {
        session.sql("SELECT 1").await?;
        Ok(session)
    })
    .await
}

/// Two clients alternate GPU-required statements on one simulated GPU: the time from one
/// statement's lease release to the next one's grant, seen as each statement's latency minus
/// its own work, over [`HANDOFFS`] statements each.
async fn handoffs(at: &Endpoint) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut solo = client(at).await?;
    let mut alone = Vec::new();
    for _ in 0..HANDOFFS {
        let t = Instant::now();
        fetch(&mut solo, "SELECT slow_gpu(0)").await?;
        alone.push(t.elapsed().as_secs_f64());
    }
    let mut contended = Vec::new();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let at = at.clone();
            tokio::spawn(async move {
                let mut c = client(&at).await?;
                let mut out = Vec::new();
                for _ in 0..HANDOFFS {
                    let t = Instant::now();
                    fetch(&mut c, "SELECT slow_gpu(0)").await?;
                    out.push(t.elapsed().as_secs_f64());
                }
                Ok::<_, crate::error::BenchError>(out)
            })
        })
        .collect();
    for task in tasks {
        contended.extend(task.await??);
    }
    alone.sort_by(f64::total_cmp);
    contended.sort_by(f64::total_cmp);
    Ok((alone, contended))
}

/// Clients hammering wrong passwords during the login-storm measurement.
pub const STORMERS: usize = 4;

/// `SELECT 1` back to back from one logged-in client for [`WINDOW`]: every latency; with
/// `storm`, [`STORMERS`] other clients try wrong passwords as fast as they are answered
/// meanwhile (each try a full PBKDF2 check, or a rate-limit refusal). Returns the latencies and
/// how many wrong logins were answered.
async fn under_login_storm(at: &Endpoint, user: &str, storm: bool) -> Result<(Vec<Duration>, u64)> {
    let mut c = client(at).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut stormers = Vec::new();
    for i in 0..if storm { STORMERS } else { 0 } {
        let (url, user, stop) = (
            at.url.clone(),
            user.to_string(),
            std::sync::Arc::clone(&stop),
        );
        stormers.push(tokio::spawn(async move {
            let mut tries = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(channel) = Channel::from_shared(url.clone()) else {
                    break;
                };
                let Ok(channel) = channel.connect().await else {
                    break;
                };
                let mut bad = FlightSqlServiceClient::new(channel);
                // Refused (28000, or 28L01 once rate limited): either way the server answered.
                let _ = bad.handshake(&user, &format!("wrong-{i}-{tries}")).await;
                tries += 1;
            }
            tries
        }));
    }
    let deadline = Instant::now() + WINDOW;
    let mut latencies = Vec::new();
    while Instant::now() < deadline {
        let t = Instant::now();
        fetch(&mut c, "SELECT 1").await?;
        latencies.push(t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut tries = 0;
    for s in stormers {
        tries += s.await.unwrap_or(0);
    }
    Ok((latencies, tries))
}

/// Sessions open while `/metrics` is scraped.
pub const SCRAPE_SESSIONS: usize = 1000;
/// Scrapes timed.
pub const SCRAPES: usize = 500;
/// The goal for a scrape of `/metrics` with [`SCRAPE_SESSIONS`] sessions open: p99 below this.
pub const GOAL_SCRAPE_P99: Duration = Duration::from_millis(5);

/// One `GET /metrics` on a fresh connection, as a scraper that logs in with the token does;
/// the body's length.
async fn scrape(at: std::net::SocketAddr, token: &str) -> Result<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(at)
        .await
        .map_err(|e| bench_err!("cannot connect to {at}: {e}"))?;
    let request = format!(
        "GET /metrics HTTP/1.1\r\nhost: {at}\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| bench_err!("scrape: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| bench_err!("scrape: {e}"))?;
    if !answer.starts_with(b"HTTP/1.1 200") || !answer.ends_with(b"# EOF\n") {
        return Err(bench_err!(
            "scrape: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        ));
    }
    Ok(answer.len())
}

/// A server on 127.0.0.1 (any free port) over a fresh engine with `gpus` simulated GPUs, with
/// `options` for the rest.
async fn start_server(gpus: usize, options: ServerOptions) -> Result<ServerHandle> {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(gpus),
        ..EngineOptions::default()
    })?;
    ServerHandle::start(
        engine,
        ServerOptions {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            ..options
        },
    )
    .await
    .map_err(|e| bench_err!("the server did not start: {e}"))
}

/// The metrics part: a server with its HTTP endpoint, [`SCRAPE_SESSIONS`] sessions logged in
/// (over 8 connections) each having run a statement, then [`SCRAPES`] scrapes of `/metrics` one
/// after another.
async fn metrics_scrape(result: &mut SuiteResult) -> Result<()> {
    let server = start_server(
        2,
        ServerOptions {
            http_listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            max_sessions: SCRAPE_SESSIONS + 16,
            max_sessions_per_user: SCRAPE_SESSIONS + 16,
            ..ServerOptions::default()
        },
    )
    .await?;
    let token = server
        .token()
        .map(str::to_string)
        .ok_or_else(|| bench_err!("the server made no token"))?;
    let http = server
        .http_addr()
        .ok_or_else(|| bench_err!("the server has no HTTP endpoint"))?;
    let at = Endpoint {
        url: server.url().to_string(),
        token: Some(token.clone()),
    };
    let mut channels = Vec::new();
    for _ in 0..8 {
        channels.push(client(&at).await?.inner().clone());
    }
    let mut sessions = Vec::with_capacity(SCRAPE_SESSIONS);
    for i in 0..SCRAPE_SESSIONS {
        let mut c = FlightSqlServiceClient::new_from_inner(channels[i % channels.len()].clone());
        c.handshake("bench", &token)
            .await
            .map_err(|e| bench_err!("session {i}: {e}"))?;
        fetch(&mut c, "SELECT 1").await?;
        sessions.push(c);
    }
    let mut bytes = 0;
    for _ in 0..20 {
        bytes = scrape(http, &token).await?;
    }
    let mut samples = Vec::with_capacity(SCRAPES);
    for _ in 0..SCRAPES {
        let start = Instant::now();
        scrape(http, &token).await?;
        samples.push(start.elapsed());
    }
    samples.sort();
    let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    let p99 = percentile_of_sorted(&secs, 0.99);
    let mut table = Table::new(
        format!("server: GET /metrics with {SCRAPE_SESSIONS} sessions open"),
        "sessions",
        None,
    )
    .without_rate();
    let figure = measured(
        "GET /metrics",
        "HTTP endpoint",
        SCRAPE_SESSIONS as u64,
        &samples,
    )
    .with_metric("p99_ms", p99 * 1e3)
    .with_metric("bytes", bytes as f64);
    let median = figure.outcome.stats().map_or(0.0, |s| s.median_s);
    table.push(figure);
    result.tables.push(table);
    let goal = GOAL_SCRAPE_P99.as_secs_f64();
    result.notes.push(format!(
        "Metrics scrape with {SCRAPE_SESSIONS} sessions open ({SCRAPES} scrapes, a new \
         connection each, bearer token): {:.2} ms median, {:.2} ms p99, {bytes} bytes; goal \
         p99 < {:.0} ms: {}.",
        median * 1e3,
        p99 * 1e3,
        goal * 1e3,
        if p99 < goal { "met" } else { "NOT met" }
    ));
    drop(sessions);
    server
        .stop()
        .await
        .map_err(|e| bench_err!("the server did not stop: {e}"))?;
    Ok(())
}

/// The login-storm part: a server with a users file (PBKDF2 at its default rounds), one client
/// running statements, idle and while [`STORMERS`] clients try wrong passwords.
async fn login_storm(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    // Made owner-only by add_user; a second run replaces the entry.
    std::fs::create_dir_all(&ctx.data_dir)
        .map_err(|e| bench_err!("{}: {e}", ctx.data_dir.display()))?;
    let users = ctx.data_dir.join("server-login-storm-users");
    accelsql_server::add_user(&users, "bench", "right", accelsql_server::DEFAULT_ROUNDS)
        .map_err(|e| bench_err!("the users file: {e}"))?;
    let server = start_server(
        0,
        ServerOptions {
            auth: accelsql_server::ServerAuth::Users(users),
            ..ServerOptions::default()
        },
    )
    .await?;
    let at = Endpoint {
        url: server.url().to_string(),
        token: Some("right".to_string()),
    };
    let mut table = Table::new(
        format!("server: SELECT 1 latency, idle vs {STORMERS} clients trying wrong passwords"),
        "stormers",
        None,
    )
    .without_rate();
    let mut medians = Vec::new();
    for storm in [false, true] {
        let (latencies, tries) = under_login_storm(&at, "bench", storm).await?;
        let stormers = if storm { STORMERS as u64 } else { 0 };
        let figure = measured(
            "SELECT 1",
            "Flight SQL, arrow-rs client",
            stormers,
            &latencies,
        )
        .with_metric("wrong_logins_answered", tries as f64);
        if let Outcome::Measured { stats } = &figure.outcome {
            medians.push((stats.median_s, tries));
        }
        table.push(figure);
    }
    if let [(idle, _), (storm, tries)] = medians[..] {
        result.notes.push(format!(
            "Login storm: SELECT 1 from a logged-in client takes {:.2} ms median idle and \
             {:.2} ms while {STORMERS} clients had {tries} wrong passwords answered in {:?} \
             ({:.2}x idle). Password checks run on a small bounded pool and failed logins are \
             rate limited (28L01 after a burst).",
            idle * 1e3,
            storm * 1e3,
            WINDOW,
            storm / idle.max(1e-12)
        ));
    }
    result.tables.push(table);
    server
        .stop()
        .await
        .map_err(|e| bench_err!("the server did not stop: {e}"))?;
    Ok(())
}

/// The wide result's goals, each a note: from the memory table, the arrow-rs client reaches
/// [`GOAL_VS_ANCHOR`] of pyarrow's C++ Flight; computed, each client reaches
/// [`GOAL_VS_IN_PROCESS`] of in-process throughput; ADBC takes at most [`GOAL_ADBC`]× arrow-rs's
/// time.
fn wide_goals(case: &str, from_table: bool, wide: &Table) -> Vec<String> {
    let rate = |engine: &str| {
        wide.figures
            .iter()
            .find(|f| f.engine == engine)
            .and_then(Figure::rate)
    };
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let mut notes = Vec::new();
    let (rs, adbc, local) = (rate(FLIGHT_RS), rate(ADBC), rate(IN_PROCESS));
    if from_table {
        if let (Some(rs), Some(anchor)) = (rs, rate(PYARROW_FLIGHT)) {
            let share = rs / anchor;
            notes.push(format!(
                "{case}: the arrow-rs client fetches {:.1} M rows/s, {:.0}% of pyarrow C++ \
                 Flight's {:.1} M rows/s DoGet of the same table (goal ≥ {:.0}%: {})",
                rs / 1e6,
                share * 100.0,
                anchor / 1e6,
                GOAL_VS_ANCHOR * 100.0,
                verdict(share >= GOAL_VS_ANCHOR)
            ));
        }
    } else if let Some(local) = local {
        for (engine, r) in [("arrow-rs", rs), ("ADBC", adbc)] {
            if let Some(r) = r {
                let share = r / local;
                notes.push(format!(
                    "{case}: {engine} fetches {:.1} M rows/s, {:.0}% of in-process throughput \
                     (goal ≥ {:.0}%: {})",
                    r / 1e6,
                    share * 100.0,
                    GOAL_VS_IN_PROCESS * 100.0,
                    verdict(share >= GOAL_VS_IN_PROCESS)
                ));
            }
        }
    }
    if let (Some(rs), Some(adbc)) = (rs, adbc) {
        let times = rs / adbc;
        notes.push(format!(
            "{case}: ADBC takes {times:.2}× the arrow-rs client's time (goal ≤ {GOAL_ADBC}×: {})",
            verdict(times <= GOAL_ADBC)
        ));
    }
    notes
}

/// The tiny statements' goals, each a note: from one client, the median over the wire at most
/// [`GOAL_SELECT1_LATENCY`]× in process; from 8, at least [`GOAL_SELECT1_RATE`] of the
/// statements per second of 8 in-process sessions. `rates`: (clients, over the wire, statements
/// per second, median s, p99 s).
fn tiny_goals(rates: &[(usize, bool, f64, Option<f64>, f64)]) -> Vec<String> {
    let find = |k: usize, wire: bool| rates.iter().find(|r| r.0 == k && r.1 == wire);
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let mut notes = Vec::new();
    if let (Some(local), Some(wire)) = (find(1, false), find(1, true))
        && let (Some(lm), Some(wm)) = (local.3, wire.3)
    {
        let times = wm / lm.max(1e-12);
        notes.push(format!(
            "SELECT 1 from one client: {:.0} µs median (p99 {:.0} µs) over the wire, {:.0} µs \
             (p99 {:.0} µs) in process: {times:.2}× (goal ≤ {GOAL_SELECT1_LATENCY}×: {})",
            wm * 1e6,
            wire.4 * 1e6,
            lm * 1e6,
            local.4 * 1e6,
            verdict(times <= GOAL_SELECT1_LATENCY)
        ));
    }
    if let (Some(local), Some(wire)) = (find(8, false), find(8, true)) {
        let share = wire.2 / local.2.max(1e-12);
        notes.push(format!(
            "SELECT 1 from 8 clients: {:.0} statements/s over the wire, {:.0} from 8 in-process \
             sessions: {:.0}% (goal ≥ {:.0}%: {})",
            wire.2,
            local.2,
            share * 100.0,
            GOAL_SELECT1_RATE * 100.0,
            verdict(share >= GOAL_SELECT1_RATE)
        ));
    }
    notes
}

/// Runs the suite.
pub(crate) async fn run(ctx: &Context, result: &mut SuiteResult) -> Result<()> {
    result.title = "server: accelsql over Arrow Flight SQL vs in process".into();
    result.what =
        "`accelsql serve`'s Flight SQL service on 127.0.0.1 in this process, its clients \
                   in this process (arrow-rs) or in a Python process (ADBC's Flight SQL driver). \
                   (1) A 4-column result (BIGINT, BIGINT, DOUBLE, BIGINT) from a memory table, \
                   and the same columns computed, fetched whole: in process (the stream \
                   consumed), through each client (every batch decoded; ADBC into a pyarrow \
                   Table). An unordered result is offered as one endpoint per output partition; \
                   both clients read the endpoints at once. The anchor beside the memory table: \
                   pyarrow's C++ Flight serving the same table (8192-row batches) and reading it \
                   with DoGet, both in one Python process. (2) `SELECT 1` back to back from \
                   K clients, and from K in-process sessions: latency (median, p99) and \
                   statements per second. (3) `SELECT slow_gpu(0)` (GPU required, \
                   no work) from one client, then from two at once on one simulated GPU: the \
                   latency each client sees; the difference is what waiting for and handing \
                   over the lease costs over the wire. (4) With a users file: `SELECT 1` from one \
                   logged-in client, idle and while 4 clients try wrong passwords. (5) `GET /metrics` \
                   on the HTTP endpoint with 1,000 sessions open."
            .into();
    // `ACCELSQL_BENCH_SERVER=metrics`: the metrics scrape alone (a quick look at that goal).
    if std::env::var("ACCELSQL_BENCH_SERVER").is_ok_and(|part| part == "metrics") {
        return metrics_scrape(result).await;
    }
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(1),
        ..EngineOptions::default()
    })?;
    accelsql_engine::testing::register_fixtures(&engine)?;
    let server = ServerHandle::start(
        engine.clone(),
        ServerOptions {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            ..ServerOptions::default()
        },
    )
    .await
    .map_err(|e| bench_err!("the server did not start: {e}"))?;
    let at = Endpoint {
        url: server.url().to_string(),
        token: server.token().map(str::to_string),
    };
    let progress = Progress::new("server", 5, "parts");

    progress.set_message("wide result");
    let rows = ctx.scaled(BASE_ROWS, 1000);
    for case in wide_cases(rows) {
        let mut wide = Table::new(format!("server: {}", case.0), "rows", Some(IN_PROCESS));
        wide_result(ctx, &engine, &at, &case, rows, &mut wide).await?;
        wide.fill_ratios();
        result.notes.extend(wide_goals(&case.0, case.3, &wide));
        result.tables.push(wide);
    }
    progress.inc(1);

    progress.set_message("tiny statements");
    let mut tiny = Table::new("server: SELECT 1 from K clients", "clients", None).without_rate();
    let mut rates = Vec::new();
    for k in CLIENTS {
        for (engine_name, over_wire) in [(IN_PROCESS_SESSIONS, false), (FLIGHT_RS_CLIENTS, true)] {
            let (mut latencies, elapsed) = if over_wire {
                tiny_statements(&at, k).await?
            } else {
                tiny_in_process(&engine, k).await?
            };
            latencies.sort();
            let n = latencies.len() as f64;
            let secs: Vec<f64> = latencies.iter().map(Duration::as_secs_f64).collect();
            let rate = n / elapsed.as_secs_f64().max(1e-9);
            let figure = measured("SELECT 1", engine_name, k as u64, &latencies)
                .with_metric("statements", n)
                .with_metric("statements_per_s", rate)
                .with_metric("p99_ms", percentile_of_sorted(&secs, 0.99) * 1e3);
            let median = figure.outcome.stats().map(|s| s.median_s);
            rates.push((
                k,
                over_wire,
                rate,
                median,
                percentile_of_sorted(&secs, 0.99),
            ));
            tiny.push(figure);
        }
    }
    result.notes.extend(tiny_goals(&rates));
    result.tables.push(tiny);
    progress.inc(1);

    progress.set_message("lease hand-off");
    let (alone, contended) = handoffs(&at).await?;
    let mut lease = Table::new(
        "server: GPU statement latency, 1 client vs 2 on 1 simulated GPU",
        "clients",
        None,
    )
    .without_rate();
    for (clients, samples) in [(1u64, &alone), (2, &contended)] {
        if let Some(stats) = Stats::of_secs(samples) {
            lease.push(
                Figure::new(
                    "SELECT slow_gpu(0)",
                    "Flight SQL, arrow-rs clients",
                    clients,
                    Outcome::Measured { stats },
                )
                .with_metric("p99_ms", percentile_of_sorted(samples, 0.99) * 1e3),
            );
        }
    }
    if let (Some(a), Some(b)) = (Stats::of_secs(&alone), Stats::of_secs(&contended)) {
        result.notes.push(format!(
            "GPU statement over the wire ({HANDOFFS} per client): {:.2} ms median from one \
             client alone; {:.2} ms from each of two clients taking turns on the one lease \
             (every statement then waits for the other's, plus the hand-off: {:+.2} ms \
             against alone, where one client's round trip overlaps the other's turn).",
            a.median_s * 1e3,
            b.median_s * 1e3,
            (b.median_s - a.median_s) * 1e3
        ));
    }
    result.distributions.push(Distribution::new(
        "GPU statement latency, 2 clients on 1 simulated GPU",
        "server-handoff",
        contended.iter().map(|s| s * 1e6).collect(),
    ));
    result.tables.push(lease);
    progress.inc(1);

    progress.set_message("login storm");
    login_storm(ctx, result).await?;
    progress.inc(1);
    progress.set_message("metrics scrape");
    metrics_scrape(result).await?;
    progress.inc(1);
    progress.finish();
    result.notes.push(
        "SIMULATED device: the lease queue and its hand-off are real; slow_gpu(0) runs no GPU \
         code. Loopback only: no network latency or bandwidth limit is in these figures."
            .into(),
    );
    server
        .stop()
        .await
        .map_err(|e| bench_err!("the server did not stop: {e}"))?;
    Ok(())
}
