//! How a cluster's processes prove who they are: a shared secret, or certificates the operator
//! issued, become mutual TLS on every connection (client → scheduler, executor → scheduler,
//! scheduler → executor, every Flight fetch).
//!
//! A cluster secret is 32 random bytes, written hex-encoded into an owner-only file
//! ([`ClusterAuth::write_secret_file`]). Every process derives the same certificate authority
//! from it (an Ed25519 key whose seed is an HMAC of the secret, and a fixed name), issues itself
//! a certificate signed by that authority, serves TLS with it and requires one from every peer.
//! A process without the secret can neither connect (its certificate is refused) nor stand in
//! for a cluster process (its certificate does not verify). Without a secret or certificates a
//! cluster stays on loopback ([`ClusterAuth::check_listen`]).

use std::fmt;
use std::io::Write;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ballista_core::extension::EndpointOverrideFn;
use ballista_core::utils::{GrpcClientConfig, create_grpc_client_endpoint};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ED25519, date_time_ymd,
};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::{ClusterError, Result};

/// The name every certificate derived from a cluster secret carries, and the name a process
/// checks in its peer's certificate (whatever address it connected to).
const SECRET_SERVER_NAME: &str = "accelsql-cluster";

/// The PKCS#8 (RFC 8410) prefix of an Ed25519 private key: the 32-byte seed follows.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// How a cluster's processes authenticate each other: nothing (loopback only), or mutual TLS
/// from a cluster secret or from the operator's certificates.
#[derive(Clone, Default)]
pub struct ClusterAuth {
    tls: Option<Arc<TlsMaterial>>,
}

/// The certificates of one process: its own (chain and key), the authority it trusts, and the
/// name it expects in peers' certificates (`None`: the host it connects to).
struct TlsMaterial {
    cert_pem: String,
    key_pem: String,
    ca_pem: String,
    server_name: Option<String>,
    source: String,
}

impl fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tls {
            None => f.write_str("ClusterAuth(none: loopback only)"),
            Some(tls) => write!(f, "ClusterAuth(mutual TLS from {})", tls.source),
        }
    }
}

/// `Err(ClusterError::Insecure { .. })` from a format string.
macro_rules! insecure_err {
    ($($arg:tt)*) => {
        Err(ClusterError::Insecure { message: format!($($arg)*) })
    };
}

impl ClusterAuth {
    /// No authentication: every process must listen on loopback only.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether connections are authenticated and encrypted (a secret or certificates).
    pub fn is_secured(&self) -> bool {
        self.tls.is_some()
    }

