//! The server as a stranger on the network meets it (loopback only, every loop bounded): silent
//! and half-sent connections are closed by the login deadline while logged-in clients work,
//! sessions belong to tokens and end with their connections, logins are rate limited, users
//! have caps, log lines cannot be forged, and unsafe configurations are refused at startup.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accelsql_engine::datafusion::arrow::array::{AsArray, RecordBatch};
use accelsql_engine::datafusion::arrow::datatypes::Int64Type;
use accelsql_engine::{Engine, EngineOptions, SchedulerConfig};
use accelsql_server::{
    LogSink, Server, ServerAuth, ServerError, ServerHandle, ServerOptions, add_user, status_code,
};
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use tokio::io::AsyncReadExt;
use tonic::Code;
use tonic::transport::Channel;

type Client = FlightSqlServiceClient<Channel>;

fn engine() -> Engine {
    Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(0),
        ..EngineOptions::default()
    })
    .unwrap()
}

/// An engine with one simulated GPU and the fixture UDFs (`slow_gpu`).
fn gpu_engine() -> Engine {
    let engine = Engine::with_options(EngineOptions {
        scheduler: SchedulerConfig::default().with_simulated_gpus(1),
        ..EngineOptions::default()
    })
    .unwrap();
    accelsql_engine::testing::register_fixtures(&engine).unwrap();
    engine
}

fn options() -> ServerOptions {
    ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..ServerOptions::default()
    }
}

/// A server on loopback over [`engine`], with `options` (on top of [`options`]).
async fn serve(options: ServerOptions) -> ServerHandle {
    ServerHandle::start(engine(), options).await.unwrap()
}

async fn channel(server: &ServerHandle) -> Channel {
    Channel::from_shared(server.url().to_string())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A channel to `server` from the loopback address `from` (say 127.0.0.2): what the server
/// sees as another machine.
async fn channel_from(url: &str, to: std::net::SocketAddr, from: std::net::Ipv4Addr) -> Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind((from, 0).into())?;
            let stream = socket.connect(to).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }))
        .await
        .unwrap()
}

async fn login(server: &ServerHandle, user: &str) -> Result<Client, FlightError> {
    let mut c = FlightSqlServiceClient::new(channel(server).await);
    c.handshake(user, server.token().unwrap()).await?;
    Ok(c)
}

async fn query(c: &mut Client, sql: &str) -> Result<Vec<RecordBatch>, FlightError> {
    let info = c.execute(sql.to_string(), None).await?;
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    c.do_get(ticket).await?.try_collect().await
}

async fn one(c: &mut Client, sql: &str) -> i64 {
    let batches = query(c, sql).await.unwrap();
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

fn code_of(e: &FlightError) -> (Code, String) {
    match e {
        FlightError::Tonic(s) => (s.code(), status_code(s).unwrap_or_default()),
        other => panic!("not a gRPC status: {other:?}"),
    }
}

/// A minimal client of the Exasol port, sending what pyexasol sends: a login with the token
/// encrypted by the server's RSA key, then one request and one answer at a time.
struct ExaClient {
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    last: String,
}

impl ExaClient {
    async fn login(addr: std::net::SocketAddr, user: &str, token: &str) -> Self {
        use rsa::pkcs1::DecodeRsaPublicKey;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}"), stream)
            .await
            .unwrap();
        let mut c = Self {
            ws,
            last: String::new(),
        };
        let offer = c
            .request(serde_json::json!({"command": "login", "protocolVersion": 3}))
            .await;
        let pem = offer["responseData"]["publicKeyPem"].as_str().unwrap();
        let key = rsa::RsaPublicKey::from_pkcs1_pem(pem).unwrap();
        let sealed = key
            .encrypt(
                &mut rand::thread_rng(),
                rsa::Pkcs1v15Encrypt,
                token.as_bytes(),
            )
            .unwrap();
        use base64::Engine as _;
        let password = base64::engine::general_purpose::STANDARD.encode(sealed);
        let reply = c
            .request(serde_json::json!({"username": user, "password": password}))
            .await;
        assert_eq!(reply["status"], "ok", "{reply}");
        c
    }

    async fn send(&mut self, request: serde_json::Value) {
        use futures::SinkExt;
        let text = request.to_string();
        self.last = text.chars().take(80).collect();
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::Text(text.into()))
            .await
            .unwrap();
    }

    /// The next answer (heartbeats skipped).
    async fn answer(&mut self) -> serde_json::Value {
        use futures::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
                Some(Ok(_)) => continue,
                other => panic!(
                    "the Exasol port closed the connection after {}: {other:?}",
                    self.last
                ),
            }
        }
    }

    async fn request(&mut self, request: serde_json::Value) -> serde_json::Value {
        self.send(request).await;
        self.answer().await
    }

    /// Runs `sql`: `Err(code)` for an error answer.
    async fn execute(&mut self, sql: &str) -> Result<serde_json::Value, String> {
        let reply = self
            .request(serde_json::json!({"command": "execute", "sqlText": sql}))
            .await;
        match reply["status"].as_str() {
            Some("ok") => Ok(reply),
            _ => Err(reply["exception"]["sqlCode"].as_str().unwrap().to_string()),
        }
    }
}

