//! pyexasol's HTTP transport, the tunnels and the HTTP: a client opens a second TCP connection
//! to the Exasol port and sends a tunnel request (12 bytes); the server answers with an
//! internal address (`ip:port`, the port a random token) and keeps the connection; a statement
//! of the same client (`EXPORT … AT 'http://ip:port' FILE '000.csv'`, see `transfer.rs`) then
//! claims it, and the server, as the HTTP client on it, `PUT`s a file to the client or `GET`s
//! one from it, chunked, gzip-compressed when the file's name ends in `.gz`, over TLS for an
//! `https://` address (the client then being the TLS server; its key is checked against the
//! statement's `PUBLIC KEY 'sha256//…'` where one is given).

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use flate2::Compression;
use flate2::write::{GzDecoder, GzEncoder};
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::Digest;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::conn::{ConnState, GuardedConn};

/// The tunnel request: 0x02212102, 1, 1 as little-endian 32-bit integers.
pub(crate) const TUNNEL_REQUEST: [u8; 12] = [0x02, 0x21, 0x21, 0x02, 1, 0, 0, 0, 1, 0, 0, 0];

/// How long an opened tunnel waits for its statement before it is closed.
const TUNNEL_WAIT: Duration = Duration::from_secs(30);

/// How many tunnels may wait for their statements at once, server-wide.
const MAX_WAITING: usize = 256;

/// The largest HTTP chunk or header block accepted from a client.
const MAX_CHUNK: usize = 64 << 20;

/// A tunnel's byte stream, plain or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Tunnels opened and not yet claimed by a statement, by token.
#[derive(Default)]
pub(crate) struct Tunnels {
    waiting: Mutex<HashMap<u32, Waiting>>,
}

/// An opened tunnel.
struct Waiting {
    io: GuardedConn,
    state: Arc<ConnState>,
}

/// Why a tunnel could not be opened, claimed or used: the client's text.
#[derive(Debug)]
pub(crate) struct TransportError(pub(crate) String);

