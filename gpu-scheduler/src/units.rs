//! Parsing and printing of byte sizes (`4GiB`) and durations (`30s`), as users type them.

use std::time::Duration;

use crate::{Result, invalid_value_err};

/// Parses a byte size: `4GiB`, `512 MiB`, `1.5GB`, `1000000` (bytes). Binary (KiB, MiB, GiB, TiB)
/// and decimal (KB, MB, GB, TB) units are accepted, case-insensitively; `G`, `M`, `K` mean GiB, MiB, KiB.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (t[..split].trim(), t[split..].trim());
    let value: f64 = number.parse().map_err(|_| {
        invalid_value_err!(
            "size",
            "{text:?} is not a size; write e.g. 4GiB, 512MiB, 1.5GB or a byte count"
        )
    })?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(invalid_value_err!(
                "size",
                "unknown unit {other:?} in {text:?}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
            ));
        }
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(invalid_value_err!("size", "{text:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Prints a byte count with a binary unit and one decimal, e.g. `79.2 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Parses a duration: `250ms`, `30s`, `5min`, `2h`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (t[..split].trim(), t[split..].trim());
    let value: f64 = number.parse().map_err(|_| {
        invalid_value_err!(
            "duration",
            "{text:?} is not a duration; write e.g. 250ms, 30s, 5min or 2h"
        )
    })?;
    let seconds = match unit.to_ascii_lowercase().as_str() {
        "ms" => value / 1000.0,
        "" | "s" | "sec" | "secs" | "second" | "seconds" => value,
        "m" | "min" | "mins" | "minute" | "minutes" => value * 60.0,
        "h" | "hour" | "hours" => value * 3600.0,
        other => {
            return Err(invalid_value_err!(
                "duration",
                "unknown unit {other:?} in {text:?}; use ms, s, min or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| invalid_value_err!("duration", "{text:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_bytes("4 gib").unwrap(), 4 << 30);
        assert_eq!(parse_bytes("4G").unwrap(), 4 << 30);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1000").unwrap(), 1000);
        for bad in ["", "GiB", "4 parsecs", "-1GiB", "1e400"] {
            let e = parse_bytes(bad).unwrap_err();
            assert_eq!(e.code(), "22G01", "{bad}: {e}");
        }
    }

    #[test]
    fn printing_sizes() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(80 << 30), "80.0 GiB");
        assert_eq!(format_bytes(1536 << 20), "1.5 GiB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5min").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3 fortnights").is_err());
    }
}
