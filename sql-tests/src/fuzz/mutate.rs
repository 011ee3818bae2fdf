//! A small deterministic random source and the mutations the fuzzer applies to seed inputs.

/// xorshift64*: deterministic for a seed, good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (0 is replaced: xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Fragments that parsers of SQL, script bodies and settings treat specially.
const TOKENS: &[&str] = &[
    "'",
    "\"",
    "''",
    ";",
    "/",
    "\n/\n",
    "\n",
    "\r\n",
    "--",
    "/*",
    "*/",
    "%",
    "%env ",
    "%env A=b;",
    "%perInstanceRequiredAcceleratorDevices ",
    "%perNodeAndCallInstanceLimit ",
    "GpuNvidia",
    "|None",
    "None",
    "=",
    ",",
    "(",
    ")",
    "(...)",
    "EMITS",
    "RETURNS",
    "SCALAR",
    "SET",
    "SCRIPT",
    "CREATE",
    "OR REPLACE",
    "PYTHON3",
    "AS",
    "\\",
    "\"\"\"",
    "'''",
    " ",
    "\t",
    "0",
    "-1",
    "18446744073709551616",
    "9999999999999999999999",
    "1e308",
    "NaN",
    "ms",
    "min",
    "GiB",
    "é",
    "日本",
    "\u{0}",
    "\u{feff}",
    "$1",
    "?",
    "::",
    "iproc()",
    "GROUP BY",
    "SELECT",
    "FROM",
    "ALTER SESSION SET SCRIPT_LANGUAGES=",
    "builtin_python3",
    "GPU-",
    "MIG-",
    "all",
    "void",
];

/// `seed` changed by one to four random edits (insert a token, delete or duplicate a span,
/// replace a character, truncate), always valid UTF-8.
pub fn mutate(seed: &str, rng: &mut Rng) -> String {
    let mut chars: Vec<char> = seed.chars().collect();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(chars.len() + 1);
        match rng.below(6) {
            0 | 1 => {
                let token: Vec<char> = rng.pick(TOKENS).chars().collect();
                chars.splice(at..at, token);
            }
            2 if !chars.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(chars.len());
                let at = at.min(end);
                chars.drain(at..end);
            }
            3 if !chars.is_empty() => {
                let start = rng.below(chars.len());
                let end = (start + 1 + rng.below(16)).min(chars.len());
                let span: Vec<char> = chars[start..end].to_vec();
                chars.splice(at..at, span);
            }
            4 if at < chars.len() => {
                chars[at] = char::from_u32(rng.below(0x3000) as u32).unwrap_or('?');
            }
            _ => chars.truncate(at),
        }
    }
    chars.into_iter().collect()
}

/// `seed` bytes changed as [`mutate`] changes text, without keeping UTF-8 (for binary decoders).
pub fn mutate_bytes(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(6) {
            0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
            1 if at < bytes.len() => bytes[at] = *rng.pick(&[0, 0xff, 0x7f, 0x80, 1]),
            2 => {
                let n = 1 + rng.below(8);
                let junk: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                bytes.splice(at..at, junk);
            }
            3 if at + 8 <= bytes.len() => {
                // A length field made huge or negative.
                let value = *rng.pick(&[u64::MAX, u64::MAX / 2, 1 << 40, 0x7fff_ffff, 0]);
                bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
            4 if !bytes.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            _ => bytes.truncate(at),
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_for_a_seed_and_change_the_input() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let seed = "SELECT 1 FROM t";
        let changed: Vec<String> = (0..50).map(|_| mutate(seed, &mut a)).collect();
        let again: Vec<String> = (0..50).map(|_| mutate(seed, &mut b)).collect();
        assert_eq!(changed, again);
        assert!(changed.iter().filter(|m| m.as_str() != seed).count() > 40);
        assert!(mutate_bytes(b"\x01\x02\x03", &mut a).len() < 64);
    }
}