impl<E: std::fmt::Display> From<E> for TransportError {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

impl Tunnels {
    /// Answers the tunnel request on `io` (whose first byte, `first`, was read already) with
    /// its internal address and keeps the tunnel for [`TUNNEL_WAIT`].
    pub(crate) async fn open(
        self: &Arc<Self>,
        mut io: GuardedConn,
        first: u8,
        local: Option<SocketAddr>,
    ) -> Result<(), TransportError> {
        let mut rest = [0u8; 11];
        io.read_exact(&mut rest).await?;
        if first != TUNNEL_REQUEST[0] || rest[..] != TUNNEL_REQUEST[1..] {
            return Err(TransportError("not a tunnel request".into()));
        }
        let token = loop {
            let token = rand::random::<u32>() & 0x7fff_ffff;
            if token > 0 && !self.lock().contains_key(&token) {
                break token;
            }
        };
        let ip = match local {
            Some(SocketAddr::V4(at)) if !at.ip().is_unspecified() => at.ip().to_string(),
            _ => "127.0.0.1".to_string(),
        };
        let mut reply = [0u8; 24];
        reply[0..4].copy_from_slice(&1i32.to_le_bytes());
        reply[4..8].copy_from_slice(&token.to_le_bytes());
        reply[8..8 + ip.len()].copy_from_slice(ip.as_bytes());
        io.write_all(&reply).await?;
        io.flush().await?;
        {
            let mut waiting = self.lock();
            if waiting.len() >= MAX_WAITING {
                return Err(TransportError(format!(
                    "{MAX_WAITING} tunnels wait for their statements already"
                )));
            }
            let state = io.state();
            waiting.insert(token, Waiting { io, state });
        }
        let tunnels = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(TUNNEL_WAIT).await;
            tunnels.lock().remove(&token);
        });
        Ok(())
    }

    /// Takes the tunnel of `token`, when the client at `peer` opened it.
    fn claim(&self, token: u32, peer: Option<IpAddr>) -> Option<GuardedConn> {
        let mut waiting = self.lock();
        let mine = waiting
            .get(&token)
            .is_some_and(|w| w.state.peer.map(|p| p.ip()) == peer);
        let tunnel = waiting.remove(&token).filter(|_| mine)?;
        // A claimed tunnel is its session's: no pre-login deadline or byte budget.
        tunnel.state.authenticate();
        Some(tunnel.io)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Waiting>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where a statement sends or reads one file: a tunnel's address and the file's name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Endpoint {
    /// The tunnel's token (the port of its address).
    pub(crate) token: u32,
    /// `https://`: TLS, the client being the TLS server.
    pub(crate) tls: bool,
    /// The client key's SHA-256 (`PUBLIC KEY 'sha256//…'`, base64), checked when given.
    pub(crate) key: Option<String>,
    /// The file's name (`000.csv`, `000.gz`).
    pub(crate) file: String,
}

impl Endpoint {
    /// The endpoint of `url` (`http[s]://ip:port`) and `file`; `None` when `url` is no HTTP
    /// address.
    pub(crate) fn parse(url: &str, file: &str, key: Option<String>) -> Option<Self> {
        let lower = url.to_ascii_lowercase();
        let (tls, rest) = if let Some(rest) = lower.strip_prefix("https://") {
            (true, rest)
        } else {
            (false, lower.strip_prefix("http://")?)
        };
        let port = rest.split(['/', ';']).next()?.rsplit_once(':')?.1;
        Some(Self {
            token: port.parse().ok()?,
            tls,
            key,
            file: file.to_string(),
        })
    }

    /// Whether the file is gzip-compressed.
    pub(crate) fn gzip(&self) -> bool {
        self.file.to_ascii_lowercase().ends_with(".gz")
    }

    /// Claims the tunnel and opens it (TLS where asked).
    async fn connect(
        &self,
        tunnels: &Tunnels,
        peer: Option<IpAddr>,
    ) -> Result<Box<dyn Io>, TransportError> {
        let io = tunnels.claim(self.token, peer).ok_or_else(|| {
            TransportError(format!(
                "no tunnel {} from this client waits: HTTP transfers go through a tunnel the \
                 client opened on this port (pyexasol's export_to_* and import_from_*) within \
                 {} s before the statement",
                self.token,
                TUNNEL_WAIT.as_secs()
            ))
        })?;
        if !self.tls {
            return Ok(Box::new(io));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(PinnedKey {
            key: self.key.clone(),
            provider: Arc::clone(&provider),
        });
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        let name = ServerName::try_from("exasol.com")?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, io)
            .await
            .map_err(|e| TransportError(format!("TLS with the client failed: {e}")))?;
        Ok(Box::new(tls))
    }
}

/// Accepts the client's self-signed certificate whose key is the pinned one (any, when none
/// is pinned: pyexasol pins its key for servers of version 8.32 and later).
#[derive(Debug)]
struct PinnedKey {
    key: Option<String>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for PinnedKey {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pinned) = &self.key else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| rustls::Error::General(format!("unreadable certificate: {e}")))?;
        let spki = cert.subject_public_key_info();
        let sha = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&spki));
        if &sha == pinned {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the client's key is not the one the statement names (PUBLIC KEY)".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A file being sent to the client: an HTTP `PUT` with a chunked body.
pub(crate) struct Upload {
    io: Box<dyn Io>,
    gzip: Option<GzEncoder<Vec<u8>>>,
}

impl Upload {
    /// Claims the tunnel of `endpoint` and starts the `PUT`.
    pub(crate) async fn start(
        endpoint: &Endpoint,
        tunnels: &Tunnels,
        peer: Option<IpAddr>,
    ) -> Result<Self, TransportError> {
        let mut io = endpoint.connect(tunnels, peer).await?;
        let head = format!(
            "PUT /{} HTTP/1.1\r\nHost: accelsql\r\nTransfer-Encoding: chunked\r\n\r\n",
            endpoint.file
        );
        io.write_all(head.as_bytes()).await?;
        let gzip = endpoint
            .gzip()
            .then(|| GzEncoder::new(Vec::new(), Compression::fast()));
        Ok(Self { io, gzip })
    }

    /// Sends `data` (compressed, when the file is).
    pub(crate) async fn send(&mut self, data: &[u8]) -> Result<(), TransportError> {
        match &mut self.gzip {
            Some(gzip) => {
                gzip.write_all(data)?;
                let out = std::mem::take(gzip.get_mut());
                write_chunk(&mut self.io, &out).await
            }
            None => write_chunk(&mut self.io, data).await,
        }
    }

    /// Ends the body and reads the client's answer: an error unless it is `200`.
    pub(crate) async fn finish(mut self) -> Result<(), TransportError> {
        if let Some(gzip) = self.gzip.take() {
            let out = gzip.finish()?;
            write_chunk(&mut self.io, &out).await?;
        }
        self.io.write_all(b"0\r\n\r\n").await?;
        self.io.flush().await?;
        let mut reader = BufReader::new(self.io);
        read_head(&mut reader).await?;
        Ok(())
    }
}

/// A file being read from the client: an HTTP `GET` and its chunked (or sized, or
/// to-the-end) body.
pub(crate) struct Download {
    reader: BufReader<Box<dyn Io>>,
    body: Body,
    gzip: Option<GzDecoder<Vec<u8>>>,
}

/// How the body of a download ends.
enum Body {
    Chunked,
    Sized(u64),
    ToEnd,
    Done,
}

impl Download {
    /// Claims the tunnel of `endpoint`, sends the `GET` and reads the answer's head.
    pub(crate) async fn start(
        endpoint: &Endpoint,
        tunnels: &Tunnels,
        peer: Option<IpAddr>,
    ) -> Result<Self, TransportError> {
        let mut io = endpoint.connect(tunnels, peer).await?;
        let head = format!("GET /{} HTTP/1.1\r\nHost: accelsql\r\n\r\n", endpoint.file);
        io.write_all(head.as_bytes()).await?;
        io.flush().await?;
        let mut reader = BufReader::new(io);
        let headers = read_head(&mut reader).await?;
        let header = |name: &str| {
            headers.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_ascii_lowercase())
            })
        };
        let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            Body::Chunked
        } else if let Some(length) = header("content-length").and_then(|v| v.parse().ok()) {
            Body::Sized(length)
        } else {
            Body::ToEnd
        };
        let gzip = endpoint.gzip().then(|| GzDecoder::new(Vec::new()));
        Ok(Self { reader, body, gzip })
    }

    /// The next piece of the file (decompressed), `None` at its end.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<u8>>, TransportError> {
        loop {
            let raw = match self.body {
                Body::Done => return Ok(None),
                Body::Chunked => {
                    let mut line = String::new();
                    (&mut self.reader).take(64).read_line(&mut line).await?;
                    let size = line.trim().split(';').next().unwrap_or("");
                    let size = usize::from_str_radix(size, 16).map_err(|_| {
                        TransportError(format!("malformed chunk size {:?} from the client", line))
                    })?;
                    if size > MAX_CHUNK {
                        return Err(TransportError(format!(
                            "a chunk of {size} bytes from the client; at most {MAX_CHUNK}"
                        )));
                    }
                    if size == 0 {
                        self.body = Body::Done;
                        Vec::new()
                    } else {
                        let mut data = vec![0u8; size + 2];
                        self.reader.read_exact(&mut data).await?;
                        if !data.ends_with(b"\r\n") {
                            return Err(TransportError(
                                "a chunk from the client does not end with CRLF".into(),
                            ));
                        }
                        data.truncate(size);
                        data
                    }
                }
                Body::Sized(left) => {
                    let want = usize::try_from(left.min(1 << 20)).unwrap_or(1 << 20);
                    let mut data = vec![0u8; want];
                    self.reader.read_exact(&mut data).await?;
                    self.body = match left - want as u64 {
                        0 => Body::Done,
                        left => Body::Sized(left),
                    };
                    data
                }
                Body::ToEnd => {
                    let mut data = vec![0u8; 1 << 20];
                    let n = self.reader.read(&mut data).await?;
                    if n == 0 {
                        self.body = Body::Done;
                    }
                    data.truncate(n);
                    data
                }
            };
            let done = matches!(self.body, Body::Done);
            let data = match &mut self.gzip {
                Some(gzip) => {
                    gzip.write_all(&raw)?;
                    if done {
                        gzip.try_finish()?;
                    }
                    std::mem::take(gzip.get_mut())
                }
                None => raw,
            };
            if !data.is_empty() {
                return Ok(Some(data));
            }
            if done {
                return Ok(None);
            }
        }
    }
}

