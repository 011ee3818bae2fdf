//! Exasol's WebSocket API (`serve --exasol-port`): pyexasol and the tools built on it log in,
//! run statements and fetch their results over the same engine, sessions, users, caps and
//! budgets as the Flight SQL port.
//!
//! The protocol is JSON over a WebSocket (Exasol's `websocket-api`, versions 1 to 3 here): a
//! `login` answered with the server's RSA public key, then the credentials with the password
//! encrypted by it (PKCS#1 v1.5, base64), then one request and one answer at a time. After a
//! login that asked for `useCompression`, every message is zlib-compressed, in binary frames.
//! Results travel column by column (`data[column][row]`); a result of more than
//! [`FIRST_ROWS`] rows leaves the rest behind a `resultSetHandle` for `fetch`. A statement runs
//! while the connection still reads: `abortQuery` stops it, and a Pong frame goes out every
//! `feedbackInterval` seconds until it ends. pyexasol's HTTP transport (`export_to_pandas`,
//! `import_from_pandas`) has its own modules: `transport.rs` (tunnels, HTTP) and `transfer.rs`
//! (the `EXPORT`/`IMPORT` statements).

mod metadata;
mod transfer;
mod transport;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use accelsql_engine::datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use accelsql_engine::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use accelsql_engine::datafusion::common::ScalarValue;
use accelsql_engine::datafusion::sql::sqlparser::dialect::GenericDialect;
use accelsql_engine::datafusion::sql::sqlparser::keywords::Keyword;
use accelsql_engine::datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use rsa::pkcs1::EncodeRsaPublicKey;
use rsa::traits::PublicKeyParts;
use rsa::{Pkcs1v15Encrypt, RsaPrivateKey, RsaPublicKey};
use serde_json::{Value, json};
use sha2::Digest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use self::transport::{TUNNEL_REQUEST, Tunnels};
use crate::conn;
use crate::service::{AccelsqlFlightSql, affected_rows};
use crate::sessions::{Caller, ClientSession};

/// Rows sent with a result's first answer; the rest wait for `fetch`.
const FIRST_ROWS: usize = 1000;

/// The largest message a client may send (a statement's text with its parameters).
const MAX_MESSAGE: usize = 64 << 20;

/// The highest protocol version spoken.
const PROTOCOL: u64 = 3;

/// The Exasol release announced at login: 8.32 and later pin the HTTP transport's TLS key
/// (`PUBLIC KEY 'sha256//…'` in pyexasol's `EXPORT`/`IMPORT`), which the server checks.
const RELEASE_VERSION: &str = "8.32.0";

/// The server's login key: clients encrypt passwords with its public half.
pub(crate) struct LoginKey {
    private: RsaPrivateKey,
    pem: String,
    modulus: String,
    exponent: String,
}

impl LoginKey {
    /// A fresh 1024-bit key (as Exasol's), made once per server.
    pub(crate) fn new() -> Result<Self, String> {
        let private = RsaPrivateKey::new(&mut rand::rngs::OsRng, 1024)
            .map_err(|e| format!("cannot make the login key: {e}"))?;
        let public = RsaPublicKey::from(&private);
        let pem = public
            .to_pkcs1_pem(rsa::pkcs1::LineEnding::LF)
            .map_err(|e| format!("cannot encode the login key: {e}"))?;
        Ok(Self {
            modulus: hex(&public.n().to_bytes_be()),
            exponent: hex(&public.e().to_bytes_be()),
            private,
            pem,
        })
    }

    /// The password a client sent (base64 of its encryption with the public key).
    fn decrypt(&self, sent: &str) -> Option<String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(sent)
            .ok()?;
        let plain = self.private.decrypt(Pkcs1v15Encrypt, &bytes).ok()?;
        String::from_utf8(plain).ok()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// TLS on the Exasol port: its acceptor, the certificate's SHA-256 fingerprint (what pyexasol's
/// `dsn='host/FINGERPRINT:port'` names), and whether clients may also connect without TLS.
pub(crate) struct PortTls {
    acceptor: tokio_rustls::TlsAcceptor,
    fingerprint: String,
    plain_allowed: bool,
}

impl PortTls {
    /// TLS with the certificate and key of `files` (PEM), or with a self-signed certificate
    /// for `localhost` and the listening address made now.
    pub(crate) fn new(
        files: Option<(&std::path::Path, &std::path::Path)>,
        at: std::net::SocketAddr,
        plain_allowed: bool,
    ) -> Result<Self, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (certs, key) = match files {
            Some((cert, key)) => {
                let certs = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("cannot read {}: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("cannot read {}: {e}", key.display()))?;
                (certs, key)
            }
            None => {
                let mut names = vec!["localhost".to_string()];
                if !at.ip().is_unspecified() {
                    names.push(at.ip().to_string());
                }
                let made = rcgen::generate_simple_self_signed(names)
                    .map_err(|e| format!("cannot make a certificate: {e}"))?;
                let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
                    .map_err(|e| format!("cannot use the made key: {e}"))?;
                (vec![made.cert.der().clone()], key)
            }
        };
        let first = certs
            .first()
            .ok_or_else(|| "the certificate file holds no certificate".to_string())?;
        let fingerprint = hex(&sha2::Sha256::digest(first.as_ref()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("unusable certificate or key: {e}"))?;
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            fingerprint,
            plain_allowed,
        })
    }

