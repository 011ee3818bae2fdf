//! SQL types of script signatures: Exasol's type names and aliases, their display, and the Arrow
//! type each one travels as.

use std::fmt;

use arrow::datatypes::{DataType, IntervalUnit, TimeUnit};

use crate::{Result, RuntimeError};

/// A column type of a script's parameters or outputs, as Exasol names it.
///
/// ```
/// use accelsql_udf_runtime::script::SqlType;
/// use arrow::datatypes::DataType;
///
/// let t = SqlType::parse("decimal(18, 2)").unwrap();
/// assert_eq!(t, SqlType::Decimal { precision: 18, scale: 2 });
/// assert_eq!(t.to_string(), "DECIMAL(18,2)");
/// assert_eq!(t.arrow_type(), DataType::Decimal128(18, 2));
/// assert_eq!(SqlType::parse("INT").unwrap().arrow_type(), DataType::Int64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlType {
    /// `BOOLEAN` (`BOOL`).
    Boolean,
    /// `SMALLINT`: Exasol's `DECIMAL(9,0)`; travels as Int64.
    SmallInt,
    /// `INTEGER` (`INT`): Exasol's `DECIMAL(18,0)`; travels as Int64.
    Integer,
    /// `BIGINT`: a 64-bit integer here (Exasol's is `DECIMAL(36,0)`); travels as Int64.
    BigInt,
    /// `DECIMAL(p,s)` (`DEC`, `NUMERIC`, `NUMBER(p,s)`), `1 <= p <= 36`, `0 <= s <= p`.
    Decimal {
        /// Total digits.
        precision: u8,
        /// Digits after the point.
        scale: i8,
    },
    /// `DOUBLE` (`DOUBLE PRECISION`, `FLOAT`, `REAL`, `NUMBER` without precision).
    Double,
    /// `VARCHAR(n)` (`CHARACTER VARYING`, `VARCHAR2`, `NVARCHAR`; `STRING`, `CLOB` and `LONG
    /// VARCHAR` are `VARCHAR(2000000)`); `n` counts characters.
    Varchar(u32),
    /// `CHAR(n)` (`CHARACTER`, `NCHAR`): blank-padded to `n` characters.
    Char(u32),
    /// `DATE`.
    Date,
    /// `TIMESTAMP` (microseconds, no time zone).
    Timestamp,
    /// `TIMESTAMP WITH LOCAL TIME ZONE`: an instant; a script gets it as a `TIMESTAMP` in UTC
    /// (microseconds).
    TimestampLocalTz,
    /// `GEOMETRY[(srid)]`: text in WKT (`POINT (1 2)`), as Exasol passes it to scripts.
    Geometry(Option<u32>),
    /// `HASHTYPE[(n BYTE)]` (`(n BIT)`: `n / 8` bytes; 16 bytes when not given): hex text of
    /// `2n` characters.
    Hashtype(u32),
    /// `INTERVAL YEAR[(p)] TO MONTH` (p: the years' digits, 1 to 9, 2 when not given): an
    /// interval in the engine; a script gets Exasol's text of it (`+05-03`).
    IntervalYearToMonth(u8),
    /// `INTERVAL DAY[(p)] TO SECOND[(f)]` (p: the days' digits, 1 to 9, 2 when not given; f:
    /// the seconds' fraction digits, 0 to 9, 3 when not given): an interval in the engine; a
    /// script gets Exasol's text of it (`+02 10:20:30.500`) and may return a
    /// `datetime.timedelta`.
    IntervalDayToSecond {
        /// Digits of the days.
        precision: u8,
        /// Digits of the seconds' fraction.
        fraction: u8,
    },
}

impl SqlType {
    /// Longest `VARCHAR`, in characters (Exasol's limit).
    pub const MAX_VARCHAR: u32 = 2_000_000;
    /// Longest `CHAR`, in characters (Exasol's limit).
    pub const MAX_CHAR: u32 = 2_000;
    /// Most digits of a `DECIMAL` (Exasol's limit).
    pub const MAX_DECIMAL_PRECISION: u8 = 36;