fn mt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        // The server plans statements on these threads, as `serve`'s runtime does.
        .thread_stack_size(accelsql_engine::STATEMENT_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap()
}

/// This process's open-file limit (soft), from /proc; 1024 when unknown.
fn fd_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(1024)
}

#[test]
fn silent_connections_are_closed_by_the_deadline_while_a_logged_in_client_works() {
    mt().block_on(async {
        let server = serve(ServerOptions {
            handshake_timeout: Duration::from_secs(1),
            ..options()
        })
        .await;
        let mut c = login(&server, "worker").await.unwrap();
        // Each silent connection costs two descriptors here (both ends are in this process).
        let n = 500.min(fd_limit().saturating_sub(300) / 2);
        assert!(
            n >= 100,
            "too few file descriptors for this test: {}",
            fd_limit()
        );
        let mut silent = Vec::with_capacity(n);
        for _ in 0..n {
            silent.push(tokio::net::TcpStream::connect(server.addr()).await.unwrap());
        }
        let started = Instant::now();
        // The logged-in client keeps working meanwhile.
        assert_eq!(one(&mut c, "SELECT 40 + 2").await, 42);
        let mut closed = 0;
        for mut s in silent {
            let mut buf = [0u8; 64];
            // Whatever the server sent (its HTTP/2 settings) is read, then the end.
            let deadline = started + Duration::from_secs(15);
            loop {
                match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        closed += 1;
                        break;
                    }
                    Ok(Ok(_)) => continue,
                    Err(_) => break,
                }
            }
        }
        assert_eq!(closed, n, "every silent connection is closed by the server");
        assert_eq!(one(&mut c, "SELECT 7").await, 7);
        server.stop().await.unwrap();
    });
}

#[test]
fn a_half_sent_message_without_a_login_is_cut_off_at_the_deadline() {
    mt().block_on(async {
        let server = serve(ServerOptions {
            handshake_timeout: Duration::from_secs(1),
            ..options()
        })
        .await;
        let mut c = login(&server, "worker").await.unwrap();
        // Basic credentials pass the header check (only the handshake takes them), so the
        // 48 MiB body would be read; the server stops at its pre-login budget and closes the
        // connection at the deadline.
        let mut raw =
            arrow_flight::flight_service_client::FlightServiceClient::new(channel(&server).await)
                .max_encoding_message_size(64 << 20);
        let mut request =
            tonic::Request::new(arrow_flight::FlightDescriptor::new_cmd(vec![0u8; 48 << 20]));
        request
            .metadata_mut()
            .insert("authorization", "Basic eDp5".parse().unwrap());
        let started = Instant::now();
        let attack = tokio::spawn(async move { raw.get_flight_info(request).await });
        assert_eq!(one(&mut c, "SELECT 5").await, 5);
        let outcome = tokio::time::timeout(Duration::from_secs(20), attack)
            .await
            .expect("the connection is closed at the deadline")
            .unwrap();
        assert!(outcome.is_err());
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_eq!(one(&mut c, "SELECT 6").await, 6);
        server.stop().await.unwrap();
    });
}

#[test]
fn a_session_belongs_to_its_token_and_ends_with_its_connections() {
    mt().block_on(async {
        let server = serve(ServerOptions {
            session_grace: Duration::from_millis(300),
            ..options()
        })
        .await;
        let mut a = login(&server, "ann").await.unwrap();
        query(&mut a, "CREATE TEMPORARY TABLE mine AS SELECT 1 AS x")
            .await
            .unwrap();
        let token = a.token().unwrap().clone();
        // Another connection without the token sees nothing of it.
        let mut b = login(&server, "ann").await.unwrap();
        assert!(query(&mut b, "SELECT x FROM mine").await.is_err());
        // While a's connection lives, its token works on a second connection too.
        let mut again = FlightSqlServiceClient::new(channel(&server).await);
        again.set_token(token.clone());
        assert_eq!(one(&mut again, "SELECT x FROM mine").await, 1);
        drop(again);
        drop(a);
        // Once every connection of the session has closed, it ends after the grace (the reaper
        // looks every second); its token is then refused.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let mut late = FlightSqlServiceClient::new(channel(&server).await);
        late.set_token(token.clone());
        let e = query(&mut late, "SELECT 1").await.unwrap_err();
        assert_eq!(code_of(&e), (Code::Unauthenticated, "28000".into()));
        server.stop().await.unwrap();
    });
}