    /// The certificate's SHA-256 fingerprint, upper-case hex.
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// Serves Exasol's protocol on `listener` for `service`'s engine and sessions until the task
/// is aborted. A connection whose first byte starts a TLS handshake is served over TLS
/// (`wss://`), any other as plain WebSocket where that is allowed.
pub(crate) async fn serve(
    listener: TcpListener,
    service: AccelsqlFlightSql,
    key: Arc<LoginKey>,
    tls: Arc<PortTls>,
) {
    let connections = Arc::clone(&service.inner().connections);
    let tunnels = Arc::new(Tunnels::default());
    let mut incoming = std::pin::pin!(conn::incoming(listener, connections));
    while let Some(conn) = incoming.next().await {
        let Ok(conn) = conn else { continue };
        let (service, key, tls) = (service.clone(), Arc::clone(&key), Arc::clone(&tls));
        let tunnels = Arc::clone(&tunnels);
        tokio::spawn(async move {
            let state = conn.state();
            let mut conn = Prefixed {
                first: None,
                inner: conn,
            };
            let mut byte = [0u8; 1];
            if tokio::io::AsyncReadExt::read_exact(&mut conn.inner, &mut byte)
                .await
                .is_err()
            {
                return;
            }
            conn.first = Some(byte[0]);
            let context = Shared {
                service: service.clone(),
                key,
                tunnels: Arc::clone(&tunnels),
            };
            // 0x16: a TLS handshake record; 0x02: pyexasol's tunnel request (HTTP transport),
            // plain also where the port is TLS (the client then being the TLS server).
            if byte[0] == 0x16 {
                if let Ok(stream) = tls.acceptor.accept(conn).await {
                    Connection::run(stream, state, context, true).await;
                }
            } else if byte[0] == TUNNEL_REQUEST[0] {
                let local = conn.inner.local_addr();
                if let Err(e) = tunnels.open(conn.inner, byte[0], local).await {
                    service.log(&format!(
                        "Exasol-protocol tunnel from {} refused: {}",
                        state.peer.map_or("?".into(), |p| p.to_string()),
                        e.0
                    ));
                }
            } else if tls.plain_allowed {
                Connection::run(conn, state, context, false).await;
            } else {
                service.log(&format!(
                    "Exasol-protocol connection from {} refused: not TLS (use encryption=True)",
                    state.peer.map_or("?".into(), |p| p.to_string())
                ));
            }
        });
    }
}

/// A stream whose first byte was read already (to tell TLS from plain): that byte comes first.
struct Prefixed<S> {
    first: Option<u8>,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(byte) = this.first.take() {
            if buf.remaining() > 0 {
                buf.put_slice(&[byte]);
                return Poll::Ready(Ok(()));
            }
            this.first = Some(byte);
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A result the client has not fetched to its end.
struct Pending {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rows: usize,
}

/// What every connection of the port shares.
struct Shared {
    service: AccelsqlFlightSql,
    key: Arc<LoginKey>,
    tunnels: Arc<Tunnels>,
}

/// One client's connection.
struct Connection {
    service: AccelsqlFlightSql,
    key: Arc<LoginKey>,
    tunnels: Arc<Tunnels>,
    /// The client's address (a tunnel must come from it).
    peer: Option<std::net::SocketAddr>,
    compressed: bool,
    /// The bearer token and session, once logged in.
    session: Option<(String, Arc<ClientSession>)>,
    results: HashMap<i64, Pending>,
    /// Prepared statements by handle: the text and its number of `?` parameters.
    prepared: HashMap<i64, (String, usize)>,
    next_handle: i64,
    autocommit: bool,
    query_timeout: u64,
    /// Seconds between heartbeats while a statement runs (0: none).
    feedback_interval: u64,
    /// The most rows a result set has (0: no limit; `resultSetMaxRows`).
    max_rows: u64,
    /// Whether the connection is TLS.
    encrypted: bool,
}

/// An error answer: Exasol's `sqlCode` and text.
struct Refusal {
    code: String,
    text: String,
}

impl Refusal {
    fn new(code: &str, text: impl Into<String>) -> Self {
        Self {
            code: code.to_string(),
            text: text.into(),
        }
    }
}

type Answer = Result<Value, Refusal>;

impl Connection {
    async fn run<S>(conn: S, state: Arc<conn::ConnState>, context: Shared, encrypted: bool)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(conn, Some(config)).await
        else {
            return;
        };
        let mut this = Self {
            service: context.service,
            key: context.key,
            tunnels: context.tunnels,
            peer: state.peer,
            compressed: false,
            session: None,
            results: HashMap::new(),
            prepared: HashMap::new(),
            next_handle: 1,
            autocommit: true,
            query_timeout: 0,
            feedback_interval: 1,
            max_rows: 0,
            encrypted,
        };
        let peer = state.peer;
        // Before a login: `login`, then the credentials.
        let mut offered_key = false;
        loop {
            let message = match &this.session {
                Some((_, client)) => {
                    let client = Arc::clone(client);
                    // A kill wins over a request already waiting: the killed session's
                    // connection closes rather than answering it.
                    tokio::select! {
                        biased;
                        () = client.session.killed() => {
                            this.service.log(&format!(
                                "session={} ended by KILL SESSION: its Exasol-protocol \
                                 connection is closed",
                                client.id
                            ));
                            break;
                        }
                        message = ws.next() => message,
                    }
                }
                None => ws.next().await,
            };
            let Some(Ok(message)) = message else { break };
            let text = match message {
                Message::Text(t) => t.as_str().to_string(),
                Message::Binary(b) if this.compressed => match inflate(&b) {
                    Some(t) => t,
                    None => break,
                },
                Message::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
                Message::Close(_) => break,
                _ => continue,
            };
            let Ok(request) = serde_json::from_str::<Value>(&text) else {
                let reply = error_json(&Refusal::new("08P01", "a request must be a JSON object"));
                if this.send(&mut ws, reply).await.is_err() {
                    break;
                }
                continue;
            };
            let command = request["command"].as_str().unwrap_or("");
            let (reply, then_compress, end) = if this.session.is_none() {
                match command {
                    "login" | "loginToken" => {
                        offered_key = true;
                        (this.offer_key(command, &request), false, false)
                    }
                    _ if offered_key && command.is_empty() => {
                        let answer = this.login(&request, peer, &state).await;
                        let compress = answer.is_ok() && request["useCompression"] == true;
                        (answer, compress, false)
                    }
                    _ => (
                        Err(Refusal::new("08004", "log in first (command login)")),
                        false,
                        false,
                    ),
                }
            } else {
                let end = command == "disconnect";
                let (compressed, every) = (this.compressed, this.feedback_interval);
                let work = this.command(command, &request);
                let Some(answer) = run_beside(work, &mut ws, compressed, every).await else {
                    break;
                };
                (answer, false, end)
            };
            let reply = match reply {
                Ok(data) => data,
                Err(refusal) => error_json(&refusal),
            };
            if this.send(&mut ws, reply).await.is_err() || end {
                break;
            }
            if then_compress {
                this.compressed = true;
            }
        }
        let _ = ws.close(None).await;
        if let Some((token, client)) = this.session.take() {
            this.service.inner().sessions.close(Caller::Token(&token));
            this.service.log(&format!(
                "session={} ended (Exasol protocol connection closed)",
                client.id
            ));
        }
    }

    async fn send<S>(&self, ws: &mut S, reply: Value) -> Result<(), ()>
    where
        S: futures::Sink<Message> + Unpin,
    {
        let text = reply.to_string();
        let message = if self.compressed {
            Message::Binary(deflate(text.as_bytes()).into())
        } else {
            Message::Text(text.into())
        };
        ws.send(message).await.map_err(|_| ())
    }

    /// The answer to `login` (the public key) or `loginToken`.
    fn offer_key(&self, command: &str, request: &Value) -> Answer {
        let version = request["protocolVersion"].as_u64().unwrap_or(1);
        if version == 0 {
            return Err(Refusal::new("08004", "protocolVersion must be 1 or more"));
        }
        if command == "loginToken" {
            return Ok(ok(json!({})));
        }
        Ok(ok(json!({
            "publicKeyPem": self.key.pem,
            "publicKeyModulus": self.key.modulus,
            "publicKeyExponent": self.key.exponent,
        })))
    }

    /// Checks the credentials as the Flight port does and opens the session.
    async fn login(
        &mut self,
        request: &Value,
        peer: Option<std::net::SocketAddr>,
        state: &conn::ConnState,
    ) -> Answer {
        let (user, password) = if let Some(token) = request["accessToken"].as_str() {
            let user = request["clientOsUsername"].as_str().unwrap_or("token");
            (user.to_string(), token.to_string())
        } else {
            let user = request["username"].as_str().unwrap_or_default().to_string();
            let sent = request["password"].as_str().unwrap_or_default();
            // An RSA private-key operation: off the runtime's threads.
            let (key, sent) = (Arc::clone(&self.key), sent.to_string());
            let password = tokio::task::spawn_blocking(move || key.decrypt(&sent))
                .await
                .ok()
                .flatten();
            let Some(password) = password else {
                return Err(Refusal::new(
                    "08004",
                    "the password was not encrypted with this server's login key",
                ));
            };
            (user, password)
        };
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let inner = self.service.inner();
        let user = match inner.login.check(Some(&basic), peer.map(|p| p.ip())).await {
            Ok(user) => user,
            Err(e) => {
                self.service.log(&format!(
                    "Exasol-protocol login refused from {}: {e}",
                    peer.map_or("?".into(), |p| p.to_string())
                ));
                return Err(Refusal::new("08004", e.to_string()));
            }
        };
        state.authenticate();
        let (token, client) = inner
            .sessions
            .open_with_token(&user, Some(state.id))
            .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
        self.service.log(&format!(
            "session={} user={user} opened from {} (Exasol protocol)",
            client.id,
            peer.map_or("?".into(), |p| p.to_string())
        ));
        let driver = request["driverName"]
            .as_str()
            .or(request["clientName"].as_str())
            .unwrap_or("unknown driver");
        let driver: String = driver
            .chars()
            .filter(|c| !c.is_control())
            .take(100)
            .collect();
        client
            .session
            .set_client(&format!("Exasol WebSocket ({driver})"));
        let session_id = client.session.id();
        // Statements arriving this way are Exasol's: read them in its dialect (a session may
        // still `SET accelsql.sql_dialect = 'datafusion'`).
        client
            .session
            .sql("SET accelsql.sql_dialect = 'exasol'")
            .await
            .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
        self.session = Some((token, client));
        if let Some(attributes) = request.get("attributes") {
            self.set_attributes(attributes).await?;
        }
        Ok(ok(json!({
            "sessionId": session_id,
            "protocolVersion": PROTOCOL,
            "releaseVersion": RELEASE_VERSION,
            "databaseName": "accelsql",
            "productName": "accelsql",
            "maxDataMessageSize": MAX_MESSAGE,
            "maxIdentifierLength": 128,
            "maxVarcharLength": 2_000_000,
            "identifierQuoteString": "\"",
            "timeZone": "UTC",
            "timeZoneBehavior": "INVALID SHIFT AMBIGUOUS ST",
        })))
    }

    fn client(&self) -> Result<Arc<ClientSession>, Refusal> {
        self.session
            .as_ref()
            .map(|(_, c)| Arc::clone(c))
            .ok_or_else(|| Refusal::new("08004", "log in first"))
    }

    async fn command(&mut self, command: &str, request: &Value) -> Answer {
        if command != "setAttributes"
            && let Some(attributes) = request.get("attributes")
        {
            self.set_attributes(attributes).await?;
        }
        match command {
            "execute" => {
                let sql = request["sqlText"]
                    .as_str()
                    .ok_or_else(|| Refusal::new("08P01", "execute needs sqlText"))?;
                let result = self.execute(sql).await?;
                Ok(self.with_attributes(ok(json!({"numResults": 1, "results": [result]}))))
            }
            "executeBatch" => {
                let texts = request["sqlTexts"]
                    .as_array()
                    .ok_or_else(|| Refusal::new("08P01", "executeBatch needs sqlTexts"))?;
                let mut results = Vec::with_capacity(texts.len());
                for text in texts {
                    let sql = text.as_str().unwrap_or_default();
                    results.push(self.execute(sql).await?);
                }
                Ok(ok(json!({"numResults": results.len(), "results": results})))
            }
            "fetch" => self.fetch(request),
            "getResultSetHeader" => {
                let handles = request["resultSetHandles"].as_array().ok_or_else(|| {
                    Refusal::new("08P01", "getResultSetHeader needs resultSetHandles")
                })?;
                let mut results = Vec::with_capacity(handles.len());
                for handle in handles {
                    let handle = handle.as_i64().unwrap_or(-1);
                    let pending = self.pending(handle)?;
                    results.push(json!({"resultType": "resultSet", "resultSet": {
                        "resultSetHandle": handle,
                        "numColumns": pending.schema.fields().len(),
                        "numRows": pending.rows,
                        "numRowsInMessage": 0,
                        "columns": column_types(&pending.schema),
                    }}));
                }
                Ok(ok(json!({"numResults": results.len(), "results": results})))
            }
            // One connection reads a whole result: its rows start at 0.
            "getOffset" => {
                let handle = request["resultSetHandle"].as_i64().unwrap_or(-1);
                self.pending(handle)?;
                Ok(ok(json!({"rowOffset": 0})))
            }
            "createPreparedStatement" => {
                let sql = request["sqlText"].as_str().ok_or_else(|| {
                    Refusal::new("08P01", "createPreparedStatement needs sqlText")
                })?;
                let params = placeholders(sql)?;
                let handle = self.next_handle;
                self.next_handle += 1;
                self.prepared.insert(handle, (sql.to_string(), params));
                let columns: Vec<Value> = (1..=params)
                    .map(|i| {
                        let field = Field::new(format!("P{i}"), DataType::Utf8, true);
                        json!({"name": field.name(), "dataType": data_type(&field)})
                    })
                    .collect();
                Ok(ok(json!({
                    "statementHandle": handle,
                    "parameterData": {"numColumns": params, "columns": columns},
                    "results": [{"resultType": "rowCount", "rowCount": 0}],
                })))
            }
            "executePreparedStatement" => self.execute_prepared(request).await,
            command if metadata::COMMANDS.contains(&command) => {
                let (sql, params) = metadata::query(command, request)
                    .ok_or_else(|| Refusal::new("0A000", format!("{command} is not answered")))?;
                let result = self.execute_with(&sql, &params).await?;
                Ok(ok(json!({"numResults": 1, "results": [result]})))
            }
            "closePreparedStatement" => {
                if let Some(handle) = request["statementHandle"].as_i64() {
                    self.prepared.remove(&handle);
                }
                Ok(ok(json!({})))
            }
            "closeResultSet" => {
                if let Some(handles) = request["resultSetHandles"].as_array() {
                    for handle in handles.iter().filter_map(Value::as_i64) {
                        self.results.remove(&handle);
                    }
                }
                Ok(ok(json!({})))
            }
            "getAttributes" => Ok(self.with_attributes(ok(json!({})))),
            "setAttributes" => {
                self.set_attributes(&request["attributes"]).await?;
                Ok(self.with_attributes(ok(json!({}))))
            }
            "getHosts" => Ok(ok(json!({"numNodes": 1, "nodes": ["127.0.0.1"]}))),
            "disconnect" => Ok(ok(json!({}))),
            // Nothing runs (a running statement's abortQuery is `run_beside`'s).
            "abortQuery" => Ok(ok(json!({}))),
            other => Err(Refusal::new(
                "0A000",
                format!("command {other:?} of Exasol's WebSocket API is not supported"),
            )),
        }
    }

    /// Runs a prepared statement for each row of its column-wise parameter data: an `INSERT
    /// … VALUES (?, …)` as one statement of all the rows, anything else row by row (the row
    /// counts added up; a query answers for its last row).
    async fn execute_prepared(&mut self, request: &Value) -> Answer {
        let handle = request["statementHandle"].as_i64().ok_or_else(|| {
            Refusal::new("08P01", "executePreparedStatement needs statementHandle")
        })?;
        let (sql, params) = self
            .prepared
            .get(&handle)
            .cloned()
            .ok_or_else(|| Refusal::new("08P01", format!("no prepared statement {handle}")))?;
        let rows = usize::try_from(request["numRows"].as_u64().unwrap_or(0)).unwrap_or(0);
        let empty = Vec::new();
        let data = request["data"].as_array().unwrap_or(&empty);
        if params == 0 || rows == 0 {
            let result = self.execute_with(&sql, &[]).await?;
            return Ok(ok(json!({"numResults": 1, "results": [result]})));
        }
        if data.len() != params {
            return Err(Refusal::new(
                "07001",
                format!(
                    "the statement has {params} parameters; {} columns were sent",
                    data.len()
                ),
            ));
        }
        let row = |r: usize| -> Vec<ScalarValue> {
            data.iter().map(|column| scalar(&column[r])).collect()
        };
        let result = if let Some(all_rows) = values_of_rows(&sql, rows)? {
            let flat: Vec<ScalarValue> = (0..rows).flat_map(row).collect();
            self.execute_with(&all_rows, &flat).await?
        } else {
            let mut counted = 0i64;
            let mut last = json!({"resultType": "rowCount", "rowCount": 0});
            for r in 0..rows {
                last = self.execute_with(&sql, &row(r)).await?;
                counted += last["rowCount"].as_i64().unwrap_or(0);
            }
            if last["resultType"] == "rowCount" {
                last["rowCount"] = json!(counted);
            }
            last
        };
        Ok(ok(json!({"numResults": 1, "results": [result]})))
    }

    /// Runs one statement: a result set, or a row count.
    async fn execute(&mut self, sql: &str) -> Answer {
        self.execute_with(sql, &[]).await
    }

    /// Runs one statement with `params` for its `?`s.
    async fn execute_with(&mut self, sql: &str, params: &[ScalarValue]) -> Answer {
        let client = self.client()?;
        let refusal = |e: transfer::TransferError| Refusal::new(&e.code, e.text);
        if let Some(transfer) = transfer::parse(sql).map_err(refusal)? {
            let peer = self.peer.map(|p| p.ip());
            let run = transfer.run(&self.service, &client, &self.tunnels, peer);
            // The session's QUERY_TIMEOUT bounds the transfer's I/O with the client too.
            let rows = if self.query_timeout > 0 {
                let limit = std::time::Duration::from_secs(self.query_timeout);
                tokio::time::timeout(limit, run).await.map_err(|_| {
                    Refusal::new(
                        "57T01",
                        format!(
                            "the transfer ran longer than QUERY_TIMEOUT ({} s)",
                            self.query_timeout
                        ),
                    )
                })?
            } else {
                run.await
            }
            .map_err(refusal)?;
            return Ok(json!({"resultType": "rowCount", "rowCount": rows}));
        }
        let (schema, batches) = self
            .service
            .run_collect(&client, sql, params)
            .await
            .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
        if is_row_count(sql, &schema) {
            let rows = affected_rows(&batches).max(0);
            return Ok(json!({"resultType": "rowCount", "rowCount": rows}));
        }
        let mut rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if self.max_rows > 0 {
            rows = rows.min(usize::try_from(self.max_rows).unwrap_or(usize::MAX));
        }
        let columns = column_types(&schema);
        let first = rows.min(FIRST_ROWS);
        let mut result = json!({
            "numColumns": schema.fields().len(),
            "numRows": rows,
            "numRowsInMessage": first,
            "columns": columns,
            "data": columns_of(&batches, schema.fields().len(), 0, first)?,
        });
        if rows > first {
            let handle = self.next_handle;
            self.next_handle += 1;
            self.results.insert(
                handle,
                Pending {
                    schema,
                    batches,
                    rows,
                },
            );
            result["resultSetHandle"] = json!(handle);
        }
        Ok(json!({"resultType": "resultSet", "resultSet": result}))
    }

    /// The rows of a kept result from `startPosition`, about `numBytes` of them.
    fn fetch(&mut self, request: &Value) -> Answer {
        let handle = request["resultSetHandle"]
            .as_i64()
            .ok_or_else(|| Refusal::new("08P01", "fetch needs resultSetHandle"))?;
        let pending = self.pending(handle)?;
        let start = usize::try_from(request["startPosition"].as_u64().unwrap_or(0))
            .unwrap_or(usize::MAX)
            .min(pending.rows);
        let bytes = request["numBytes"].as_u64().unwrap_or(5 << 20).max(1);
        let width = pending
            .batches
            .first()
            .map_or(1, |b| b.num_columns().max(1));
        // About 16 bytes per value of JSON; at least one row.
        let count = usize::try_from(bytes / (16 * width as u64))
            .unwrap_or(usize::MAX)
            .max(1)
            .min(pending.rows - start);
        let data = columns_of(&pending.batches, width, start, count)?;
        Ok(ok(json!({"numRows": count, "data": data})))
    }

    /// The kept result of `handle`.
    fn pending(&self, handle: i64) -> Result<&Pending, Refusal> {
        self.results
            .get(&handle)
            .ok_or_else(|| Refusal::new("08P01", format!("no result set {handle}")))
    }

    async fn set_attributes(&mut self, attributes: &Value) -> Result<(), Refusal> {
        if let Some(seconds) = attributes["feedbackInterval"].as_u64() {
            self.feedback_interval = seconds;
        }
        if let Some(rows) = attributes["resultSetMaxRows"].as_u64() {
            self.max_rows = rows;
        }
        let client = self.client()?;
        let mut statements = Vec::new();
        if let Some(on) = attributes["autocommit"].as_bool()
            && on != self.autocommit
        {
            statements.push(format!("SET AUTOCOMMIT {}", if on { "ON" } else { "OFF" }));
            self.autocommit = on;
        }
        if let Some(schema) = attributes["currentSchema"].as_str()
            && !schema.is_empty()
        {
            statements.push(format!("OPEN SCHEMA \"{}\"", schema.replace('"', "\"\"")));
        }
        if let Some(seconds) = attributes["queryTimeout"].as_u64()
            && seconds != self.query_timeout
        {
            statements.push(format!("ALTER SESSION SET QUERY_TIMEOUT = {seconds}"));
            self.query_timeout = seconds;
        }
        for sql in statements {
            client
                .session
                .sql(&sql)
                .await
                .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
        }
        Ok(())
    }

    fn with_attributes(&self, mut reply: Value) -> Value {
        let schema = self
            .session
            .as_ref()
            .and_then(|(_, c)| c.session.exasol_schema())
            .unwrap_or_default();
        reply["attributes"] = json!({
            "autocommit": self.autocommit,
            "currentSchema": schema,
            "queryTimeout": self.query_timeout,
            "feedbackInterval": self.feedback_interval,
            "resultSetMaxRows": self.max_rows,
            "compressionEnabled": self.compressed,
            "encryptionEnabled": self.encrypted,
            "dateFormat": "YYYY-MM-DD",
            "timestampFormat": "YYYY-MM-DD HH24:MI:SS.FF6",
            "numericCharacters": ".,",
        });
        reply
    }
}

/// Reads `frame` as the port reads a request, without a connection: the frame (zlib or not),
/// its JSON, and the statement texts and values it carries (an `EXPORT`/`IMPORT` through HTTP, a
/// prepared `INSERT`'s expansion to all its rows, a metadata command's query, parameter data).
/// For the fuzz targets: nothing a client sends may panic here.
#[doc(hidden)]
pub fn read_request(frame: &[u8]) {
    let text = inflate(frame).unwrap_or_else(|| String::from_utf8_lossy(frame).into_owned());
    let Ok(request) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let command = request["command"].as_str().unwrap_or_default();
    if let Some(sql) = request["sqlText"].as_str() {
        let _ = transfer::parse(sql);
        if placeholders(sql).is_ok() {
            let rows = request["numRows"].as_u64().unwrap_or(1).min(1000);
            let _ = values_of_rows(sql, usize::try_from(rows).unwrap_or(1));
        }
    }
    if metadata::COMMANDS.contains(&command) {
        let _ = metadata::query(command, &request);
    }
    if let Some(columns) = request["data"].as_array() {
        let values = columns.iter().filter_map(Value::as_array).flatten();
        let _ = values.map(scalar).count();
    }
}

/// Runs `work` (a command) while still reading `ws`: `abortQuery` stops it (57014, and what
/// it held, its GPU lease included, is dropped), a Pong frame goes out every `every` seconds
/// (Exasol's heartbeat), and any other request is answered that a statement runs. `None` when
/// the client went away.
async fn run_beside<S, E>(
    work: impl std::future::Future<Output = Answer>,
    ws: &mut S,
    compressed: bool,
    every: u64,
) -> Option<Answer>
where
    S: futures::Stream<Item = Result<Message, E>> + futures::Sink<Message> + Unpin,
{
    let mut work = std::pin::pin!(work);
    let period = std::time::Duration::from_secs(every.max(1));
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            answer = &mut work => return Some(answer),
            message = ws.next() => {
                let text = match message? {
                    Ok(Message::Text(t)) => t.as_str().to_string(),
                    Ok(Message::Binary(b)) if compressed => inflate(&b)?,
                    Ok(Message::Binary(b)) => String::from_utf8_lossy(&b).into_owned(),
                    Ok(Message::Close(_)) | Err(_) => return None,
                    Ok(_) => continue,
                };
                let command = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|r| r["command"].as_str().map(str::to_string));
                if command.as_deref() == Some("abortQuery") {
                    return Some(Err(Refusal::new(
                        "57014",
                        "the statement was aborted by the client (abortQuery)",
                    )));
                }
                let busy = error_json(&Refusal::new(
                    "08P01",
                    "a statement is running on this connection: wait for its answer or send \
                     abortQuery",
                ));
                let text = busy.to_string();
                let reply = if compressed {
                    Message::Binary(deflate(text.as_bytes()).into())
                } else {
                    Message::Text(text.into())
                };
                if ws.send(reply).await.is_err() {
                    return None;
                }
            }
            _ = beat.tick(), if every > 0 => {
                if ws.send(Message::Pong(Default::default())).await.is_err() {
                    return None;
                }
            }
        }
    }
}

