//! A cluster with a secret refuses whoever lacks it: clients, executors, and raw gRPC and Flight
//! calls to the scheduler's, executors' task and Flight ports; the scheduler refuses an
//! executor claiming a node that is held or outside the cluster; and without a secret nothing
//! listens off loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use accelsql_cluster::{
    ClusterAuth, ClusterClient, ClusterError, ExecutorOptions, NodeOptions, SchedulerOptions,
    run_executor, start_scheduler,
};
use accelsql_engine::SchedulerConfig;
use arrow_flight::Ticket;
use arrow_flight::flight_service_client::FlightServiceClient;
use ballista_core::serde::protobuf::RemoveJobDataParams;
use ballista_core::serde::protobuf::executor_grpc_client::ExecutorGrpcClient;
use tonic::transport::{Channel, Endpoint};

use crate::cluster::{NODES, TestCluster, client, rows, start_cluster};

/// Another cluster's secret.
fn other_secret(dir: &tempfile::TempDir) -> ClusterAuth {
    let path = dir.path().join("other-secret");
    ClusterAuth::write_secret_file(&path).unwrap();
    ClusterAuth::from_secret_file(&path).unwrap()
}

/// A channel to `host:port`: plain HTTP/2, or TLS with `auth`'s certificate.
async fn channel(host: &str, port: u16, auth: &ClusterAuth) -> Result<Channel, String> {
    let mut endpoint = Endpoint::from_shared(format!("http://{host}:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    if let Some(secure) = auth.endpoint_override() {
        endpoint = secure(endpoint).unwrap();
    }
    endpoint.connect().await.map_err(|e| format!("{e:?}"))
}

/// Asks an executor's task port to remove a job's data (a job that does not exist): whether
/// the service answered (`Ok`, with its answer) or the connection was refused.
async fn task_port_call(host: &str, port: u16, auth: &ClusterAuth) -> Result<String, String> {
    let channel = channel(host, port, auth).await?;
    ExecutorGrpcClient::new(channel)
        .remove_job_data(RemoveJobDataParams {
            job_id: "no-such-job".into(),
            remove_stage_ids: vec![],
        })
        .await
        .map(|_| "removed".to_string())
        .map_err(|e| format!("{e:?}"))
}

/// Fetches a (made-up) partition from an executor's Flight port: `Ok` with the service's own
/// refusal when the call reached it, `Err` when the connection was refused.
async fn flight_fetch(host: &str, port: u16, auth: &ClusterAuth) -> Result<String, String> {
    let channel = channel(host, port, auth).await?;
    let answer = FlightServiceClient::new(channel)
        .do_get(Ticket::new("job abc / stage 1 / partition 0"))
        .await;
    match answer {
        Ok(_) => Ok("data".into()),
        // The service itself answered: it parsed (and refused) the ticket.
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::InvalidArgument | tonic::Code::Internal | tonic::Code::NotFound
            ) && !status.message().contains("transport") =>
        {
            Ok(format!("service: {}", status.message()))
        }
        Err(status) => Err(format!("{status:?}")),
    }
}

/// The first executor's host, Flight port and task port.
async fn an_executor(cluster: &TestCluster) -> (String, u16, u16) {
    let endpoints = cluster.scheduler.executor_endpoints().await.unwrap();
    let (_, host, flight, task) = endpoints.into_iter().next().unwrap();
    (host, flight, task)
}

#[tokio::test]
async fn clients_without_the_secret_are_refused_with_a_coded_error() {
    let cluster = start_cluster().await;
    let address = cluster.scheduler.address().to_string();
    let dir = tempfile::tempdir().unwrap();
    for (who, auth) in [
        ("no secret", ClusterAuth::none()),
        ("another cluster's secret", other_secret(&dir)),
    ] {
        let start = Instant::now();
        let e = ClusterClient::connect(&address, auth, None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), ClusterError::AUTHENTICATION, "{who}: {e}");
        assert!(start.elapsed() < Duration::from_secs(10), "{who}");
    }
    // The secret's holder is served, and learns the node count from the scheduler.
    let ok = ClusterClient::connect(&address, cluster.auth(), None)
        .await
        .unwrap();
    assert_eq!(ok.nodes(), NODES);
    let e = ClusterClient::connect(&address, cluster.auth(), Some(NODES + 2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "22E03", "{e}");
    assert!(e.to_string().contains("has 3 node(s)"), "{e}");
}

#[tokio::test]
async fn raw_calls_to_the_task_and_flight_ports_need_the_secret() {
    let cluster = start_cluster().await;
    let (host, flight, task) = an_executor(&cluster).await;
    let dir = tempfile::tempdir().unwrap();
    let other = other_secret(&dir);
    for (who, auth) in [
        ("no secret", ClusterAuth::none()),
        ("another secret", other),
    ] {
        let e = task_port_call(&host, task, &auth).await.unwrap_err();
        assert!(!e.is_empty(), "{who}");
        let e = flight_fetch(&host, flight, &auth).await.unwrap_err();
        assert!(!e.is_empty(), "{who}");
    }
    // With the cluster's certificate the same calls reach the services: the refusals above
    // are the authentication's, not a broken request's.
    let answered = task_port_call(&host, task, &cluster.auth()).await;
    assert!(answered.is_ok(), "{answered:?}");
    let answered = flight_fetch(&host, flight, &cluster.auth()).await;
    assert!(answered.is_ok(), "{answered:?}");
}