#[test]
fn without_authentication_each_connection_is_its_own_session() {
    mt().block_on(async {
        let server = serve(ServerOptions {
            auth: ServerAuth::None,
            ..options()
        })
        .await;
        assert!(server.token().is_none());
        let mut a = FlightSqlServiceClient::new(channel(&server).await);
        query(&mut a, "CREATE TEMPORARY TABLE mine AS SELECT 1 AS x")
            .await
            .unwrap();
        assert_eq!(one(&mut a, "SELECT x FROM mine").await, 1);
        for _ in 0..3 {
            let mut b = FlightSqlServiceClient::new(channel(&server).await);
            assert!(query(&mut b, "SELECT x FROM mine").await.is_err());
        }
        server.stop().await.unwrap();
    });
}

#[test]
fn users_have_caps_on_sessions_and_statements() {
    mt().block_on(async {
        let server = serve(ServerOptions {
            max_sessions_per_user: 2,
            max_statements_per_user: 2,
            ..options()
        })
        .await;
        let mut a = login(&server, "ann").await.unwrap();
        let _a2 = login(&server, "ann").await.unwrap();
        let e = login(&server, "ann").await.unwrap_err();
        assert!(e.to_string().contains("[53S01]"), "{e}");
        // Another user is not held up.
        let mut b = login(&server, "bob").await.unwrap();
        // Two results waiting to be fetched are ann's limit.
        let first = a.execute("SELECT 1".into(), None).await.unwrap();
        let _second = a.execute("SELECT 2".into(), None).await.unwrap();
        let e = a.execute("SELECT 3".into(), None).await.unwrap_err();
        assert_eq!(
            code_of(&e),
            (Code::ResourceExhausted, "53S02".into()),
            "{e}"
        );
        assert_eq!(one(&mut b, "SELECT 4").await, 4);
        // Fetching one makes room.
        let ticket = first.endpoint[0].ticket.clone().unwrap();
        let _: Vec<RecordBatch> = a.do_get(ticket).await.unwrap().try_collect().await.unwrap();
        a.execute("SELECT 5".into(), None).await.unwrap();
        server.stop().await.unwrap();
    });
}