/// The `columns` of a result set: names and Exasol's data types.
fn column_types(schema: &SchemaRef) -> Vec<Value> {
    schema
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "dataType": data_type(f)}))
        .collect()
}

fn ok(data: Value) -> Value {
    json!({"status": "ok", "responseData": data})
}

fn error_json(refusal: &Refusal) -> Value {
    json!({"status": "error", "exception": {"text": refusal.text, "sqlCode": refusal.code}})
}

/// Whether a statement answers with a row count rather than rows: DML (a `count` column), and
/// statements without columns.
fn is_row_count(sql: &str, schema: &SchemaRef) -> bool {
    if schema.fields().is_empty() {
        return true;
    }
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    let dml = [
        "INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "IMPORT", "COPY",
    ];
    let ddl = [
        "CREATE", "DROP", "ALTER", "GRANT", "REVOKE", "OPEN", "CLOSE", "SET", "COMMIT", "ROLLBACK",
        "RENAME", "COMMENT", "KILL", "EXPORT",
    ];
    (dml.contains(&first.as_str()) && schema.fields().len() == 1) || ddl.contains(&first.as_str())
}

/// The tokens of `sql` (sqlparser's tokenizer, as DataFusion reads statements).
fn tokens(sql: &str) -> Result<Vec<Token>, Refusal> {
    Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| Refusal::new("42000", e.to_string()))
}