    /// Parses a type as a script signature writes it: case-insensitive, with Exasol's aliases;
    /// a `CHARACTER SET UTF8|ASCII` (or `UTF8`, `ASCII`) suffix is accepted and ignored.
    pub fn parse(text: &str) -> Result<Self> {
        let err = |message: String| RuntimeError::InvalidSqlType {
            text: text.to_string(),
            message,
        };
        let upper = text.trim().to_ascii_uppercase();
        if let Some(rest) = upper.strip_prefix("HASHTYPE") {
            return Self::parse_hashtype(rest).map_err(err);
        }
        if let Some(rest) = upper.strip_prefix("INTERVAL")
            && rest.starts_with(|c: char| c.is_whitespace())
        {
            return Self::parse_interval(rest).map_err(err);
        }
        let (head, args, tail) = match upper.find('(') {
            Some(open) => {
                let close = upper[open..]
                    .find(')')
                    .map(|c| open + c)
                    .ok_or_else(|| err("missing ')'".to_string()))?;
                let mut args = Vec::new();
                for part in upper[open + 1..close].split(',') {
                    let part = part.trim();
                    let n = part.parse::<u32>().map_err(|_| {
                        err(format!("'{part}' is not a length, precision or scale"))
                    })?;
                    args.push(n);
                }
                (
                    upper[..open].to_string(),
                    Some(args),
                    upper[close + 1..].to_string(),
                )
            }
            None => (upper.clone(), None, String::new()),
        };
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut head = words(&head);
        let mut tail = words(&tail);
        for suffix in ["CHARACTER SET UTF8", "CHARACTER SET ASCII", "UTF8", "ASCII"] {
            if args.is_some() {
                if tail == suffix {
                    tail.clear();
                }
            } else if let Some(rest) = head.strip_suffix(suffix)
                && rest.ends_with(' ')
            {
                head = rest.trim_end().to_string();
            }
        }
        if head == "TIMESTAMP" && tail == "WITH LOCAL TIME ZONE" {
            tail.clear();
            head = "TIMESTAMP WITH LOCAL TIME ZONE".to_string();
        }
        if !tail.is_empty() {
            return Err(err(format!("unexpected '{tail}' after the type")));
        }
        let no_args = |t: SqlType| match &args {
            None => Ok(t),
            Some(_) => Err(err(format!("{head} takes no length or precision"))),
        };
        let one_arg = |name: &str| -> Result<Option<u32>> {
            match args.as_deref() {
                None => Ok(None),
                Some([n]) => Ok(Some(*n)),
                Some(_) => Err(err(format!("{name} takes one length, e.g. {name}(100)"))),
            }
        };
        let decimal = |p: u32, s: u32| -> Result<SqlType> {
            if p == 0 || p > u32::from(Self::MAX_DECIMAL_PRECISION) {
                return Err(err(format!(
                    "the precision of a DECIMAL must be 1 to {}, not {p}",
                    Self::MAX_DECIMAL_PRECISION
                )));
            }
            if s > p {
                return Err(err(format!(
                    "the scale of DECIMAL({p},{s}) is larger than its precision"
                )));
            }
            Ok(SqlType::Decimal {
                precision: p as u8,
                scale: s as i8,
            })
        };
        let varchar = |n: u32| -> Result<SqlType> {
            if n == 0 || n > Self::MAX_VARCHAR {
                return Err(err(format!(
                    "the length of a VARCHAR must be 1 to {}, not {n}",
                    Self::MAX_VARCHAR
                )));
            }
            Ok(SqlType::Varchar(n))
        };
        match head.as_str() {
            "BOOLEAN" | "BOOL" => no_args(SqlType::Boolean),
            "TINYINT" => no_args(SqlType::Decimal {
                precision: 3,
                scale: 0,
            }),
            "SMALLINT" | "SHORTINT" => no_args(SqlType::SmallInt),
            "INT" | "INTEGER" => no_args(SqlType::Integer),
            "BIGINT" => no_args(SqlType::BigInt),
            "DECIMAL" | "DEC" | "NUMERIC" | "NUMBER" => match args.as_deref() {
                None if head == "NUMBER" => Ok(SqlType::Double),
                None => decimal(18, 0),
                Some([p]) => decimal(*p, 0),
                Some([p, s]) => decimal(*p, *s),
                Some(_) => Err(err(format!(
                    "{head} takes a precision and a scale, e.g. {head}(18,2)"
                ))),
            },
            "DOUBLE" | "DOUBLE PRECISION" | "REAL" => no_args(SqlType::Double),
            // FLOAT(p): the precision is accepted and ignored, as Exasol does.
            "FLOAT" => Ok(SqlType::Double),
            "VARCHAR" | "CHARACTER VARYING" | "CHAR VARYING" | "VARCHAR2" | "NVARCHAR"
            | "NVARCHAR2" => match one_arg(&head)? {
                Some(n) => varchar(n),
                None => Err(err(format!(
                    "{head} needs a length, e.g. VARCHAR(100) (or use STRING for VARCHAR({}))",
                    Self::MAX_VARCHAR
                ))),
            },
            "STRING" | "CLOB" | "NCLOB" | "LONG VARCHAR" => {
                no_args(SqlType::Varchar(Self::MAX_VARCHAR))
            }
            "CHAR" | "CHARACTER" | "NCHAR" => {
                let n = one_arg(&head)?.unwrap_or(1);
                if n == 0 || n > Self::MAX_CHAR {
                    return Err(err(format!(
                        "the length of a CHAR must be 1 to {}, not {n}",
                        Self::MAX_CHAR
                    )));
                }
                Ok(SqlType::Char(n))
            }
            "DATE" => no_args(SqlType::Date),
            // TIMESTAMP(p): fractional-second precision, accepted and ignored (we keep microseconds).
            "TIMESTAMP" | "DATETIME" => match one_arg("TIMESTAMP")? {
                Some(p) if p > 9 => Err(err(format!(
                    "the precision of a TIMESTAMP must be 0 to 9, not {p}"
                ))),
                _ => Ok(SqlType::Timestamp),
            },
            "TIMESTAMP WITH LOCAL TIME ZONE" => match one_arg("TIMESTAMP")? {
                Some(p) if p > 9 => Err(err(format!(
                    "the precision of a TIMESTAMP must be 0 to 9, not {p}"
                ))),
                _ => Ok(SqlType::TimestampLocalTz),
            },
            "GEOMETRY" => Ok(SqlType::Geometry(one_arg("GEOMETRY")?)),
            "" => Err(err("no type given".to_string())),
            other => Err(err(format!(
                "unknown type {other}; script signatures accept BOOLEAN, SMALLINT, INTEGER, BIGINT, \
                 DECIMAL(p,s), DOUBLE, VARCHAR(n), CHAR(n), DATE, TIMESTAMP [WITH LOCAL TIME ZONE], \
                 GEOMETRY, HASHTYPE, INTERVAL YEAR TO MONTH, INTERVAL DAY TO SECOND and their \
                 aliases"
            ))),
        }
    }

