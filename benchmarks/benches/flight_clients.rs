//! Flight SQL clients taking turns on a running `accelsql serve`: K clients (arrow-rs's Flight SQL
//! client, one session each) run the same statement M times at once; then one more connection
//! reads `accelsql.udf_calls` (every session's calls when it logs in as the server's
//! `--admin-user`; the user name is `flight_clients`) to say where the calls ran. For the GPU verification kit
//! (`scripts/gpu-verify/on-device.sh`), where no Python ADBC driver can be installed.
//!
//! Run: `flight_clients --url grpc://127.0.0.1:50051 [--token T] [--clients K] [--statements M]
//! [--sql SQL]` (`--token`: the server's, printed as its `token:` line; also `ACCELSQL_TOKEN`)
//! (with `cargo bench -p accelsql-benchmarks --bench flight_clients -- …` against a server you
//! started). Prints each client's median and maximum statement latency and the rows returned,
//! then the server's calls so far by placement, with their GPU and CPU fallback batches. Exits
//! non-zero when a statement fails or a client's statements return different row counts.

use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use tonic::transport::Channel;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The default statement: Black–Scholes over 2M generated rows (GPU preferred).
const DEFAULT_SQL: &str = "SELECT count(*) AS n, sum(black_scholes_call(50 + (value % 100), 75.0, 1.0, 0.03, 0.2)) AS s \
                           FROM generate_series(1, 2000000)";

struct Options {
    url: String,
    token: Option<String>,
    clients: usize,
    statements: usize,
    sql: String,
}

fn options() -> Result<Options, BoxError> {
    let mut out = Options {
        url: "grpc://127.0.0.1:50051".into(),
        token: std::env::var("ACCELSQL_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
        clients: 2,
        statements: 20,
        sql: DEFAULT_SQL.into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => out.url = value()?,
            "--token" => out.token = Some(value()?),
            "--clients" => out.clients = value()?.parse::<usize>()?.clamp(1, 64),
            "--statements" => out.statements = value()?.parse::<usize>()?.clamp(1, 10_000),
            "--sql" => out.sql = value()?,
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    Ok(out)
}

type Client = FlightSqlServiceClient<Channel>;

/// Runs `sql` and returns its batches.
async fn fetch(c: &mut Client, sql: &str) -> Result<Vec<RecordBatch>, BoxError> {
    let info = c.execute(sql.to_string(), None).await?;
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("an endpoint without a ticket")?;
        let batches: Vec<RecordBatch> = c.do_get(ticket).await?.try_collect().await?;
        out.extend(batches);
    }
    Ok(out)
}

/// One client's run: its latencies and row counts.
struct ClientRun {
    latencies: Vec<Duration>,
    rows: Vec<usize>,
}

/// A client of the server at `url`, logged in with `token` (any user name) when given.
async fn connect(url: String, token: Option<String>) -> Result<Client, BoxError> {
    let channel = Channel::from_shared(url)?.connect().await?;
    let mut c = FlightSqlServiceClient::new(channel);
    if let Some(token) = token {
        c.handshake("flight_clients", &token).await?;
    }
    Ok(c)
}

async fn run_client(
    url: String,
    token: Option<String>,
    statements: usize,
    sql: String,
) -> Result<ClientRun, BoxError> {
    let mut c = connect(url, token).await?;
    let mut run = ClientRun {
        latencies: Vec::with_capacity(statements),
        rows: Vec::with_capacity(statements),
    };
    for _ in 0..statements {
        let start = Instant::now();
        let batches = fetch(&mut c, &sql).await?;
        run.latencies.push(start.elapsed());
        run.rows
            .push(batches.iter().map(RecordBatch::num_rows).sum());
    }
    Ok(run)
}

/// The server's calls so far (every session's) by placement: (placement, calls, GPU batches,
/// CPU fallback batches).
async fn placements(
    url: String,
    token: Option<String>,
) -> Result<Vec<(String, i64, i64, i64)>, BoxError> {
    let mut c = connect(url, token).await?;
    let calls = fetch(
        &mut c,
        "SELECT CAST(placement AS VARCHAR) AS placement, count(*) AS calls, \
         CAST(sum(gpu_batches) AS BIGINT) AS gpu_batches, \
         CAST(sum(cpu_fallback_batches) AS BIGINT) AS cpu_fallback_batches \
         FROM accelsql.udf_calls GROUP BY placement ORDER BY placement",
    )
    .await?;
    let mut out = Vec::new();
    for b in &calls {
        let placement = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Utf8)?;
        let placement = placement.as_string::<i32>();
        let ints = |i: usize| -> Result<arrow::array::Int64Array, BoxError> {
            let a = arrow::compute::cast(b.column(i), &arrow::datatypes::DataType::Int64)?;
            Ok(a.as_primitive::<Int64Type>().clone())
        };
        let (calls, gpu, cpu) = (ints(1)?, ints(2)?, ints(3)?);
        for r in 0..b.num_rows() {
            let value = |a: &arrow::array::Int64Array| if a.is_null(r) { 0 } else { a.value(r) };
            out.push((
                placement.value(r).to_string(),
                value(&calls),
                value(&gpu),
                value(&cpu),
            ));
        }
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), BoxError> {
    let o = options()?;
    println!(
        "{} Flight SQL clients × {} statements at {}: {}",
        o.clients, o.statements, o.url, o.sql
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let runs: Vec<Result<ClientRun, BoxError>> = rt.block_on(async {
        let handles: Vec<_> = (0..o.clients)
            .map(|_| {
                tokio::spawn(run_client(
                    o.url.clone(),
                    o.token.clone(),
                    o.statements,
                    o.sql.clone(),
                ))
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(match h.await {
                Ok(r) => r,
                Err(e) => Err(Box::new(e) as BoxError),
            });
        }
        out
    });
    let wall = started.elapsed();
    let mut failed = false;
    for (i, run) in runs.iter().enumerate() {
        match run {
            Ok(run) => {
                let mut sorted = run.latencies.clone();
                sorted.sort();
                let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
                let max = sorted.last().copied().unwrap_or_default();
                let same_rows = run.rows.windows(2).all(|w| w[0] == w[1]);
                failed |= !same_rows;
                println!(
                    "client {i}: {} statements, median {:.2} ms, max {:.2} ms, rows per statement {:?}{}",
                    run.latencies.len(),
                    ms(median),
                    ms(max),
                    run.rows.first(),
                    if same_rows {
                        ""
                    } else {
                        " (DIFFERENT row counts)"
                    }
                );
            }
            Err(e) => {
                failed = true;
                println!("client {i}: FAILED: {e}");
            }
        }
    }
    println!(
        "all clients: {:.2} s wall, {:.1} statements/s",
        wall.as_secs_f64(),
        (o.clients * o.statements) as f64 / wall.as_secs_f64()
    );
    match rt.block_on(placements(o.url.clone(), o.token.clone())) {
        Ok(rows) => {
            for (placement, calls, gpu, cpu) in rows {
                println!(
                    "server's calls so far, placement {placement}: {calls} calls, {gpu} GPU batches, {cpu} CPU fallback batches"
                );
            }
        }
        Err(e) => {
            failed = true;
            println!("accelsql.udf_calls: FAILED: {e}");
        }
    }
    if failed {
        return Err("a client failed".into());
    }
    Ok(())
}