/// How many `?` parameters `sql` has.
fn placeholders(sql: &str) -> Result<usize, Refusal> {
    Ok(tokens(sql)?
        .iter()
        .filter(|t| matches!(t, Token::Placeholder(p) if p == "?"))
        .count())
}

/// `INSERT … VALUES (?, …)` with its one parenthesized row of every `?` written out `rows`
/// times (`VALUES (?, ?), (?, ?), …`), so that all rows of a prepared insert are one statement;
/// `None` for any other statement.
fn values_of_rows(sql: &str, rows: usize) -> Result<Option<String>, Refusal> {
    let tokens = tokens(sql)?;
    let meaningful = |i: &usize| !matches!(tokens[*i], Token::Whitespace(_));
    let Some(values) = (0..tokens.len())
        .find(|&i| matches!(&tokens[i], Token::Word(w) if w.keyword == Keyword::VALUES))
    else {
        return Ok(None);
    };
    let Some(open) = (values + 1..tokens.len()).find(meaningful) else {
        return Ok(None);
    };
    if tokens[open] != Token::LParen {
        return Ok(None);
    }
    let mut depth = 0usize;
    let mut close = None;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(close) = close else { return Ok(None) };
    let is_param = |t: &Token| matches!(t, Token::Placeholder(_));
    let inside = tokens[open..=close].iter().filter(|t| is_param(t)).count();
    let all = tokens.iter().filter(|t| is_param(t)).count();
    // Only the row's own `?`s, and no second row or clause after it.
    let rest_is_empty = (close + 1..tokens.len())
        .filter(meaningful)
        .all(|i| tokens[i] == Token::SemiColon);
    if inside != all
        || !rest_is_empty
        || tokens
            .iter()
            .any(|t| matches!(t, Token::Placeholder(p) if p != "?"))
    {
        return Ok(None);
    }
    let text = |range: std::ops::Range<usize>| -> String {
        tokens[range].iter().map(ToString::to_string).collect()
    };
    let row = text(open..close + 1);
    Ok(Some(format!(
        "{}{}",
        text(0..open),
        vec![row; rows].join(", ")
    )))
}

