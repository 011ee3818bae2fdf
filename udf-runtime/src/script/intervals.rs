//! Intervals between the engine and a script: in the engine an `INTERVAL YEAR TO MONTH` or
//! `INTERVAL DAY TO SECOND` is an Arrow interval (months, days, nanoseconds); a script gets and
//! returns Exasol's text of it, as Exasol passes intervals to Python (`+05-03`, `+02
//! 10:20:30.500`: a sign, the leading field zero-padded to the type's precision, the seconds'
//! fraction to its fraction digits).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};

use super::SqlType;

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const NANOS_PER_DAY: i64 = 86_400 * NANOS_PER_SECOND;

/// Exasol's text of each interval of `array` (any Arrow interval type) as SQL type `t`. An
/// interval with days or time passed as `YEAR TO MONTH`, or with months passed as `DAY TO
/// SECOND`, is an error naming the value, as it has no such text.
pub(crate) fn to_text(array: &dyn Array, t: &SqlType) -> Result<ArrayRef, String> {
    let array = cast(array, &DataType::Interval(IntervalUnit::MonthDayNano))
        .map_err(|e| format!("{} is not an interval: {e}", array.data_type()))?;
    let values = array.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
    let text: Result<StringArray, String> = values
        .iter()
        .map(|v| v.map(|v| format_interval(v, t)).transpose())
        .collect();
    Ok(Arc::new(text?))
}

/// The interval of each of Exasol's texts in `array` (Utf8), as SQL type `t`.
pub(crate) fn from_text(array: &dyn Array, t: &SqlType) -> Result<ArrayRef, String> {
    let strings = array
        .as_string_opt::<i32>()
        .ok_or_else(|| format!("an interval's text is {}, not Utf8", array.data_type()))?;
    let values: Result<IntervalMonthDayNanoArray, String> = strings
        .iter()
        .map(|v| v.map(|s| parse_interval(s, t)).transpose())
        .collect();
    Ok(Arc::new(values?))
}

/// Exasol's text of `v` as `t`.
pub(crate) fn format_interval(v: IntervalMonthDayNano, t: &SqlType) -> Result<String, String> {
    match *t {
        SqlType::IntervalYearToMonth(precision) => {
            if v.days != 0 || v.nanoseconds != 0 {
                return Err(format!(
                    "the interval of {} months, {} days and {} ns has days or time, so it is no \
                     INTERVAL YEAR TO MONTH",
                    v.months, v.days, v.nanoseconds
                ));
            }
            let sign = if v.months < 0 { '-' } else { '+' };
            let months = i64::from(v.months).abs();
            let width = usize::from(precision);
            Ok(format!("{sign}{:0width$}-{:02}", months / 12, months % 12))
        }
        SqlType::IntervalDayToSecond {
            precision,
            fraction,
        } => {
            if v.months != 0 {
                return Err(format!(
                    "the interval of {} months, {} days and {} ns has months, so it is no \
                     INTERVAL DAY TO SECOND",
                    v.months, v.days, v.nanoseconds
                ));
            }
            let total = i128::from(v.days) * i128::from(NANOS_PER_DAY) + i128::from(v.nanoseconds);
            let sign = if total < 0 { '-' } else { '+' };
            let total = total.unsigned_abs();
            let day = NANOS_PER_DAY.unsigned_abs() as u128;
            let second = NANOS_PER_SECOND.unsigned_abs() as u128;
            let (days, rest) = (total / day, total % day);
            let (seconds, nanos) = (rest / second, rest % second);
            let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
            let width = usize::from(precision);
            let mut text = format!("{sign}{days:0width$} {h:02}:{m:02}:{s:02}");
            if fraction > 0 {
                let digits = format!("{nanos:09}");
                text.push('.');
                text.push_str(&digits[..usize::from(fraction.min(9))]);
            }
            Ok(text)
        }
        other => Err(format!("{other} is not an interval type")),
    }
}

