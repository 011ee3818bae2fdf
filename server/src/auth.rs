//! Authentication: the users file (salted PBKDF2-HMAC-SHA256 password hashes, one user per
//! line), HTTP basic credentials as Flight clients send them on the handshake, and the bearer
//! tokens the handshake hands out.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::error::{Result, ServerError};
use crate::unauthenticated_err;

/// PBKDF2 rounds for new entries (OWASP's 2023 figure for HMAC-SHA256).
pub const DEFAULT_ROUNDS: u32 = accelsql_engine::DEFAULT_ROUNDS;

/// Base64 as clients send it: the standard alphabet, with or without `=` padding (Go's
/// `RawStdEncoding` sends none).
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The users a server accepts: `NAME:pbkdf2-sha256:ROUNDS:SALT:HASH` per line (salt and hash in
/// base64); `#` starts a comment line. Made and changed by `accelsql serve add-user`.
#[derive(Debug, Clone, Default)]
pub struct Users {
    /// Each user's hash, `pbkdf2-sha256:ROUNDS:SALT:HASH` (the engine's catalog keeps the same
    /// form: `accelsql users import` moves them over unchanged).
    entries: HashMap<String, String>,
}

impl Users {
    /// Reads a users file. A malformed line is an error naming the file and line; so is a file
    /// that others than its owner may read or write (it holds password hashes).
    pub fn load(path: &Path) -> Result<Self> {
        check_owner_only(path)?;
        let text = std::fs::read_to_string(path).map_err(|e| ServerError::Config {
            message: format!("cannot read the users file {}: {e}", path.display()),
        })?;
        Self::parse(&text).map_err(|(line, message)| ServerError::Config {
            message: format!("users file {}, line {line}: {message}", path.display()),
        })
    }

    /// Parses the text of a users file; an error gives the line number and what is wrong.
    fn parse(text: &str) -> std::result::Result<Self, (usize, String)> {
        let mut entries = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, entry) = parse_line(line).map_err(|m| (i + 1, m))?;
            // Keyed by the name's one form (`ann` and `ANN` are one user; a later line wins).
            entries.insert(accelsql_engine::canonical_account(&name), entry);
        }
        Ok(Self { entries })
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `password` is `user`'s. Unknown users cost as much time as known ones.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        match self.entries.get(&accelsql_engine::canonical_account(user)) {
            Some(hash) => accelsql_engine::verify_password(hash, password),
            None => {
                // As long as a known user's check takes.
                if let Some(hash) = self.entries.values().next() {
                    let _ = accelsql_engine::verify_password(hash, password);
                }
                false
            }
        }
    }
}

/// Refuses a file that its group or others may read or write (Unix).
fn check_owner_only(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| ServerError::Config {
            message: format!("cannot read the users file {}: {e}", path.display()),
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(ServerError::Config {
                message: format!(
                    "the users file {} may be read or written by others (mode {mode:o}); it \
                     holds password hashes: make it owner-only (chmod 600 {})",
                    path.display(),
                    path.display()
                ),
            });
        }
    }
    Ok(())
}

fn parse_line(line: &str) -> std::result::Result<(String, String), String> {
    let Some((name, hash)) = line.split_once(':') else {
        return Err("expected NAME:pbkdf2-sha256:ROUNDS:SALT:HASH, found 1 field".into());
    };
    if name.is_empty() {
        return Err("the user name is empty".into());
    }
    accelsql_engine::check_hash(hash)?;
    Ok((name.to_string(), hash.to_string()))
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The users-file line for `user` with `password`: a fresh random salt, `rounds` rounds.
pub fn hash_entry(user: &str, password: &str, rounds: u32) -> Result<String> {
    if user.is_empty() || user.contains([':', '\n', '\r']) || user.trim() != user {
        return Err(ServerError::Config {
            message: format!(
                "user name {user:?} must be non-empty, without ':', line breaks or surrounding spaces"
            ),
        });
    }
    let hash = accelsql_engine::hash_password(password, rounds)
        .map_err(|message| ServerError::Config { message })?;
    Ok(format!("{user}:{hash}"))
}

/// Adds `user` to the users file at `path` (made, owner-only, if missing), replacing an entry of
/// the same name. The file is rewritten through a temporary file and a rename.
pub fn add_user(path: &Path, user: &str, password: &str, rounds: u32) -> Result<()> {
    let config_err = |message: String| ServerError::Config { message };
    let entry = hash_entry(user, password, rounds)?;
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(config_err(format!("cannot read {}: {e}", path.display()))),
    };
    Users::parse(&old).map_err(|(line, message)| {
        config_err(format!(
            "users file {}, line {line}: {message}",
            path.display()
        ))
    })?;
    let mut text: String = old
        .lines()
        .filter(|l| l.trim().split(':').next() != Some(user))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&entry);
    text.push('\n');
    let tmp = PathBuf::from(format!("{}.tmp{}", path.display(), std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        config_err(format!("cannot write {}: {e}", path.display()))
    })
}