    /// An interval type after `INTERVAL`: `YEAR[(p)] TO MONTH` or `DAY[(p)] TO SECOND[(f)]`.
    fn parse_interval(rest: &str) -> std::result::Result<Self, String> {
        let compact: String = rest.split_whitespace().collect::<Vec<_>>().join(" ");
        let (leading, last) = compact.split_once(" TO ").ok_or_else(|| {
            "an INTERVAL type is INTERVAL YEAR TO MONTH or INTERVAL DAY TO SECOND".to_string()
        })?;
        // `WORD` or `WORD(n)`, spaces allowed around the parentheses.
        let field = |part: &str| -> std::result::Result<(String, Option<u8>), String> {
            let part: String = part.chars().filter(|c| !c.is_whitespace()).collect();
            match part.split_once('(') {
                None => Ok((part, None)),
                Some((word, n)) => {
                    let n = n
                        .strip_suffix(')')
                        .and_then(|n| n.parse::<u8>().ok())
                        .ok_or_else(|| format!("'{part}' is not an interval field"))?;
                    Ok((word.to_string(), Some(n)))
                }
            }
        };
        let ((lead, precision), (end, fraction)) = (field(leading)?, field(last)?);
        let precision = precision.unwrap_or(2);
        if !(1..=9).contains(&precision) {
            return Err(format!(
                "an interval's leading precision must be 1 to 9, not {precision}"
            ));
        }
        match (lead.as_str(), end.as_str(), fraction) {
            ("YEAR", "MONTH", None) => Ok(SqlType::IntervalYearToMonth(precision)),
            ("DAY", "SECOND", fraction) => {
                let fraction = fraction.unwrap_or(3);
                if fraction > 9 {
                    return Err(format!(
                        "an interval's fraction precision must be 0 to 9, not {fraction}"
                    ));
                }
                Ok(SqlType::IntervalDayToSecond {
                    precision,
                    fraction,
                })
            }
            _ => Err(format!(
                "INTERVAL {compact} is not a script type; scripts take INTERVAL YEAR TO MONTH \
                 and INTERVAL DAY TO SECOND"
            )),
        }
    }