#[test]
fn a_session_past_its_memory_budget_gets_53200_and_the_server_goes_on() {
    mt().block_on(async {
        let engine = Engine::with_options(EngineOptions {
            scheduler: SchedulerConfig::default().with_simulated_gpus(0),
            restricted: true,
            session_memory_limit: Some(8 << 20),
            ..EngineOptions::default()
        })
        .unwrap();
        let server = ServerHandle::start(engine, options()).await.unwrap();
        let mut a = login(&server, "ann").await.unwrap();
        let mut b = login(&server, "bob").await.unwrap();
        // An 800 MB string is refused before it is built.
        let started = Instant::now();
        let e = query(&mut a, "SELECT length(repeat('x', 800000000))")
            .await
            .unwrap_err();
        assert_eq!(
            code_of(&e),
            (Code::ResourceExhausted, "53200".into()),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        // A restricted session cannot raise its budget.
        let e = query(&mut a, "SET accelsql.memory_limit = '1GiB'")
            .await
            .unwrap_err();
        assert_eq!(code_of(&e).1, "42501", "{e}");
        // Prepared statements hold their text against the budget: 1 MiB each, 8 MiB in all.
        let text = format!("SELECT '{}' AS big", "x".repeat(1 << 20));
        let mut held = Vec::new();
        let refused = loop {
            match a.prepare(text.clone(), None).await {
                Ok(p) => held.push(p),
                Err(e) => break e,
            }
            assert!(held.len() <= 8, "nine 1 MiB statements fit an 8 MiB budget");
        };
        assert_eq!(code_of(&refused).1, "53200", "{refused}");
        assert!(held.len() >= 4, "only {} fit", held.len());
        // Closing them gives the memory back.
        for p in held {
            p.close().await.unwrap();
        }
        a.prepare(text, None).await.unwrap();
        // Both sessions go on.
        assert_eq!(one(&mut a, "SELECT 41 + 1").await, 42);
        assert_eq!(
            one(&mut b, "SELECT CAST(length(repeat('x', 1000)) AS BIGINT)").await,
            1000
        );
        server.stop().await.unwrap();
    });
}

#[test]
fn failed_logins_are_rate_limited() {
    mt().block_on(async {
        let server = serve(options()).await;
        for _ in 0..5 {
            let mut c = FlightSqlServiceClient::new(channel(&server).await);
            let e = c.handshake("eve", "guess").await.unwrap_err();
            assert!(format!("{e}").contains("28000"), "{e}");
        }
        let mut c = FlightSqlServiceClient::new(channel(&server).await);
        let e = c
            .handshake("eve", server.token().unwrap())
            .await
            .unwrap_err();
        assert!(format!("{e}").contains("28L01"), "{e}");
        server.stop().await.unwrap();
    });
}

#[test]
fn client_text_cannot_forge_log_lines() {
    mt().block_on(async {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink_lines = Arc::clone(&lines);
        let sink: LogSink =
            Arc::new(move |line: &str| sink_lines.lock().unwrap().push(line.into()));
        let server = serve(ServerOptions {
            log: Some(sink),
            ..options()
        })
        .await;
        let forged = "mallory\nsession=1 user=root";
        let mut c = login(&server, forged).await.unwrap();
        assert_eq!(one(&mut c, "SELECT 1").await, 1);
        server.stop().await.unwrap();
        let lines = lines.lock().unwrap();
        assert!(!lines.is_empty());
        for line in lines.iter() {
            assert!(!line.contains('\n'), "{line:?}");
            assert!(
                !line.to_lowercase().starts_with("session=1 user=root"),
                "{line:?}"
            );
        }
        assert!(
            lines
                .iter()
                // The name in its one (upper-case) form, quoted and escaped.
                .any(|l| l.contains(r#"user="MALLORY\nSESSION=1 USER=ROOT""#)),
            "{lines:?}"
        );
    });
}

#[test]
fn the_admin_sees_every_session_and_ends_one_with_kill_session() {
    mt().block_on(async {
        let engine = gpu_engine();
        let server = ServerHandle::start(
            engine,
            ServerOptions {
                admin_user: Some("root".into()),
                ..options()
            },
        )
        .await
        .unwrap();
        let mut ann = login(&server, "ann").await.unwrap();
        query(&mut ann, "SET datafusion.execution.batch_size = 1")
            .await
            .unwrap();
        let info = ann
            .execute(
                "SELECT slow_gpu(50) AS secret_4242 FROM generate_series(1, 400)".into(),
                None,
            )
            .await
            .unwrap();
        let mut stream = ann
            .do_get(info.endpoint[0].ticket.clone().unwrap())
            .await
            .unwrap();
        futures::StreamExt::next(&mut stream)
            .await
            .unwrap()
            .unwrap();
        // Bob sees who holds the lease, not what it runs; root sees both.
        let mut bob = login(&server, "bob").await.unwrap();
        let seen = query(
            &mut bob,
            "SELECT count(*) FROM accelsql.gpu_leases WHERE state = 'holding' \
             AND \"user\" = 'ANN' AND statement NOT LIKE '%secret_4242%'",
        )
        .await
        .unwrap();
        assert_eq!(seen[0].column(0).as_primitive::<Int64Type>().value(0), 1);
        let mut root = login(&server, "root").await.unwrap();
        let holder = query(
            &mut root,
            "SELECT session FROM accelsql.gpu_leases WHERE state = 'holding' \
             AND statement LIKE '%secret_4242%'",
        )
        .await
        .unwrap();
        let session = holder[0]
            .column(0)
            .as_primitive::<accelsql_engine::datafusion::arrow::datatypes::UInt64Type>()
            .value(0);
        // Bob may not end it; root may.
        let e = query(&mut bob, &format!("KILL SESSION {session}"))
            .await
            .unwrap_err();
        assert_eq!(code_of(&e).1, "42501", "{e}");
        query(&mut root, &format!("KILL SESSION {session}"))
            .await
            .unwrap();
        let e = loop {
            match futures::StreamExt::next(&mut stream).await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break e,
                None => panic!("the statement should have been stopped"),
            }
        };
        assert_eq!(code_of(&e).1, "57P01", "{e}");
        // Ann's session is gone with its token; the GPU is free for bob.
        let e = query(&mut ann, "SELECT 1").await.unwrap_err();
        assert_eq!(code_of(&e), (Code::Unauthenticated, "28000".into()), "{e}");
        assert_eq!(one(&mut bob, "SELECT slow_gpu(1)").await, 1);
        server.stop().await.unwrap();
    });
}

#[test]
fn unsafe_configurations_are_refused_at_startup() {
    mt().block_on(async {
        let anywhere = "0.0.0.0:0".parse().unwrap();
        // A token (or passwords) in clear text on a non-loopback address.
        let e = Server::bind(
            engine(),
            ServerOptions {
                listen: anywhere,
                ..ServerOptions::default()
            },
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), ServerError::CONFIG, "{e}");
        assert!(e.to_string().contains("--allow-cleartext-passwords"), "{e}");
        // No authentication at all, off loopback.
        let e = Server::bind(
            engine(),
            ServerOptions {
                listen: anywhere,
                auth: ServerAuth::None,
                ..ServerOptions::default()
            },
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        // A users file others may read.
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users");
        add_user(&users, "alice", "pw", 1000).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o640)).unwrap();
            let e = Server::bind(
                engine(),
                ServerOptions {
                    auth: ServerAuth::Users(users.clone()),
                    ..options()
                },
            )
            .await
            .unwrap_err();
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
    });
}