    /// Writes a new random cluster secret to `path`, readable by its owner only (0600); fails if
    /// the file exists.
    pub fn write_secret_file(path: &Path) -> Result<()> {
        let mut secret = [0u8; 32];
        getrandom(&mut secret)?;
        let text = format!("{}\n", hex(&secret));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(|e| ClusterError::Insecure {
            message: format!("cannot create the secret file {}: {e}", path.display()),
        })?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| ClusterError::Insecure {
                message: format!("cannot write the secret file {}: {e}", path.display()),
            })
    }

    /// The authentication a cluster secret file gives (see the module's documentation). The
    /// file must be readable by its owner only.
    pub fn from_secret_file(path: &Path) -> Result<Self> {
        check_owner_only(path, "secret file")?;
        let text = std::fs::read_to_string(path).map_err(|e| ClusterError::Insecure {
            message: format!("cannot read the secret file {}: {e}", path.display()),
        })?;
        let Some(secret) = unhex(text.trim()).filter(|s| s.len() >= 16) else {
            return insecure_err!(
                "{} is not a cluster secret (make one with `accelsql cluster secret --out FILE`)",
                path.display()
            );
        };
        Self::from_secret(&secret, &format!("the secret file {}", path.display()))
    }

    /// The authentication the secret `secret` gives; `source` names it in messages.
    fn from_secret(secret: &[u8], source: &str) -> Result<Self> {
        let cert_err = |e: rcgen::Error| ClusterError::Insecure {
            message: format!("cannot make this process's certificate from {source}: {e}"),
        };
        let seed = hmac_sha256(secret, b"accelsql cluster certificate authority v1");
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&seed);
        let ca_key = KeyPair::try_from(pkcs8.as_slice()).map_err(cert_err)?;
        // Every process builds the same authority: same name, same key.
        let mut ca = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "accelsql cluster authority");
        ca.distinguished_name = name;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.not_before = date_time_ymd(2024, 1, 1);
        ca.not_after = date_time_ymd(2124, 1, 1);
        let ca_pem = ca.self_signed(&ca_key).map_err(cert_err)?.pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate_for(&PKCS_ED25519).map_err(cert_err)?;
        let mut leaf =
            CertificateParams::new(vec![SECRET_SERVER_NAME.to_string()]).map_err(cert_err)?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "accelsql cluster process");
        leaf.distinguished_name = name;
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        leaf.not_before = date_time_ymd(2024, 1, 1);
        leaf.not_after = date_time_ymd(2124, 1, 1);
        let cert_pem = leaf.signed_by(&key, &issuer).map_err(cert_err)?.pem();
        Ok(Self {
            tls: Some(Arc::new(TlsMaterial {
                cert_pem,
                key_pem: key.serialize_pem(),
                ca_pem,
                server_name: Some(SECRET_SERVER_NAME.to_string()),
                source: source.to_string(),
            })),
        })
    }

    /// Mutual TLS with the operator's certificates: this process's certificate (PEM, chain
    /// first) and key, and the authority whose certificates it accepts from peers. Each
    /// certificate must name the host peers connect to, and allow both server and client
    /// authentication.
    pub fn from_tls_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self> {
        check_owner_only(key, "TLS key")?;
        let read = |path: &Path, what: &str| {
            std::fs::read_to_string(path).map_err(|e| ClusterError::Insecure {
                message: format!("cannot read the {what} {}: {e}", path.display()),
            })
        };
        Ok(Self {
            tls: Some(Arc::new(TlsMaterial {
                cert_pem: read(cert, "TLS certificate")?,
                key_pem: read(key, "TLS key")?,
                ca_pem: read(ca, "TLS certificate authority")?,
                server_name: None,
                source: format!("the certificate {}", cert.display()),
            })),
        })
    }

    /// The authentication a command line asks for: a secret file, or all three TLS files, or
    /// neither (loopback only).
    pub fn from_options(
        secret_file: Option<&Path>,
        tls_cert: Option<&Path>,
        tls_key: Option<&Path>,
        tls_ca: Option<&Path>,
    ) -> Result<Self> {
        match (secret_file, tls_cert, tls_key, tls_ca) {
            (None, None, None, None) => Ok(Self::none()),
            (Some(secret), None, None, None) => Self::from_secret_file(secret),
            (None, Some(cert), Some(key), Some(ca)) => Self::from_tls_files(cert, key, ca),
            (Some(_), _, _, _) => insecure_err!(
                "give either --secret-file or --tls-cert/--tls-key/--tls-ca, not both: each \
                 alone authenticates and encrypts every connection of the cluster"
            ),
            _ => insecure_err!("mutual TLS needs all three of --tls-cert, --tls-key and --tls-ca"),
        }
    }

    /// Refuses to listen on `host` without authentication unless it is a loopback address:
    /// `what` (e.g. "the scheduler") names the process in the message.
    pub fn check_listen(&self, host: &str, what: &str) -> Result<()> {
        if self.is_secured() || is_loopback_host(host) {
            return Ok(());
        }
        insecure_err!(
            "{what} would listen on {host} without authentication: anyone who reaches it could \
             run code on the cluster. Give every cluster process --secret-file FILE (make one \
             with `accelsql cluster secret --out FILE`) or --tls-cert/--tls-key/--tls-ca, or \
             listen on 127.0.0.1"
        )
    }

    /// TLS for a server of this process: its certificate, and a client certificate required
    /// from every peer. `None` without authentication.
    pub fn server_tls(&self) -> Option<ServerTlsConfig> {
        let tls = self.tls.as_ref()?;
        ensure_crypto_provider();
        Some(
            ServerTlsConfig::new()
                .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
                .client_ca_root(Certificate::from_pem(&tls.ca_pem)),
        )
    }

    /// TLS for this process's HTTP endpoint (`--http`): its certificate, and the cluster's
    /// client certificate required from every peer, as on its other ports. `None` without
    /// authentication.
    pub(crate) fn http_tls(&self) -> Result<Option<accelsql_ops::TlsAcceptor>> {
        let Some(tls) = self.tls.as_ref() else {
            return Ok(None);
        };
        accelsql_ops::tls_acceptor(
            tls.cert_pem.as_bytes(),
            tls.key_pem.as_bytes(),
            Some(tls.ca_pem.as_bytes()),
        )
        .map(Some)
        .map_err(|e| ClusterError::Insecure {
            message: e.to_string(),
        })
    }

    /// TLS for a client of this process: the authority it trusts and its own certificate.
    fn client_tls(&self) -> Option<ClientTlsConfig> {
        let tls = self.tls.as_ref()?;
        ensure_crypto_provider();
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_pem))
            .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
        Some(match &tls.server_name {
            Some(name) => config.domain_name(name.clone()),
            None => config,
        })
    }

    /// Makes Ballista's clients (to the scheduler, executors and their Flight ports) connect
    /// with TLS and this process's certificate. `None` without authentication.
    pub fn endpoint_override(&self) -> Option<EndpointOverrideFn> {
        let tls = self.client_tls()?;
        Some(Arc::new(move |endpoint: tonic::transport::Endpoint| {
            let uri = endpoint.uri();
            let Some(authority) = uri.authority() else {
                return Err(format!("no host in {uri}").into());
            };
            let secured = create_grpc_client_endpoint(
                format!("https://{authority}"),
                Some(&GrpcClientConfig::default()),
            )?;
            let secured = match endpoint.get_connect_timeout() {
                Some(timeout) => secured.connect_timeout(timeout),
                None => secured,
            };
            Ok(secured.tls_config(tls.clone())?)
        }))
    }
}