    /// `HASHTYPE`'s parenthesized size after the name: `(n BYTE)`, `(n BIT)` (a multiple of 8),
    /// or nothing (16 bytes).
    fn parse_hashtype(rest: &str) -> std::result::Result<Self, String> {
        let rest = rest.trim();
        if rest.is_empty() {
            return Ok(SqlType::Hashtype(16));
        }
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| "HASHTYPE takes a size, e.g. HASHTYPE(16 BYTE)".to_string())?;
        let words: Vec<&str> = inner.split_whitespace().collect();
        let (n, unit) = match words.as_slice() {
            [n] => (*n, "BYTE"),
            [n, unit] => (*n, *unit),
            _ => return Err("HASHTYPE takes a size, e.g. HASHTYPE(16 BYTE)".to_string()),
        };
        let n: u32 = n
            .parse()
            .map_err(|_| format!("'{n}' is not a HASHTYPE size"))?;
        let bytes = match unit {
            "BYTE" => n,
            "BIT" if n % 8 == 0 => n / 8,
            "BIT" => return Err(format!("a HASHTYPE of {n} bits is not whole bytes")),
            other => return Err(format!("HASHTYPE's size is in BYTE or BIT, not {other}")),
        };
        if bytes == 0 || bytes > 1024 {
            return Err(format!("a HASHTYPE must be 1 to 1024 bytes, not {bytes}"));
        }
        Ok(SqlType::Hashtype(bytes))
    }

    /// The Arrow type values of this SQL type travel as: BOOLEAN → Boolean; SMALLINT, INTEGER,
    /// BIGINT and DECIMAL(p,0) with p ≤ 18 → Int64; other DECIMAL → Decimal128(p,s); DOUBLE →
    /// Float64; VARCHAR, CHAR, GEOMETRY, HASHTYPE → Utf8; DATE → Date32; TIMESTAMP [WITH LOCAL
    /// TIME ZONE] → Timestamp(Microsecond, None).
    pub fn arrow_type(&self) -> DataType {
        match *self {
            SqlType::Boolean => DataType::Boolean,
            SqlType::SmallInt | SqlType::Integer | SqlType::BigInt => DataType::Int64,
            SqlType::Decimal { precision, scale } if scale == 0 && precision <= 18 => {
                DataType::Int64
            }
            SqlType::Decimal { precision, scale } => DataType::Decimal128(precision, scale),
            SqlType::Double => DataType::Float64,
            SqlType::Varchar(_)
            | SqlType::Char(_)
            | SqlType::Geometry(_)
            | SqlType::Hashtype(_) => DataType::Utf8,
            SqlType::Date => DataType::Date32,
            SqlType::Timestamp | SqlType::TimestampLocalTz => {
                DataType::Timestamp(TimeUnit::Microsecond, None)
            }
            SqlType::IntervalYearToMonth(_) | SqlType::IntervalDayToSecond { .. } => {
                DataType::Interval(IntervalUnit::MonthDayNano)
            }
        }
    }

    /// The Arrow type values of this SQL type travel to and from a script's worker as: the
    /// [`arrow_type`](Self::arrow_type), except for intervals, which travel as Exasol's text
    /// of them (Utf8: `+05-03`, `+02 10:20:30.500`).
    pub fn wire_type(&self) -> DataType {
        if self.is_interval() {
            DataType::Utf8
        } else {
            self.arrow_type()
        }
    }

    /// The type as Exasol names it in `exa.meta` (`sql_type`) and its column views: the integer
    /// types as the `DECIMAL(p,0)` they are (`INTEGER` is `DECIMAL(18,0)`), strings with their
    /// character set (`VARCHAR(10) UTF8`), the others as [`Display`](fmt::Display) writes them.
    pub fn exasol_name(&self) -> String {
        match self {
            SqlType::SmallInt | SqlType::Integer | SqlType::BigInt => {
                format!("DECIMAL({},0)", self.precision().unwrap_or(18))
            }
            SqlType::Varchar(_) | SqlType::Char(_) => format!("{self} UTF8"),
            other => other.to_string(),
        }
    }

    /// Whether this is an `INTERVAL` type.
    pub fn is_interval(&self) -> bool {
        matches!(
            self,
            SqlType::IntervalYearToMonth(_) | SqlType::IntervalDayToSecond { .. }
        )
    }

    /// The SQL type a value of Arrow type `data_type` gets when it is passed to a variadic
    /// (`...`) script: signed and small unsigned integers → SMALLINT / INTEGER / BIGINT by width,
    /// UInt64 → BIGINT (values above `i64::MAX` fail when cast), floats → DOUBLE, Decimal128 →
    /// DECIMAL, strings → VARCHAR(2000000), dates → DATE, timestamps → TIMESTAMP, Null → VARCHAR(2000000).
    pub fn from_arrow(data_type: &DataType) -> Result<Self> {
        Ok(match data_type {
            DataType::Boolean => SqlType::Boolean,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => {
                SqlType::SmallInt
            }
            DataType::Int32 | DataType::UInt32 => SqlType::Integer,
            DataType::Int64 | DataType::UInt64 => SqlType::BigInt,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => SqlType::Double,
            DataType::Decimal128(p, s) | DataType::Decimal256(p, s)
                if *p <= Self::MAX_DECIMAL_PRECISION && *s >= 0 && (*s as u8) <= *p =>
            {
                SqlType::Decimal {
                    precision: *p,
                    scale: *s,
                }
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                SqlType::Varchar(Self::MAX_VARCHAR)
            }
            DataType::Date32 | DataType::Date64 => SqlType::Date,
            DataType::Timestamp(_, _) => SqlType::Timestamp,
            DataType::Interval(IntervalUnit::YearMonth) => SqlType::IntervalYearToMonth(9),
            DataType::Interval(_) => SqlType::IntervalDayToSecond {
                precision: 9,
                fraction: 9,
            },
            other => {
                return Err(RuntimeError::InvalidSqlType {
                    text: other.to_string(),
                    message: "this Arrow type has no SQL type a script can take; cast the \
                              argument to BOOLEAN, a number, a string, DATE, TIMESTAMP or an \
                              INTERVAL"
                        .to_string(),
                });
            }
        })
    }

    /// Total digits for numeric types (`exa.meta` `precision`): DECIMAL's p, SMALLINT 9,
    /// INTEGER 18, BIGINT 19; an interval's leading digits; `None` for the others.
    pub fn precision(&self) -> Option<u32> {
        match *self {
            SqlType::IntervalYearToMonth(p) | SqlType::IntervalDayToSecond { precision: p, .. } => {
                Some(u32::from(p))
            }
            SqlType::SmallInt => Some(9),
            SqlType::Integer => Some(18),
            SqlType::BigInt => Some(19),
            SqlType::Decimal { precision, .. } => Some(u32::from(precision)),
            _ => None,
        }
    }

    /// Digits after the point (`exa.meta` `scale`): DECIMAL's s, 0 for the integer types; the
    /// seconds' fraction digits of an `INTERVAL DAY TO SECOND`.
    pub fn scale(&self) -> Option<i32> {
        match *self {
            SqlType::IntervalDayToSecond { fraction, .. } => Some(i32::from(fraction)),
            SqlType::SmallInt | SqlType::Integer | SqlType::BigInt => Some(0),
            SqlType::Decimal { scale, .. } => Some(i32::from(scale)),
            _ => None,
        }
    }

    /// Length in characters of VARCHAR and CHAR, and of a HASHTYPE's hex text (`exa.meta`
    /// `length`).
    pub fn length(&self) -> Option<u32> {
        match *self {
            SqlType::Varchar(n) | SqlType::Char(n) => Some(n),
            SqlType::Hashtype(bytes) => Some(bytes * 2),
            _ => None,
        }
    }
}

