//! The cluster processes' operator endpoints (`--http`): each executor serves its node's
//! metrics under its own `node` label, the scheduler the tasks each node ran, and both answer
//! the probes; a cluster without a secret keeps them on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accelsql_cluster::{
    ClusterAuth, ClusterClient, ExecutorOptions, NodeOptions, SchedulerOptions, run_executor,
    start_scheduler,
};
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The body of `GET path` at `at` (plain HTTP/1.1), with the status line first.
async fn get(at: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(at).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(answer).unwrap()
}

/// The value of the sample `series` (name and labels as written) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .trim()
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_node_and_the_scheduler_serve_their_metrics() {
    let scheduler = start_scheduler(SchedulerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        http: Some("127.0.0.1:0".parse().unwrap()),
        ..SchedulerOptions::default()
    })
    .await
    .unwrap();
    let scheduler_http = scheduler.http_address().unwrap();
    let announced: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut executors = Vec::new();
    for node in 0..2 {
        let mut executor = ExecutorOptions::new(
            scheduler.address().to_string(),
            NodeOptions::new(node, 2, SchedulerConfig::default().with_simulated_gpus(2)),
        );
        executor.vcores = 2;
        executor.http = Some("127.0.0.1:0".parse().unwrap());
        let lines = Arc::clone(&announced);
        executor.events = Some(Arc::new(move |line: &str| {
            lines.lock().unwrap().push(line.to_string());
        }));
        executors.push(tokio::spawn(async move {
            if let Err(e) = run_executor(executor).await {
                eprintln!("executor {node}: {e}");
            }
        }));
    }
    scheduler
        .wait_for_executors(2, Duration::from_secs(30))
        .await
        .unwrap();
    // Each executor says where its endpoint listens: `node K: http: ADDR`.
    let mut http: Vec<(usize, SocketAddr)> = announced
        .lock()
        .unwrap()
        .iter()
        .map(|l| {
            let (node, at) = l
                .strip_prefix("node ")
                .unwrap()
                .split_once(": http: ")
                .unwrap();
            (node.parse().unwrap(), at.parse().unwrap())
        })
        .collect();
    http.sort();
    assert_eq!(http.len(), 2, "{http:?}");

    let client =
        ClusterClient::connect(&scheduler.address().to_string(), ClusterAuth::none(), None)
            .await
            .unwrap();
    let engine = Engine::with_options(client.engine_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        ..EngineOptions::default()
    }))
    .unwrap();
    let s = engine.session();
    s.sql(
        "CREATE PYTHON3 SCALAR SCRIPT on_gpu(x BIGINT) RETURNS BIGINT AS\n\
         %perInstanceRequiredAcceleratorDevices GpuNvidia;\n\
         def run(ctx):\n    return ctx.x\n/",
    )
    .await
    .unwrap();
    s.sql("SELECT sum(on_gpu(value)) FROM generate_series(1, 1000)")
        .await
        .unwrap();

    for (node, at) in &http {
        assert!(get(*at, "/healthz").await.starts_with("HTTP/1.1 200"));
        let text = get(*at, "/metrics").await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let memory =
            format!("accelsql_device_memory_bytes{{node=\"{node}\",device=\"1\",kind=\"total\"}}");
        assert!(sample(&text, &memory).is_some_and(|b| b > 0.0), "{text}");
        let granted =
            format!("accelsql_lease_requests_total{{node=\"{node}\",outcome=\"granted\"}}");
        assert!(sample(&text, &granted).is_some(), "{text}");
        assert!(
            text.contains(&format!("accelsql_script_workers{{node=\"{node}\"}}")),
            "{text}"
        );
    }
    // The GPU calls ran on the nodes: counted there, by placement and reason.
    let mut gpu_calls = 0.0;
    for (node, at) in &http {
        let text = get(*at, "/metrics").await;
        let series = format!(
            "accelsql_udf_calls_total{{node=\"{node}\",placement=\"gpu\",reason=\"required\"}}"
        );
        gpu_calls += sample(&text, &series).unwrap_or(0.0);
    }
    assert!(gpu_calls >= 1.0, "no node counted the GPU call");

    let text = get(scheduler_http, "/metrics").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(
        sample(&text, "accelsql_cluster_executors"),
        Some(2.0),
        "{text}"
    );
    let successful: f64 = (0..2)
        .filter_map(|k| {
            sample(
                &text,
                &format!("accelsql_cluster_tasks_total{{node=\"{k}\",outcome=\"successful\"}}"),
            )
        })
        .sum();
    assert!(successful >= 1.0, "{text}");
    assert_eq!(
        sample(&text, "accelsql_cluster_executors_lost_total"),
        Some(0.0),
        "{text}"
    );
    assert!(get(scheduler_http, "/readyz").await.ends_with("ready\n"));

    // Without a secret the endpoint stays on loopback, as the cluster's ports do.
    let refused = start_scheduler(SchedulerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        http: Some("0.0.0.0:0".parse().unwrap()),
        ..SchedulerOptions::default()
    })
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("HTTP endpoint"), "{refused}");
    for e in executors {
        e.abort();
    }
}