async fn write_chunk(io: &mut Box<dyn Io>, data: &[u8]) -> Result<(), TransportError> {
    if data.is_empty() {
        return Ok(());
    }
    io.write_all(format!("{:X}\r\n", data.len()).as_bytes())
        .await?;
    io.write_all(data).await?;
    io.write_all(b"\r\n").await?;
    Ok(())
}

/// Reads an HTTP answer's head: its header lines when the status is 200, else an error.
async fn read_head<R: AsyncBufReadExt + Unpin>(reader: &mut R) -> Result<String, TransportError> {
    let mut head = String::new();
    loop {
        let before = head.len();
        let read = reader.take(8192).read_line(&mut head).await?;
        if read == 0 {
            return Err(TransportError(
                "the client closed the tunnel before it answered".into(),
            ));
        }
        if head.len() > 65536 {
            return Err(TransportError("the client's HTTP head is too long".into()));
        }
        if head[before..].trim().is_empty() {
            break;
        }
    }
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(TransportError(format!(
            "the client answered {:?}",
            status.trim()
        )));
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_read_from_their_addresses() {
        let e = Endpoint::parse("http://10.0.0.1:12345", "000.csv", None).unwrap();
        assert_eq!((e.token, e.tls, e.gzip()), (12345, false, false));
        let e = Endpoint::parse("HTTPS://127.0.0.1:7", "001.gz", Some("k=".into())).unwrap();
        assert_eq!((e.token, e.tls, e.gzip()), (7, true, true));
        assert!(Endpoint::parse("ftp://h:1", "a", None).is_none());
        assert!(Endpoint::parse("http://h", "a", None).is_none());
        assert!(Endpoint::parse("http://h:99999999999", "a", None).is_none());
    }

    #[tokio::test]
    async fn a_chunked_gzip_download_is_read_to_its_end() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(b"1,a\n2,b\n").unwrap();
        let body = gz.finish().unwrap();
        let mut answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for part in body.chunks(5) {
            answer.extend(format!("{:X}\r\n", part.len()).as_bytes());
            answer.extend(part);
            answer.extend(b"\r\n");
        }
        answer.extend(b"0\r\n\r\n");
        let (client, server) = tokio::io::duplex(1 << 16);
        let io: Box<dyn Io> = Box::new(server);
        let mut reader = BufReader::new(io);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(&answer).await.unwrap();
        let head = read_head(&mut reader).await.unwrap();
        assert!(head.contains("chunked"));
        let mut download = Download {
            reader,
            body: Body::Chunked,
            gzip: Some(GzDecoder::new(Vec::new())),
        };
        let mut all = Vec::new();
        while let Some(piece) = download.next().await.unwrap() {
            all.extend(piece);
        }
        assert_eq!(all, b"1,a\n2,b\n");
        drop(client_read.read(&mut [0u8; 1]));
    }

    #[tokio::test]
    async fn an_answer_other_than_200_is_an_error() {
        let (client, server) = tokio::io::duplex(1 << 12);
        let (_, mut write) = tokio::io::split(client);
        write
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let io: Box<dyn Io> = Box::new(server);
        let error = read_head(&mut BufReader::new(io)).await.unwrap_err();
        assert!(error.0.contains("500"), "{}", error.0);
    }
}