impl fmt::Display for SqlType {
    /// The canonical Exasol spelling, which [`SqlType::parse`] reads back: `BOOLEAN`,
    /// `SMALLINT`, `INTEGER`, `BIGINT`, `DECIMAL(p,s)`, `DOUBLE`, `VARCHAR(n)`, `CHAR(n)`,
    /// `DATE`, `TIMESTAMP`, `TIMESTAMP WITH LOCAL TIME ZONE`, `GEOMETRY[(srid)]`, `HASHTYPE(n
    /// BYTE)`, `INTERVAL YEAR(p) TO MONTH`, `INTERVAL DAY(p) TO SECOND(f)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SqlType::Boolean => f.write_str("BOOLEAN"),
            SqlType::SmallInt => f.write_str("SMALLINT"),
            SqlType::Integer => f.write_str("INTEGER"),
            SqlType::BigInt => f.write_str("BIGINT"),
            SqlType::Decimal { precision, scale } => write!(f, "DECIMAL({precision},{scale})"),
            SqlType::Double => f.write_str("DOUBLE"),
            SqlType::Varchar(n) => write!(f, "VARCHAR({n})"),
            SqlType::Char(n) => write!(f, "CHAR({n})"),
            SqlType::Date => f.write_str("DATE"),
            SqlType::Timestamp => f.write_str("TIMESTAMP"),
            SqlType::TimestampLocalTz => f.write_str("TIMESTAMP WITH LOCAL TIME ZONE"),
            SqlType::Geometry(None) => f.write_str("GEOMETRY"),
            SqlType::Geometry(Some(srid)) => write!(f, "GEOMETRY({srid})"),
            SqlType::Hashtype(bytes) => write!(f, "HASHTYPE({bytes} BYTE)"),
            SqlType::IntervalYearToMonth(p) => write!(f, "INTERVAL YEAR({p}) TO MONTH"),
            SqlType::IntervalDayToSecond {
                precision,
                fraction,
            } => write!(f, "INTERVAL DAY({precision}) TO SECOND({fraction})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_types_parse_and_travel_as_text() {
        let ym = SqlType::parse("interval year to month").unwrap();
        assert_eq!(ym, SqlType::IntervalYearToMonth(2));
        assert_eq!(ym.to_string(), "INTERVAL YEAR(2) TO MONTH");
        assert_eq!(
            ym.arrow_type(),
            DataType::Interval(IntervalUnit::MonthDayNano)
        );
        assert_eq!(ym.wire_type(), DataType::Utf8);
        let ds = SqlType::parse("INTERVAL DAY (4) TO SECOND (6)").unwrap();
        assert_eq!(
            ds,
            SqlType::IntervalDayToSecond {
                precision: 4,
                fraction: 6
            }
        );
        assert_eq!(SqlType::parse(&ds.to_string()).unwrap(), ds);
        assert_eq!((ds.precision(), ds.scale()), (Some(4), Some(6)));
        assert!(SqlType::parse("INTERVAL DAY TO HOUR").is_err());
        assert!(SqlType::parse("INTERVAL YEAR(10) TO MONTH").is_err());
        assert!(SqlType::parse("INTERVAL").is_err());
        assert_eq!(SqlType::Integer.wire_type(), DataType::Int64);
    }