/// Whether `host` (an address or a name) is loopback only; an unspecified address
/// (`0.0.0.0`, `::`) is not.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ip.is_loopback();
    }
    match (host, 0).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// Refuses a file that others than its owner may read or write (`what` names it).
fn check_owner_only(path: &Path, what: &str) -> Result<()> {
    let metadata = std::fs::metadata(path).map_err(|e| ClusterError::Insecure {
        message: format!("cannot read the {what} {}: {e}", path.display()),
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return insecure_err!(
                "the {what} {} can be read or changed by others than its owner (mode {mode:o}): \
                 `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = metadata;
    Ok(())
}

/// Fills `buf` with random bytes from the operating system.
fn getrandom(buf: &mut [u8]) -> Result<()> {
    use ring::rand::SecureRandom;
    ring::rand::SystemRandom::new()
        .fill(buf)
        .map_err(|_| ClusterError::Insecure {
            message: "the operating system gave no random bytes".to_string(),
        })
}

/// HMAC-SHA256 of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let tag = ring::hmac::sign(&key, message);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Where `accelsql cluster local` keeps the secret it makes: a fresh owner-only directory
/// under the temporary directory, removed when the cluster stops.
pub(crate) fn private_dir(prefix: &str) -> Result<PathBuf> {
    let mut random = [0u8; 8];
    getrandom(&mut random)?;
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", hex(&random)));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir).map_err(|e| ClusterError::Insecure {
        message: format!("cannot create {}: {e}", dir.display()),
    })?;
    Ok(dir)
}

/// Makes ring rustls's process-wide provider (tonic's TLS takes that one), unless the process
/// has one already: delta-rs's HTTP client also turns on rustls's aws-lc-rs, and with two
/// providers built in rustls cannot pick one itself.
pub(crate) fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /healthz` over TLS to `at`, as a client with `identity` (the cluster's certificate
    /// and key) or none; the answer's first line, or why there was none.
    async fn https_healthz(at: std::net::SocketAddr, tls: &TlsMaterial, identity: bool) -> String {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(tls.ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = if identity {
            let certs = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
                .collect::<std::result::Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        } else {
            builder.with_no_client_auth()
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(at).await.unwrap();
        let name = ServerName::try_from(SECRET_SERVER_NAME).unwrap();
        let mut stream = match connector.connect(name, tcp).await {
            Ok(stream) => stream,
            Err(e) => return format!("handshake: {e}"),
        };
        let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
        if let Err(e) = stream.write_all(request).await {
            return format!("write: {e}");
        }
        let mut answer = Vec::new();
        match stream.read_to_end(&mut answer).await {
            Ok(_) => String::from_utf8_lossy(&answer)
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
            Err(e) => format!("read: {e}"),
        }
    }

    #[tokio::test]
    async fn a_secured_clusters_http_endpoint_asks_for_the_clusters_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        ClusterAuth::write_secret_file(&path).unwrap();
        let auth = ClusterAuth::from_secret_file(&path).unwrap();
        let render: crate::metrics::Render = Arc::new(|| Box::pin(async { "# EOF\n".to_string() }));
        let (at, task) =
            crate::metrics::start_http("127.0.0.1:0".parse().unwrap(), &auth, "the test", render)
                .await
                .unwrap();
        let tls = auth.tls.as_ref().unwrap();
        assert_eq!(https_healthz(at, tls, true).await, "HTTP/1.1 200 OK");
        let refused = https_healthz(at, tls, false).await;
        assert!(
            !refused.starts_with("HTTP/"),
            "served without a certificate: {refused}"
        );
        // Plain HTTP gets no answer.
        let mut plain = tokio::net::TcpStream::connect(at).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(
            &mut plain,
            b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
        )
        .await
        .unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut answer),
        )
        .await;
        assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
        task.abort();
    }

    #[test]
    fn a_secret_file_is_owner_only_and_derives_the_same_authority() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        ClusterAuth::write_secret_file(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        // A second secret never overwrites the first.
        assert!(ClusterAuth::write_secret_file(&path).is_err());
        let a = ClusterAuth::from_secret_file(&path).unwrap();
        let b = ClusterAuth::from_secret_file(&path).unwrap();
        let (a, b) = (a.tls.unwrap(), b.tls.unwrap());
        // Same authority, different process certificates and keys.
        assert_eq!(a.ca_pem, b.ca_pem);
        assert_ne!(a.cert_pem, b.cert_pem);
        assert_ne!(a.key_pem, b.key_pem);
        let other = dir.path().join("other");
        ClusterAuth::write_secret_file(&other).unwrap();
        let c = ClusterAuth::from_secret_file(&other).unwrap().tls.unwrap();
        assert_ne!(a.ca_pem, c.ca_pem);
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        ClusterAuth::write_secret_file(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ClusterAuth::from_secret_file(&path).unwrap_err();
        assert_eq!(e.code(), ClusterError::INSECURE);
        assert!(e.to_string().contains("chmod 600"), "{e}");
    }

    #[test]
    fn garbage_is_not_a_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(&path)
            .unwrap()
            .write_all(b"hunter2\n")
            .unwrap();
        let e = ClusterAuth::from_secret_file(&path).unwrap_err();
        assert!(e.to_string().contains("is not a cluster secret"), "{e}");
    }

    #[test]
    fn without_authentication_only_loopback() {
        let none = ClusterAuth::none();
        none.check_listen("127.0.0.1", "the scheduler").unwrap();
        none.check_listen("localhost", "the scheduler").unwrap();
        none.check_listen("::1", "the scheduler").unwrap();
        for host in ["0.0.0.0", "::", "10.1.2.3", "192.168.0.7"] {
            let e = none.check_listen(host, "the scheduler").unwrap_err();
            assert_eq!(e.code(), ClusterError::INSECURE, "{host}");
            assert!(e.to_string().contains("--secret-file"), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        ClusterAuth::write_secret_file(&path).unwrap();
        let secured = ClusterAuth::from_secret_file(&path).unwrap();
        secured.check_listen("0.0.0.0", "the scheduler").unwrap();
    }

    #[test]
    fn options_are_a_secret_or_all_three_tls_files() {
        let p = Path::new("x");
        assert!(ClusterAuth::from_options(None, None, None, None).is_ok());
        assert!(ClusterAuth::from_options(None, Some(p), None, Some(p)).is_err());
        let e = ClusterAuth::from_options(Some(p), Some(p), Some(p), Some(p)).unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
    }
}