/// How long the soak's clients run: 30 s in the test command; `ACCELSQL_SOAK_SECS` for longer
/// runs by hand.
fn soak_duration() -> Duration {
    std::env::var("ACCELSQL_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_secs)
}

/// The processes descending from this one (script workers, fork servers), less the spare
/// workers the fork servers keep forked ahead (they run no statement, and are replaced as
/// statements take them).
fn descendants() -> std::collections::BTreeSet<u32> {
    // Listed first: a spare forked after this is found by the caller's next look.
    let spares: Vec<u32> = accelsql_engine::udf_runtime::script::warm_starts()
        .iter()
        .filter_map(|w| w.spare_pid)
        .collect();
    let mut parent_of = std::collections::HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`: comm may hold spaces; the fields after ')' are fixed.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.first() == Some(&"Z") {
                continue;
            }
            if let Some(ppid) = fields.get(1).and_then(|p| p.parse::<u32>().ok()) {
                parent_of.insert(pid, ppid);
            }
        }
    }
    let me = std::process::id();
    parent_of
        .keys()
        .copied()
        .filter(|pid| !spares.contains(pid))
        .filter(|&pid| {
            let mut at = pid;
            for _ in 0..64 {
                match parent_of.get(&at) {
                    Some(&p) if p == me => return true,
                    Some(&p) if p > 1 => at = p,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// What one statement of the soak came to: a result, or an error with its accelsql code.
/// `/metrics` of the HTTP endpoint at `at`, as its body (HTTP/1.1 by hand: one request, closed).
async fn scrape(at: std::net::SocketAddr, token: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(at)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {at}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    if !body.starts_with("HTTP/1.1 200") {
        return Err(body.lines().next().unwrap_or_default().to_string());
    }
    Ok(body)
}

/// The sum of the samples named `name` (every label set).
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn outcome(result: Result<Vec<RecordBatch>, FlightError>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(FlightError::Tonic(s)) => status_code(&s)
            .filter(|c| !c.is_empty())
            .map(Err)
            .unwrap_or_else(|| panic!("an error without an accelsql code: {s:?}")),
        Err(other) => panic!("an error that is not a gRPC status: {other:?}"),
    }
}

#[test]
fn soak_many_clients_with_timeouts_cancels_and_idle_connections_lose_nothing() {
    if accelsql_engine::udf_runtime::script::find_python3().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    mt().block_on(async {
        let engine = gpu_engine();
        let server = ServerHandle::start(
            engine.clone(),
            ServerOptions {
                // Short, for the idle strangers below; long enough for an Exasol-protocol login
                // (two round trips and an RSA decryption) on two busy cores in a debug build.
                handshake_timeout: Duration::from_secs(4),
                session_grace: Duration::from_millis(500),
                exasol_listen: Some("127.0.0.1:0".parse().unwrap()),
                http_listen: Some("127.0.0.1:0".parse().unwrap()),
                ..options()
            },
        )
        .await
        .unwrap();
        let mut setup = login(&server, "setup").await.unwrap();
        for sql in [
            "CREATE PYTHON3 SCALAR SCRIPT twice(x BIGINT) RETURNS BIGINT AS\n\
             def run(ctx):\n    return ctx.x * 2\n/",
            "CREATE PYTHON3 SCALAR SCRIPT sleeper(x BIGINT) RETURNS BIGINT AS\n\
             import time\ndef run(ctx):\n    time.sleep(30)\n    return ctx.x\n/",
        ] {
            query(&mut setup, sql).await.unwrap();
        }
        // A first run starts the interpreter's fork server, which stays: the baseline.
        assert_eq!(one(&mut setup, "SELECT twice(21)").await, 42);
        drop(setup);
        let before = descendants();

        // 200 strangers: 100 silent connections, 100 that send half of HTTP/2's preface.
        let mut idle = Vec::new();
        for i in 0..200 {
            let Ok(mut s) = tokio::net::TcpStream::connect(server.addr()).await else {
                continue;
            };
            if i % 2 == 1 {
                use tokio::io::AsyncWriteExt;
                let _ = s.write_all(b"PRI * HTTP/2.0\r\n").await;
            }
            idle.push(s);
        }

        let until = Instant::now() + soak_duration();
        // An operator's scraper of /metrics the whole time: counters only grow.
        let scraper = {
            let at = server.http_addr().unwrap();
            let token = server.token().unwrap().to_string();
            tokio::spawn(async move {
                let (mut last, mut times, mut problems) = (0.0f64, Vec::new(), Vec::new());
                while Instant::now() < until {
                    let started = Instant::now();
                    match scrape(at, &token).await {
                        Ok(text) => {
                            times.push(started.elapsed());
                            let ended = metric_sum(&text, "accelsql_statements_total");
                            if ended < last {
                                problems.push(format!("statements_total fell: {last} -> {ended}"));
                            }
                            last = ended;
                        }
                        Err(e) => problems.push(e),
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                (times, problems)
            })
        };
        let clients: Vec<_> = (0..32)
            .map(|i| {
                let url = server.url().to_string();
                let token = server.token().unwrap().to_string();
                tokio::spawn(async move {
                    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
                    let mut c = FlightSqlServiceClient::new(channel);
                    c.handshake(&format!("client{i}"), &token).await.unwrap();
                    let mut codes: Vec<String> = Vec::new();
                    let mut ok = [0usize; 5];
                    let mut j = 0usize;
                    while Instant::now() < until {
                        let kind = (i + j) % 5;
                        j += 1;
                        let result = match kind {
                            0 => query(&mut c, "SELECT slow_gpu(5)").await,
                            1 => {
                                query(
                                    &mut c,
                                    "SELECT sum(twice(value)) FROM generate_series(1, 2000)",
                                )
                                .await
                            }
                            2 => {
                                query(
                                    &mut c,
                                    "SELECT count(*), max(length(repeat('x', value % 1000))) \
                                     FROM generate_series(1, 200000)",
                                )
                                .await
                            }
                            3 => {
                                // A runaway script under a 1-second QUERY_TIMEOUT: 57T01.
                                query(&mut c, "ALTER SESSION SET QUERY_TIMEOUT = 1")
                                    .await
                                    .unwrap();
                                let r = query(&mut c, "SELECT sleeper(1)").await;
                                query(&mut c, "ALTER SESSION SET QUERY_TIMEOUT = 3600")
                                    .await
                                    .unwrap();
                                r
                            }
                            _ => {
                                // A GPU statement the client walks away from mid-stream.
                                let info =
                                    c.execute("SELECT slow_gpu(300)".to_string(), None).await;
                                match info {
                                    Ok(info) => {
                                        let ticket = info.endpoint[0].ticket.clone().unwrap();
                                        let stream = c.do_get(ticket).await;
                                        tokio::time::sleep(Duration::from_millis(50)).await;
                                        drop(stream);
                                        Ok(Vec::new())
                                    }
                                    Err(e) => Err(e),
                                }
                            }
                        };
                        if kind == 3 {
                            // The runaway script never finishes within its timeout.
                            assert!(result.is_err(), "a 30 s script outlived QUERY_TIMEOUT = 1");
                        }
                        match outcome(result) {
                            Ok(()) => ok[kind] += 1,
                            Err(code) => codes.push(code),
                        }
                    }
                    (ok, codes)
                })
            })
            .collect();
        // A hostile client beside them: statements nested far too deep (54001), and functions
        // that would turn a small input into hundreds of MB past its budget (53200). The
        // legitimate clients' answers are checked as before.
        let hostile = {
            let url = server.url().to_string();
            let token = server.token().unwrap().to_string();
            tokio::spawn(async move {
                let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
                let mut c = FlightSqlServiceClient::new(channel);
                c.handshake("hostile", &token).await.unwrap();
                query(&mut c, "SET accelsql.memory_limit = '16MiB'")
                    .await
                    .unwrap();
                let deep = format!("SELECT 1{}", " + 1".repeat(20_000));
                let brackets = format!("SELECT {}1{}", "(".repeat(20_000), ")".repeat(20_000));
                let grow = "SELECT length(replace(repeat('x', 4000000), 'x', 'yyyyyyyyyyyyyyyy'))";
                let mut refused = std::collections::BTreeMap::<String, usize>::new();
                let mut answered = 0usize;
                while Instant::now() < until {
                    for sql in [deep.as_str(), brackets.as_str(), grow] {
                        match outcome(query(&mut c, sql).await) {
                            Ok(()) => answered += 1,
                            Err(code) => *refused.entry(code).or_default() += 1,
                        }
                    }
                    // Deep but within the limit: answered.
                    let fine = format!("SELECT 1{}", " + 1".repeat(300));
                    assert_eq!(one(&mut c, &fine).await, 301);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (answered, refused)
            })
        };
        // And wrong passwords for a legitimate client's user from other loopback addresses,
        // while that user keeps logging in with the right one from its own: every one of its
        // logins succeeds (the attacker slows only their own sources).
        let guesses = {
            let (url, to) = (server.url().to_string(), server.addr());
            tokio::spawn(async move {
                let mut refused = 0usize;
                let mut k = 0u8;
                while Instant::now() < until {
                    let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + k % 8);
                    k = k.wrapping_add(1);
                    let mut c = FlightSqlServiceClient::new(channel_from(&url, to, from).await);
                    if c.handshake("client0", "guess").await.is_err() {
                        refused += 1;
                    }
                }
                refused
            })
        };
        let relogins = {
            let url = server.url().to_string();
            let token = server.token().unwrap().to_string();
            tokio::spawn(async move {
                let mut done = 0usize;
                while Instant::now() < until {
                    let channel = Channel::from_shared(url.clone())
                        .unwrap()
                        .connect()
                        .await
                        .unwrap();
                    let mut c = FlightSqlServiceClient::new(channel);
                    c.handshake("client0", &token)
                        .await
                        .unwrap_or_else(|e| panic!("client0's own login failed: {e}"));
                    assert_eq!(one(&mut c, "SELECT 7").await, 7);
                    done += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                done
            })
        };
        // Clients of the Exasol port beside them, on the same engine and lease: GPU statements,
        // script calls, an abortQuery of a GPU statement that holds or waits for the lease
        // (57014 at once), and a client that disconnects while its GPU statement runs.
        let exasol_clients: Vec<_> = (0..4)
            .map(|i| {
                let addr = server.exasol_addr().unwrap();
                let token = server.token().unwrap().to_string();
                tokio::spawn(async move {
                    let mut c = ExaClient::login(addr, &format!("exa{i}"), &token).await;
                    let (mut answered, mut aborted, mut walked) = (0usize, 0usize, 0usize);
                    let mut codes = std::collections::BTreeMap::<String, usize>::new();
                    let mut j = i;
                    while Instant::now() < until {
                        j += 1;
                        match j % 4 {
                            0 | 1 => {
                                let sql = if j % 4 == 0 {
                                    "SELECT slow_gpu(5)"
                                } else {
                                    "SELECT sum(twice(value)) FROM generate_series(1, 2000)"
                                };
                                match c.execute(sql).await {
                                    Ok(_) => answered += 1,
                                    Err(code) => *codes.entry(code).or_default() += 1,
                                }
                            }
                            2 => {
                                c.send(serde_json::json!({
                                    "command": "execute", "sqlText": "SELECT slow_gpu(3000)"
                                }))
                                .await;
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                let started = Instant::now();
                                c.send(serde_json::json!({"command": "abortQuery"})).await;
                                let reply = c.answer().await;
                                let code = reply["exception"]["sqlCode"].as_str().unwrap_or("ok");
                                assert_eq!(code, "57014", "{reply}");
                                assert!(started.elapsed() < Duration::from_secs(2));
                                aborted += 1;
                            }
                            _ => {
                                c.send(serde_json::json!({
                                    "command": "execute", "sqlText": "SELECT slow_gpu(3000)"
                                }))
                                .await;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                drop(c);
                                walked += 1;
                                c = ExaClient::login(addr, &format!("exa{i}"), &token).await;
                            }
                        }
                    }
                    (answered, aborted, walked, codes)
                })
            })
            .collect();
        let mut ok = [0usize; 5];
        let mut codes = std::collections::BTreeMap::<String, usize>::new();
        let (mut exa_answered, mut exa_aborted, mut exa_walked) = (0, 0, 0);
        for client in exasol_clients {
            let (a, b, w, c) = client.await.unwrap();
            (exa_answered, exa_aborted, exa_walked) =
                (exa_answered + a, exa_aborted + b, exa_walked + w);
            for (code, n) in c {
                *codes.entry(code).or_default() += n;
            }
        }
        eprintln!(
            "soak: Exasol port: {exa_answered} answered, {exa_aborted} aborted, \
             {exa_walked} walked away"
        );
        assert!(exa_answered > 0 && exa_aborted > 0 && exa_walked > 0);
        let (guessed, relogged) = (guesses.await.unwrap(), relogins.await.unwrap());
        eprintln!("soak: {guessed} wrong passwords refused; client0 logged in {relogged} times");
        assert!(guessed > 0 && relogged > 0);
        let (answered, refused) = hostile.await.unwrap();
        eprintln!("soak: hostile statements answered {answered}, refused {refused:?}");
        assert_eq!(answered, 0, "{refused:?}");
        assert!(
            refused.keys().all(|c| c == "54001" || c == "53200")
                && refused.get("54001").copied().unwrap_or(0) > 0
                && refused.get("53200").copied().unwrap_or(0) > 0,
            "{refused:?}"
        );
        for client in clients {
            let (o, c) = client.await.unwrap();
            for k in 0..5 {
                ok[k] += o[k];
            }
            for code in c {
                *codes.entry(code).or_default() += 1;
            }
        }
        eprintln!("soak: results per kind {ok:?}, coded errors {codes:?}");
        let (mut times, problems) = scraper.await.unwrap();
        assert!(problems.is_empty() && !times.is_empty(), "{problems:?}");
        times.sort();
        eprintln!(
            "soak: {} scrapes of /metrics, median {:?}, max {:?} (a debug build under load)",
            times.len(),
            times[times.len() / 2],
            times[times.len() - 1]
        );
        // The histogram counts every statement the counters count.
        let text = scrape(server.http_addr().unwrap(), server.token().unwrap())
            .await
            .unwrap();
        assert_eq!(
            metric_sum(&text, "accelsql_statements_total"),
            metric_sum(&text, "accelsql_statement_duration_seconds_count"),
            "{text}"
        );
        // Every kind ran; the runaway scripts were stopped by their timeout.
        assert!(
            ok[0] > 0 && ok[1] > 0 && ok[2] > 0 && ok[4] > 0,
            "{ok:?} {codes:?}"
        );
        assert!(codes.get("57T01").copied().unwrap_or(0) > 0, "{codes:?}");
        // Only the codes a statement may end with here.
        for code in codes.keys() {
            assert!(
                ["57T01", "57014", "57G01", "53200", "53S02"].contains(&code.as_str()),
                "unexpected code {code}: {codes:?}"
            );
        }
        drop(idle);

        // Nothing leaked: the lease is free, no script worker is left, and the server serves.
        let settled = async {
            loop {
                let snapshot = engine.lease_queue().snapshot();
                let workers: Vec<u32> = descendants().difference(&before).copied().collect();
                if snapshot.holder.is_none() && snapshot.waiting.is_empty() && workers.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), settled)
            .await
            .is_err()
        {
            let snapshot = engine.lease_queue().snapshot();
            let workers: Vec<u32> = descendants().difference(&before).copied().collect();
            panic!(
                "after the soak: lease holder {:?}, {} waiting, leftover processes {workers:?}",
                snapshot.holder.map(|h| h.statement),
                snapshot.waiting.len()
            );
        }
        let mut after = login(&server, "after").await.unwrap();
        assert_eq!(one(&mut after, "SELECT twice(4)").await, 8);
        server.stop().await.unwrap();
    });
}

#[test]
fn a_users_session_cap_counts_every_spelling_of_the_name() {
    mt().block_on(async {
        let server = serve(ServerOptions {
            max_sessions_per_user: 2,
            ..options()
        })
        .await;
        let mut first = login(&server, "low").await.unwrap();
        let mut second = login(&server, "loW").await.unwrap();
        assert_eq!(one(&mut first, "SELECT 1").await, 1);
        assert_eq!(one(&mut second, "SELECT 1").await, 1);
        // A third spelling is the same user, over its cap; another user is not held up.
        let third = match login(&server, "LOW").await {
            Ok(mut c) => query(&mut c, "SELECT 1").await.map(drop),
            Err(e) => Err(e),
        };
        let e = format!("{:?}", third.unwrap_err());
        assert!(e.contains("53S01") && e.contains("LOW"), "{e}");
        let mut other = login(&server, "high").await.unwrap();
        assert_eq!(one(&mut other, "SELECT 1").await, 1);
        server.stop().await.unwrap();
    });
}