/// The interval Exasol's text `s` writes as `t`: `[+-]Y-M` for `YEAR TO MONTH`, `[+-]D
/// HH:MM:SS[.fff]` for `DAY TO SECOND`.
pub(crate) fn parse_interval(s: &str, t: &SqlType) -> Result<IntervalMonthDayNano, String> {
    let bad = || {
        format!(
            "'{s}' is not an {t} value (Exasol writes them as {})",
            example(t)
        )
    };
    let text = s.trim();
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, text[1..].trim_start()),
        Some(b'+') => (false, text[1..].trim_start()),
        _ => (false, text),
    };
    let number = |n: &str| -> Result<i64, String> {
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 12 {
            return Err(bad());
        }
        n.parse::<i64>().map_err(|_| bad())
    };
    let signed = |v: i64| if negative { -v } else { v };
    match t {
        SqlType::IntervalYearToMonth(_) => {
            let (years, months) = body.split_once('-').ok_or_else(bad)?;
            let (years, months) = (number(years)?, number(months)?);
            if months >= 12 {
                return Err(bad());
            }
            let total = i32::try_from(signed(years * 12 + months)).map_err(|_| bad())?;
            Ok(IntervalMonthDayNano::new(total, 0, 0))
        }
        SqlType::IntervalDayToSecond { .. } => {
            let (days, time) = body.split_once(' ').ok_or_else(bad)?;
            let parts: Vec<&str> = time.trim().split(':').collect();
            let [h, m, sec] = parts.as_slice() else {
                return Err(bad());
            };
            let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
            let (h, m, whole) = (number(h)?, number(m)?, number(whole)?);
            if h >= 24 || m >= 60 || whole >= 60 || frac.len() > 9 {
                return Err(bad());
            }
            let nanos_frac = if frac.is_empty() {
                0
            } else {
                number(frac)? * 10_i64.pow(9 - frac.len() as u32)
            };
            let nanos = ((h * 60 + m) * 60 + whole) * NANOS_PER_SECOND + nanos_frac;
            let days = i32::try_from(number(days)?).map_err(|_| bad())?;
            Ok(IntervalMonthDayNano::new(
                0,
                if negative { -days } else { days },
                signed(nanos),
            ))
        }
        _ => Err(bad()),
    }
}

fn example(t: &SqlType) -> &'static str {
    match t {
        SqlType::IntervalYearToMonth(_) => "'+05-03'",
        _ => "'+02 10:20:30.500'",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YM: SqlType = SqlType::IntervalYearToMonth(2);
    const DS: SqlType = SqlType::IntervalDayToSecond {
        precision: 2,
        fraction: 3,
    };

    #[test]
    fn intervals_are_written_as_exasol_writes_them() {
        let ym = |m| format_interval(IntervalMonthDayNano::new(m, 0, 0), &YM).unwrap();
        assert_eq!(ym(63), "+05-03");
        assert_eq!(ym(-18), "-01-06");
        assert_eq!(ym(0), "+00-00");
        let ds = |d, n| format_interval(IntervalMonthDayNano::new(0, d, n), &DS).unwrap();
        let nanos = ((10 * 60 + 20) * 60 + 30) * NANOS_PER_SECOND + 500_000_000;
        assert_eq!(ds(2, nanos), "+02 10:20:30.500");
        assert_eq!(ds(-1, -12 * 3600 * NANOS_PER_SECOND), "-01 12:00:00.000");
        // Days and hours of opposite signs are one interval.
        assert_eq!(ds(1, -NANOS_PER_SECOND), "+00 23:59:59.000");
        let wide = SqlType::IntervalDayToSecond {
            precision: 4,
            fraction: 0,
        };
        assert_eq!(
            format_interval(IntervalMonthDayNano::new(0, 3, 0), &wide).unwrap(),
            "+0003 00:00:00"
        );
        assert!(format_interval(IntervalMonthDayNano::new(1, 0, 0), &DS).is_err());
        assert!(format_interval(IntervalMonthDayNano::new(0, 1, 0), &YM).is_err());
    }

    #[test]
    fn exasol_texts_read_back() {
        for (text, t) in [
            ("+05-03", YM),
            ("-01-06", YM),
            ("+02 10:20:30.500", DS),
            ("-01 12:00:00.000", DS),
        ] {
            let v = parse_interval(text, &t).unwrap();
            assert_eq!(format_interval(v, &t).unwrap(), text);
        }
        assert_eq!(
            parse_interval(" 5-3 ", &YM).unwrap(),
            IntervalMonthDayNano::new(63, 0, 0)
        );
        for bad in ["5", "5-12", "x-1", ""] {
            assert!(parse_interval(bad, &YM).is_err(), "{bad}");
        }
        for bad in ["2", "2 25:00:00", "2 10:20", "2 10:20:30.1234567891"] {
            assert!(parse_interval(bad, &DS).is_err(), "{bad}");
        }
        let e = parse_interval("soon", &DS).unwrap_err();
        assert!(e.contains("'+02 10:20:30.500'"), "{e}");
    }

    #[test]
    fn arrays_convert_both_ways() {
        let engine: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(vec![
            Some(IntervalMonthDayNano::new(0, 2, 5 * NANOS_PER_SECOND)),
            None,
        ]));
        let text = to_text(engine.as_ref(), &DS).unwrap();
        assert_eq!(text.as_string::<i32>().value(0), "+02 00:00:05.000");
        assert!(text.is_null(1));
        let back = from_text(text.as_ref(), &DS).unwrap();
        assert_eq!(back.as_ref(), engine.as_ref());
    }
}