/// `n` bytes from the operating system's random source.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| ServerError::Config {
        message: format!("no random numbers from the operating system: {e}"),
    })?;
    Ok(bytes)
}

/// A fresh bearer token: 32 random bytes as hex.
pub(crate) fn new_token() -> Result<String> {
    let bytes: [u8; 32] = random_bytes()?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The user and password of an `authorization: Basic …` header value.
pub fn parse_basic(header: &str) -> Result<(String, String)> {
    let Some(encoded) = header
        .strip_prefix("Basic ")
        .or_else(|| header.strip_prefix("basic "))
    else {
        return Err(unauthenticated_err!(
            "the handshake needs HTTP basic credentials (authorization: Basic …)"
        ));
    };
    let bytes = LENIENT_BASE64
        .decode(encoded.trim())
        .map_err(|e| unauthenticated_err!("malformed basic credentials: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| unauthenticated_err!("basic credentials are not UTF-8"))?;
    let Some((user, password)) = text.split_once(':') else {
        return Err(unauthenticated_err!(
            "basic credentials must be USER:PASSWORD"
        ));
    };
    Ok((user.to_string(), password.to_string()))
}

/// The token of an `authorization: Bearer …` header value.
pub(crate) fn parse_bearer(header: &str) -> Option<&str> {
    header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_verifies_its_password_only() {
        let line = hash_entry("alice", "s3cret", 1000).unwrap();
        let users = Users::parse(&format!("# users\n{line}\n")).unwrap();
        assert_eq!(users.len(), 1);
        assert!(users.verify("alice", "s3cret"));
        assert!(!users.verify("alice", "s3cret "));
        assert!(!users.verify("bob", "s3cret"));
        // A fresh salt every time.
        assert_ne!(line, hash_entry("alice", "s3cret", 1000).unwrap());
    }

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        let err = Users::parse("\n\nalice:md5:1:x:y\n").unwrap_err();
        assert_eq!(err.0, 3);
        assert!(err.1.contains("unknown hash scheme"), "{}", err.1);
        assert!(Users::parse("alice:pbkdf2-sha256:0:AAAA:AAAA").is_err());
        assert!(Users::parse("alice").is_err());
        assert!(Users::parse(":pbkdf2-sha256:1:AAAA:AAAA").is_err());
    }

    #[test]
    fn basic_credentials_decode_with_and_without_padding() {
        // "user:pw" is 7 bytes: base64 needs one '=' of padding.
        assert_eq!(
            parse_basic("Basic dXNlcjpwdw==").unwrap(),
            ("user".into(), "pw".into())
        );
        assert_eq!(
            parse_basic("Basic dXNlcjpwdw").unwrap(),
            ("user".into(), "pw".into())
        );
        // A password may contain ':'.
        assert_eq!(
            parse_basic("Basic dTpwOnE=").unwrap(),
            ("u".into(), "p:q".into())
        );
        assert_eq!(parse_basic("Bearer x").unwrap_err().code(), "28000");
        assert_eq!(parse_basic("Basic !!!").unwrap_err().code(), "28000");
        assert_eq!(parse_basic("Basic dXNlcg==").unwrap_err().code(), "28000");
    }

    #[test]
    fn add_user_replaces_an_entry_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        add_user(&path, "alice", "one", 1000).unwrap();
        add_user(&path, "bob", "two", 1000).unwrap();
        add_user(&path, "alice", "three", 1000).unwrap();
        let users = Users::load(&path).unwrap();
        assert_eq!(users.len(), 2);
        assert!(users.verify("alice", "three"));
        assert!(!users.verify("alice", "one"));
        assert!(users.verify("bob", "two"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            // A users file others may read is refused, saying how to fix it.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = Users::load(&path).unwrap_err();
            assert_eq!(e.code(), "F0000");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        assert!(add_user(&path, "bad:name", "x", 1000).is_err());
    }

    #[test]
    fn tokens_are_fresh_and_bearer_headers_parse() {
        let a = new_token().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, new_token().unwrap());
        assert_eq!(parse_bearer("Bearer abc"), Some("abc"));
        assert_eq!(parse_bearer("Basic abc"), None);
    }
}