/// A parameter value as pyexasol sends it: numbers, text, booleans, NULL.
fn scalar(value: &Value) -> ScalarValue {
    match value {
        Value::Null => ScalarValue::Null,
        Value::Bool(b) => ScalarValue::Boolean(Some(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => ScalarValue::Int64(Some(i)),
            None => ScalarValue::Float64(n.as_f64()),
        },
        Value::String(s) => ScalarValue::Utf8(Some(s.clone())),
        other => ScalarValue::Utf8(Some(other.to_string())),
    }
}

/// The `dataType` of a column as Exasol describes it, from the engine's Exasol type of its
/// field (the declared SQL type where the field carries one: `VARCHAR(100) UTF8`,
/// `DECIMAL(18,2)`, `HASHTYPE(16 BYTE)`, `GEOMETRY(4326)`; else its Arrow type's).
fn data_type(field: &Field) -> Value {
    let t = accelsql_engine::exasol_field_type(field);
    let name = t.name.to_ascii_uppercase();
    // The numbers inside the name's parentheses: `DAY(2) TO SECOND(3)` gives 2 and 3.
    let numbers: Vec<u64> = name
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let first = numbers.first().copied();
    if name.starts_with("DECIMAL") {
        json!({"type": "DECIMAL", "precision": t.precision.or(first).unwrap_or(36),
               "scale": t.scale.unwrap_or(0)})
    } else if name.starts_with("DOUBLE") || name.starts_with("FLOAT") {
        json!({"type": "DOUBLE"})
    } else if name.starts_with("BOOLEAN") {
        json!({"type": "BOOLEAN"})
    } else if name.starts_with("DATE") {
        json!({"type": "DATE", "size": 4})
    } else if name.starts_with("TIMESTAMP") {
        json!({"type": "TIMESTAMP", "size": 8, "withLocalTimeZone": name.contains("LOCAL TIME ZONE")})
    } else if name.starts_with("INTERVAL YEAR") {
        json!({"type": "INTERVAL YEAR TO MONTH", "size": 4, "precision": first.unwrap_or(2)})
    } else if name.starts_with("INTERVAL") {
        json!({"type": "INTERVAL DAY TO SECOND", "size": 8, "precision": first.unwrap_or(2),
               "fraction": numbers.get(1).copied().unwrap_or(3)})
    } else if name.starts_with("GEOMETRY") {
        json!({"type": "GEOMETRY", "srid": first.unwrap_or(0)})
    } else if name.starts_with("HASHTYPE") {
        // Shown as hex: two characters a byte (`HASHTYPE(16 BYTE)`: 32).
        json!({"type": "HASHTYPE", "size": first.unwrap_or(16) * 2})
    } else if name.starts_with("CHAR") || name.starts_with("VARCHAR") {
        let set = if name.ends_with("ASCII") {
            "ASCII"
        } else {
            "UTF8"
        };
        let kind = if name.starts_with("CHAR") {
            "CHAR"
        } else {
            "VARCHAR"
        };
        json!({"type": kind, "size": t.size.or(first).unwrap_or(2_000_000), "characterSet": set})
    } else {
        json!({"type": "VARCHAR", "size": 2_000_000, "characterSet": "UTF8"})
    }
}

/// Rows `start..start + count` of `batches`, column by column, as Exasol sends them.
fn columns_of(
    batches: &[RecordBatch],
    width: usize,
    start: usize,
    count: usize,
) -> Result<Vec<Vec<Value>>, Refusal> {
    let mut columns: Vec<Vec<Value>> = (0..width).map(|_| Vec::with_capacity(count)).collect();
    let mut skip = start;
    let mut left = count;
    for batch in batches {
        if left == 0 {
            break;
        }
        let rows = batch.num_rows();
        if skip >= rows {
            skip -= rows;
            continue;
        }
        let take = (rows - skip).min(left);
        let part = batch.slice(skip, take);
        for (c, column) in part.columns().iter().enumerate().take(width) {
            values_of(column, &mut columns[c])?;
        }
        left -= take;
        skip = 0;
    }
    Ok(columns)
}

/// The JSON values of `column`, appended to `out`.
fn values_of(column: &ArrayRef, out: &mut Vec<Value>) -> Result<(), Refusal> {
    let formats = FormatOptions::default()
        .with_null("")
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.6f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.6f"));
    let text = ArrayFormatter::try_new(column.as_ref(), &formats)
        .map_err(|e| Refusal::new("22000", e.to_string()))?;
    for row in 0..column.len() {
        if column.is_null(row) {
            out.push(Value::Null);
            continue;
        }
        let value = match column.data_type() {
            DataType::Boolean => json!(column.as_boolean().value(row)),
            t if t.is_integer() => {
                let shown = text.value(row).to_string();
                shown
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or(Value::String(shown))
            }
            t if t.is_floating() => {
                let shown = text.value(row).to_string();
                match shown.parse::<f64>() {
                    Ok(v) if v.is_finite() => json!(v),
                    _ => Value::Null,
                }
            }
            DataType::Timestamp(TimeUnit::Second, _) => {
                Value::String(format!("{}.000000", text.value(row)))
            }
            _ => Value::String(text.value(row).to_string()),
        };
        out.push(value);
    }
    Ok(())
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

fn inflate(bytes: &[u8]) -> Option<String> {
    let mut decoder = flate2::read::ZlibDecoder::new(bytes).take(MAX_MESSAGE as u64 + 1);
    let mut text = String::new();
    decoder.read_to_string(&mut text).ok()?;
    (text.len() <= MAX_MESSAGE).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_encrypted_with_the_public_key_decrypts() {
        let key = LoginKey::new().unwrap();
        let public = RsaPublicKey::from(&key.private);
        let sealed = public
            .encrypt(&mut rand::rngs::OsRng, Pkcs1v15Encrypt, b"wonder land")
            .unwrap();
        let sent = base64::engine::general_purpose::STANDARD.encode(sealed);
        assert_eq!(key.decrypt(&sent).as_deref(), Some("wonder land"));
        assert_eq!(key.decrypt("not base64!"), None);
        assert!(key.pem.starts_with("-----BEGIN RSA PUBLIC KEY-----"));
    }

    #[test]
    fn a_prepared_insert_of_many_rows_becomes_one_statement() {
        let sql = "INSERT INTO t (a, b) VALUES (?, ?)";
        assert_eq!(placeholders(sql).ok(), Some(2));
        assert_eq!(
            values_of_rows(sql, 3).ok().flatten().as_deref(),
            Some("INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?)")
        );
        // Parameters elsewhere, or a query: row by row.
        assert_eq!(
            values_of_rows("SELECT * FROM t WHERE a = ?", 2).ok(),
            Some(None)
        );
        assert_eq!(
            values_of_rows("INSERT INTO t SELECT ? FROM u WHERE b = ?", 2).ok(),
            Some(None)
        );
        // A `?` inside a string is text, not a parameter.
        assert_eq!(placeholders("SELECT '?' , ?").ok(), Some(1));
    }

    #[test]
    fn compressed_messages_round_trip_and_a_bomb_is_refused() {
        let text = "{\"command\":\"execute\"}".repeat(100);
        assert_eq!(
            inflate(&deflate(text.as_bytes())).as_deref(),
            Some(text.as_str())
        );
        let bomb = deflate(&vec![b'x'; MAX_MESSAGE + 10]);
        assert_eq!(inflate(&bomb), None);
    }
}
