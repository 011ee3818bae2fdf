//! Password hashes as the catalog keeps them: salted PBKDF2-HMAC-SHA256,
//! `pbkdf2-sha256:ROUNDS:SALT:HASH` (salt and hash in base64) — the form of a server's users
//! file, so that `accelsql users import` moves its entries over unchanged.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// PBKDF2 rounds for new hashes (OWASP's 2023 figure for HMAC-SHA256).
pub const DEFAULT_ROUNDS: u32 = 600_000;
/// The scheme tag of a hash.
const SCHEME: &str = "pbkdf2-sha256";
const SALT_LEN: usize = 16;
const HASH_LEN: usize = 32;

/// Base64 with or without `=` padding.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A fresh salted hash of `password` with `rounds` rounds; `Err` when the operating system
/// gives no random numbers.
pub fn hash_password(password: &str, rounds: u32) -> Result<String, String> {
    let mut salt = [0u8; SALT_LEN];
    getrandom::fill(&mut salt)
        .map_err(|e| format!("no random numbers from the operating system: {e}"))?;
    let hash = derive(password, &salt, rounds.max(1));
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    Ok(format!(
        "{SCHEME}:{}:{}:{}",
        rounds.max(1),
        b64.encode(salt),
        b64.encode(hash)
    ))
}

/// Checks that `stored` is a well-formed hash (as [`hash_password`] writes it); the reason
/// otherwise.
pub fn check_hash(stored: &str) -> Result<(), String> {
    parse(stored).map(|_| ())
}

/// Whether `password` matches `stored` (compared in constant time); a malformed `stored` never
/// matches.
pub fn verify_password(stored: &str, password: &str) -> bool {
    let Ok((rounds, salt, hash)) = parse(stored) else {
        return false;
    };
    let derived = derive(password, &salt, rounds);
    derived.len() == hash.len()
        && derived
            .iter()
            .zip(&hash)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// (rounds, salt, hash) of a stored hash.
fn parse(stored: &str) -> Result<(u32, Vec<u8>, Vec<u8>), String> {
    let fields: Vec<&str> = stored.split(':').collect();
    let [scheme, rounds, salt, hash] = fields[..] else {
        return Err(format!(
            "expected {SCHEME}:ROUNDS:SALT:HASH, found {} fields",
            fields.len()
        ));
    };
    if scheme != SCHEME {
        return Err(format!(
            "unknown hash scheme {scheme:?} (expected {SCHEME})"
        ));
    }
    let rounds: u32 = rounds
        .parse()
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| format!("bad round count {rounds:?}"))?;
    let salt = LENIENT_BASE64
        .decode(salt)
        .map_err(|e| format!("bad salt: {e}"))?;
    let hash = LENIENT_BASE64
        .decode(hash)
        .map_err(|e| format!("bad hash: {e}"))?;
    if hash.len() != HASH_LEN {
        return Err(format!("the hash has {} bytes, not {HASH_LEN}", hash.len()));
    }
    Ok((rounds, salt, hash))
}

fn derive(password: &str, salt: &[u8], rounds: u32) -> [u8; HASH_LEN] {
    let mut out = [0u8; HASH_LEN];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password.as_bytes(), salt, rounds, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let stored = hash_password("s3cret", 1000).unwrap();
        assert!(stored.starts_with("pbkdf2-sha256:1000:"));
        check_hash(&stored).unwrap();
        assert!(verify_password(&stored, "s3cret"));
        assert!(!verify_password(&stored, "s3cret "));
        assert!(!verify_password("pbkdf2-sha256:1:x", "s3cret"));
        assert!(check_hash("md5:1:a:b").unwrap_err().contains("scheme"));
        // Two hashes of one password differ (fresh salts).
        assert_ne!(stored, hash_password("s3cret", 1000).unwrap());
    }
}