/// Runs an executor of node `node` of `count` against `cluster`'s scheduler with `auth`, and
/// returns how it ended (it must end by itself, within 20 seconds).
async fn rogue_executor(
    cluster: &TestCluster,
    node: usize,
    count: usize,
    auth: ClusterAuth,
) -> ClusterError {
    let mut options = ExecutorOptions::new(
        cluster.scheduler.address().to_string(),
        NodeOptions::new(
            node,
            count,
            SchedulerConfig::default().with_simulated_gpus(0),
        ),
    );
    options.vcores = 1;
    options.auth = auth;
    let start = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(20), run_executor(options))
        .await
        .expect("a refused executor stops by itself");
    let e = ended.expect_err("a refused executor fails");
    assert!(start.elapsed() < Duration::from_secs(20));
    e
}

#[tokio::test]
async fn rogue_executors_are_refused_and_get_no_task() {
    let cluster = start_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let e = rogue_executor(&cluster, 1, NODES, ClusterAuth::none()).await;
    assert_eq!(e.code(), ClusterError::AUTHENTICATION, "{e}");
    let e = rogue_executor(&cluster, 1, NODES, other_secret(&dir)).await;
    assert_eq!(e.code(), ClusterError::AUTHENTICATION, "{e}");
    // The secret's holder, claiming a node that is held, outside the cluster, or with another
    // node count.
    for (node, count, why) in [
        (0, NODES, "is held by executor node-0-of-3-"),
        (7, 8, "the cluster has 3 node(s)"),
        (1, 5, "the cluster has 3 node(s)"),
    ] {
        let e = rogue_executor(&cluster, node, count, cluster.auth()).await;
        assert_eq!(e.code(), ClusterError::NODE_REFUSED, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // None of them joined: the cluster has its 3 executors, and each node's rows are its own.
    let ids = cluster.scheduler.executors().await.unwrap();
    assert_eq!(ids.len(), NODES, "{ids:?}");
    let engine = client(&cluster).await;
    let got = rows(
        &engine
            .session()
            .sql(
                "SELECT iproc() AS node, count(*) FROM (VALUES (1), (2), (3), (4), (5), (6)) \
                 GROUP BY iproc() ORDER BY node",
            )
            .await
            .unwrap(),
    );
    assert!(!got.is_empty());
    for row in &got {
        let node: usize = row[0].parse().unwrap();
        assert!(node < NODES, "{got:?}");
    }
}

#[tokio::test]
async fn without_a_secret_nothing_listens_off_loopback() {
    let e = start_scheduler(SchedulerOptions {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..SchedulerOptions::default()
    })
    .await
    .unwrap_err();
    assert_eq!(e.code(), ClusterError::INSECURE, "{e}");
    assert!(e.to_string().contains("--secret-file"), "{e}");
    let mut options = ExecutorOptions::new(
        "127.0.0.1:1",
        NodeOptions::new(0, 1, SchedulerConfig::default().with_simulated_gpus(0)),
    );
    options.bind_host = "0.0.0.0".into();
    let e = run_executor(options).await.unwrap_err();
    assert_eq!(e.code(), ClusterError::INSECURE, "{e}");
}

/// Writes a certificate authority and one certificate it issued for 127.0.0.1 (server and
/// client authentication) into `dir`: (cert, key, ca) paths; the key owner-only.
fn operator_pki(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        SanType,
    };
    use std::io::Write;
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert_pem = leaf.signed_by(&key, &issuer).unwrap().pem();
    let (cert, key_path, ca) = (
        dir.join("node.pem"),
        dir.join("node.key"),
        dir.join("ca.pem"),
    );
    std::fs::write(&cert, cert_pem).unwrap();
    std::fs::write(&ca, ca_pem).unwrap();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&key_path)
        .unwrap()
        .write_all(key.serialize_pem().as_bytes())
        .unwrap();
    (cert, key_path, ca)
}

#[tokio::test]
async fn the_operators_certificates_work_instead_of_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = operator_pki(dir.path());
    let auth = || ClusterAuth::from_tls_files(&cert, &key, &ca).unwrap();
    let scheduler = start_scheduler(SchedulerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        auth: auth(),
        nodes: Some(1),
        ..SchedulerOptions::default()
    })
    .await
    .unwrap();
    let address = scheduler.address().to_string();
    let mut options = ExecutorOptions::new(
        address.clone(),
        NodeOptions::new(0, 0, SchedulerConfig::default().with_simulated_gpus(0)),
    );
    options.vcores = 1;
    options.auth = auth();
    let executor = tokio::spawn(run_executor(options));
    scheduler
        .wait_for_executors(1, Duration::from_secs(30))
        .await
        .unwrap();
    let client = ClusterClient::connect(&address, auth(), None)
        .await
        .unwrap();
    assert_eq!(client.nodes(), 1);
    let engine = accelsql_engine::Engine::with_options(client.engine_options(
        accelsql_engine::EngineOptions {
            scheduler: SchedulerConfig::default().with_simulated_gpus(0),
            ..accelsql_engine::EngineOptions::default()
        },
    ))
    .unwrap();
    let got = rows(
        &engine
            .session()
            .sql("SELECT iproc() AS node, sum(x) FROM (VALUES (1), (2), (3)) AS t(x) GROUP BY 1")
            .await
            .unwrap(),
    );
    assert_eq!(got, [["0", "6"]]);
    // A client of a cluster secret is not one of these certificates.
    let e = ClusterClient::connect(&address, other_secret(&dir), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ClusterError::AUTHENTICATION, "{e}");
    // A key file others can read is refused.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = ClusterAuth::from_tls_files(&cert, &key, &ca).unwrap_err();
    assert_eq!(e.code(), ClusterError::INSECURE, "{e}");
    executor.abort();
}