    #[test]
    fn parses_names_and_aliases() {
        let cases = [
            ("BOOLEAN", SqlType::Boolean),
            ("bool", SqlType::Boolean),
            ("SMALLINT", SqlType::SmallInt),
            ("int", SqlType::Integer),
            ("INTEGER", SqlType::Integer),
            ("BIGINT", SqlType::BigInt),
            (
                "DECIMAL",
                SqlType::Decimal {
                    precision: 18,
                    scale: 0,
                },
            ),
            (
                "decimal(10)",
                SqlType::Decimal {
                    precision: 10,
                    scale: 0,
                },
            ),
            (
                "DECIMAL( 18 , 2 )",
                SqlType::Decimal {
                    precision: 18,
                    scale: 2,
                },
            ),
            (
                "NUMERIC(36,10)",
                SqlType::Decimal {
                    precision: 36,
                    scale: 10,
                },
            ),
            (
                "NUMBER(5,1)",
                SqlType::Decimal {
                    precision: 5,
                    scale: 1,
                },
            ),
            ("NUMBER", SqlType::Double),
            (
                "TINYINT",
                SqlType::Decimal {
                    precision: 3,
                    scale: 0,
                },
            ),
            ("DOUBLE", SqlType::Double),
            ("double   precision", SqlType::Double),
            ("FLOAT", SqlType::Double),
            ("REAL", SqlType::Double),
            ("VARCHAR(100)", SqlType::Varchar(100)),
            ("varchar(100) character set utf8", SqlType::Varchar(100)),
            ("VARCHAR(20) UTF8", SqlType::Varchar(20)),
            ("CHARACTER VARYING(7)", SqlType::Varchar(7)),
            ("STRING", SqlType::Varchar(2_000_000)),
            ("CHAR", SqlType::Char(1)),
            ("CHAR(10) ASCII", SqlType::Char(10)),
            ("DATE", SqlType::Date),
            ("TIMESTAMP", SqlType::Timestamp),
            ("TIMESTAMP(3)", SqlType::Timestamp),
        ];
        for (text, want) in cases {
            assert_eq!(SqlType::parse(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn rejects_bad_types_with_code_42u15() {
        for text in [
            "",
            "VARCHAR",
            "VARCHAR(0)",
            "DECIMAL(37,0)",
            "DECIMAL(5,6)",
            "DECIMAL(x)",
            "BOOLEAN(3)",
            "GEOMETRY(1,2)",
            "HASHTYPE(0 BYTE)",
            "HASHTYPE(12 BIT)",
            "HASHTYPE(16 WORDS)",
            "DOUBLE junk",
            "VARCHAR(10",
            "TIMESTAMP WITH TIME ZONE",
        ] {
            let e = SqlType::parse(text).unwrap_err();
            assert_eq!(e.code(), "42U15", "{text}: {e}");
        }
        let e = SqlType::parse("VARCHAR").unwrap_err().to_string();
        assert!(e.contains("needs a length"), "{e}");
    }

    #[test]
    fn display_round_trips() {
        for t in [
            SqlType::Boolean,
            SqlType::SmallInt,
            SqlType::Integer,
            SqlType::BigInt,
            SqlType::Decimal {
                precision: 18,
                scale: 2,
            },
            SqlType::Double,
            SqlType::Varchar(5),
            SqlType::Char(3),
            SqlType::Date,
            SqlType::Timestamp,
            SqlType::TimestampLocalTz,
            SqlType::Geometry(None),
            SqlType::Geometry(Some(4326)),
            SqlType::Hashtype(32),
        ] {
            assert_eq!(SqlType::parse(&t.to_string()).unwrap(), t);
        }
    }

    #[test]
    fn exasol_types_beyond_the_arrow_ones() {
        assert_eq!(
            SqlType::parse("timestamp(3) with local time zone").unwrap(),
            SqlType::TimestampLocalTz
        );
        assert_eq!(SqlType::parse("GEOMETRY").unwrap(), SqlType::Geometry(None));
        assert_eq!(SqlType::parse("HASHTYPE").unwrap(), SqlType::Hashtype(16));
        assert_eq!(
            SqlType::parse("hashtype(256 bit)").unwrap(),
            SqlType::Hashtype(32)
        );
        assert_eq!(SqlType::Hashtype(16).length(), Some(32));
        assert_eq!(
            SqlType::TimestampLocalTz.arrow_type(),
            DataType::Timestamp(TimeUnit::Microsecond, None)
        );
        assert_eq!(SqlType::Geometry(Some(4326)).arrow_type(), DataType::Utf8);
    }

    #[test]
    fn arrow_types() {
        use DataType::*;
        let cases = [
            ("BOOLEAN", Boolean),
            ("SMALLINT", Int64),
            ("INTEGER", Int64),
            ("BIGINT", Int64),
            ("DECIMAL(18,0)", Int64),
            ("DECIMAL(19,0)", Decimal128(19, 0)),
            ("DECIMAL(18,2)", Decimal128(18, 2)),
            ("DOUBLE", Float64),
            ("VARCHAR(3)", Utf8),
            ("CHAR(3)", Utf8),
            ("DATE", Date32),
            ("TIMESTAMP", Timestamp(TimeUnit::Microsecond, None)),
        ];
        for (text, want) in cases {
            assert_eq!(SqlType::parse(text).unwrap().arrow_type(), want, "{text}");
        }
        assert_eq!(SqlType::from_arrow(&Int32).unwrap(), SqlType::Integer);
        assert_eq!(SqlType::from_arrow(&Float32).unwrap(), SqlType::Double);
        assert_eq!(
            SqlType::from_arrow(&LargeUtf8).unwrap(),
            SqlType::Varchar(2_000_000)
        );
        assert_eq!(
            SqlType::from_arrow(&Decimal128(20, 3)).unwrap(),
            SqlType::Decimal {
                precision: 20,
                scale: 3
            }
        );
        assert_eq!(SqlType::from_arrow(&Binary).unwrap_err().code(), "42U15");
    }
}
