//! `EXPORT … INTO CSV AT 'http://…'` and `IMPORT INTO … FROM CSV AT 'http://…'`, the statements
//! pyexasol's HTTP transport runs (`export_to_pandas`, `import_from_pandas`, their `_file`,
//! `_callback`, `_list` and parallel kin): read from the statement's text, then run with the
//! tunnels of `transport.rs` as their files. An export is streamed, batch by batch, as CSV; an
//! import is read as CSV, held within the session's memory budget, and loaded in one commit.

use std::net::IpAddr;
use std::sync::Arc;

use accelsql_engine::datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use accelsql_engine::datafusion::arrow::csv::{QuoteStyle, ReaderBuilder, WriterBuilder};
use accelsql_engine::datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use accelsql_engine::datafusion::common::TableReference;
use accelsql_engine::datafusion::sql::sqlparser::dialect::GenericDialect;
use accelsql_engine::datafusion::sql::sqlparser::tokenizer::{Location, Token, Tokenizer};
use futures::StreamExt;

use super::transport::{Download, Endpoint, TransportError, Tunnels, Upload};
use crate::service::AccelsqlFlightSql;
use crate::sessions::ClientSession;

/// The code of a transfer whose tunnel is missing or broke.
pub(crate) const TRANSFER_FAILED: &str = "08H01";

/// The code of a statement of the transfers' grammar that accelsql does not run.
const NOT_SUPPORTED: &str = "0A000";

/// An error of a transfer: its code and text.
#[derive(Debug)]
pub(crate) struct TransferError {
    /// accelsql's code.
    pub(crate) code: String,
    /// The client's text.
    pub(crate) text: String,
}

impl TransferError {
    fn new(code: &str, text: impl Into<String>) -> Self {
        Self {
            code: code.to_string(),
            text: text.into(),
        }
    }
}

impl From<TransportError> for TransferError {
    fn from(e: TransportError) -> Self {
        Self::new(TRANSFER_FAILED, e.0)
    }
}

impl From<accelsql_engine::EngineError> for TransferError {
    fn from(e: accelsql_engine::EngineError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<crate::error::ServerError> for TransferError {
    fn from(e: crate::error::ServerError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

/// A transfer statement, read.
#[derive(Debug)]
pub(crate) struct Transfer {
    kind: Kind,
    files: Vec<Endpoint>,
    format: CsvFormat,
}

/// Which way the rows go.
#[derive(Debug, PartialEq)]
enum Kind {
    /// The rows of a query (a table's: `SELECT … FROM` it) to the client.
    Export { query: String },
    /// The client's rows into a table (its Exasol name) and, where listed, these columns.
    Import {
        table: String,
        columns: Option<Vec<String>>,
    },
}

/// The CSV options of the statement.
#[derive(Debug)]
struct CsvFormat {
    separator: u8,
    delimiter: u8,
    null: String,
    skip: usize,
    row_separator: &'static str,
    quote: QuoteStyle,
    with_names: bool,
}

impl Default for CsvFormat {
    fn default() -> Self {
        Self {
            separator: b',',
            delimiter: b'"',
            null: String::new(),
            skip: 0,
            row_separator: "\n",
            quote: QuoteStyle::Necessary,
            with_names: false,
        }
    }
}

/// A token of the statement and where it starts (a byte offset).
struct Tok {
    token: Token,
    at: usize,
}

impl Tok {
    fn is(&self, word: &str) -> bool {
        matches!(&self.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
    }

    fn string(&self) -> Option<&str> {
        match &self.token {
            Token::SingleQuotedString(s) => Some(s),
            _ => None,
        }
    }
}

/// The byte offset of `location` (1-based line and character column) in `text`.
fn offset(text: &str, location: Location) -> usize {
    let mut line = 1;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if line == location.line {
            break;
        }
        if c == '\n' {
            line += 1;
            start = i + 1;
        }
    }
    let column = usize::try_from(location.column.saturating_sub(1)).unwrap_or(usize::MAX);
    text[start..]
        .char_indices()
        .nth(column)
        .map_or(text.len(), |(i, _)| start + i)
}

fn tokens(sql: &str) -> Option<Vec<Tok>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .ok()?;
    Some(
        tokens
            .into_iter()
            .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
            .map(|t| Tok {
                at: offset(sql, t.span.start),
                token: t.token,
            })
            .collect(),
    )
}

fn unsupported(text: impl Into<String>) -> TransferError {
    TransferError::new(NOT_SUPPORTED, text)
}

fn syntax(text: &str) -> TransferError {
    TransferError::new(
        "42000",
        format!(
            "{text}; expected EXPORT <table>|(<query>) INTO CSV AT '<http address>' FILE \
             '<name>' … or IMPORT INTO <table> FROM CSV AT '<http address>' FILE '<name>' …"
        ),
    )
}

/// The transfer `sql` asks for: `None` when it is no `EXPORT` or `IMPORT` through an HTTP
/// address (the engine reads those).
pub(crate) fn parse(sql: &str) -> Result<Option<Transfer>, TransferError> {
    let Some(toks) = tokens(sql) else {
        return Ok(None);
    };
    let first = toks.first();
    let export = first.is_some_and(|t| t.is("EXPORT"));
    if !export && !first.is_some_and(|t| t.is("IMPORT")) {
        return Ok(None);
    }
    let http = toks.windows(2).any(|w| {
        w[0].is("AT")
            && w[1]
                .string()
                .is_some_and(|s| Endpoint::parse(s, "", None).is_some())
    });
    if !http {
        return Ok(None);
    }
    let end = |i: usize| toks.get(i).map_or(sql.len(), |t| t.at);
    let mut i = 1;
    let kind = if export {
        let query = if matches!(toks.get(1).map(|t| &t.token), Some(Token::LParen)) {
            let close = matching_paren(&toks, 1).ok_or_else(|| syntax("unbalanced ( )"))?;
            let query = sql[toks[1].at + 1..end(close)].trim().to_string();
            i = close + 1;
            query
        } else {
            let (table, columns, next) = name_and_columns(sql, &toks, 1, "INTO")?;
            i = next;
            match columns {
                Some(columns) => format!("SELECT {} FROM {table}", columns.join(", ")),
                None => format!("SELECT * FROM {table}"),
            }
        };
        expect(&toks, &mut i, &["INTO", "CSV"])?;
        Kind::Export { query }
    } else {
        expect(&toks, &mut i, &["INTO"])?;
        let (table, columns, next) = name_and_columns(sql, &toks, i, "FROM")?;
        i = next;
        expect(&toks, &mut i, &["FROM", "CSV"])?;
        Kind::Import { table, columns }
    };
    let mut files = Vec::new();
    while toks.get(i).is_some_and(|t| t.is("AT")) {
        let url = toks
            .get(i + 1)
            .and_then(Tok::string)
            .ok_or_else(|| syntax("AT needs an address"))?;
        i += 2;
        let mut key = None;
        if toks.get(i).is_some_and(|t| t.is("PUBLIC"))
            && toks.get(i + 1).is_some_and(|t| t.is("KEY"))
        {
            let pinned = toks
                .get(i + 2)
                .and_then(Tok::string)
                .ok_or_else(|| syntax("PUBLIC KEY needs 'sha256//<base64>'"))?;
            key = Some(
                pinned
                    .strip_prefix("sha256//")
                    .ok_or_else(|| unsupported("PUBLIC KEY takes 'sha256//<base64>' only"))?
                    .to_string(),
            );
            i += 3;
        }
        if toks.get(i).is_some_and(|t| t.is("USER")) {
            return Err(unsupported(
                "an HTTP transfer through a tunnel takes no USER … IDENTIFIED BY",
            ));
        }
        expect(&toks, &mut i, &["FILE"])?;
        let file = toks
            .get(i)
            .and_then(Tok::string)
            .ok_or_else(|| syntax("FILE needs a name"))?;
        i += 1;
        if matches!(toks.get(i).map(|t| &t.token), Some(Token::LParen)) {
            return Err(unsupported(
                "column numbers after FILE (pyexasol's csv_cols) are not supported",
            ));
        }
        if toks.get(i).is_some_and(|t| t.is("FILE")) {
            return Err(unsupported(
                "one FILE per AT: a tunnel carries one file (pyexasol writes one each)",
            ));
        }
        files.push(
            Endpoint::parse(url, file, key).ok_or_else(|| {
                unsupported(format!("{url:?} is not an HTTP address with a port"))
            })?,
        );
    }
    if files.is_empty() {
        return Err(syntax("no AT … FILE …"));
    }
    let format = options(&toks, i, export)?;
    Ok(Some(Transfer {
        kind,
        files,
        format,
    }))
}

fn matching_paren(toks: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn expect(toks: &[Tok], i: &mut usize, words: &[&str]) -> Result<(), TransferError> {
    for word in words {
        if !toks.get(*i).is_some_and(|t| t.is(word)) {
            return Err(syntax(&format!("expected {word}")));
        }
        *i += 1;
    }
    Ok(())
}

/// A table's name (its text) from `start` to `(` or `stop`, its column list (the names' texts)
/// and the index after them.
fn name_and_columns(
    sql: &str,
    toks: &[Tok],
    start: usize,
    stop: &str,
) -> Result<(String, Option<Vec<String>>, usize), TransferError> {
    let mut i = start;
    while toks
        .get(i)
        .is_some_and(|t| !t.is(stop) && t.token != Token::LParen)
    {
        i += 1;
    }
    let end = toks.get(i).map_or(sql.len(), |t| t.at);
    let table = toks
        .get(start)
        .map(|t| sql[t.at..end].trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| syntax("expected a table"))?;
    if toks.get(i).is_none_or(|t| t.token != Token::LParen) {
        return Ok((table, None, i));
    }
    let close = matching_paren(toks, i).ok_or_else(|| syntax("unbalanced ( )"))?;
    let columns = sql[toks[i].at + 1..toks[close].at]
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    Ok((table, Some(columns), close + 1))
}

/// The CSV options from `i` to the end.
fn options(toks: &[Tok], mut i: usize, export: bool) -> Result<CsvFormat, TransferError> {
    let mut format = CsvFormat::default();
    let value = |i: usize| -> Result<&str, TransferError> {
        if toks.get(i).map(|t| &t.token) != Some(&Token::Eq) {
            return Err(syntax("expected ="));
        }
        toks.get(i + 1)
            .and_then(|t| match &t.token {
                Token::SingleQuotedString(s) => Some(s.as_str()),
                Token::Number(n, _) => Some(n.as_str()),
                Token::Word(w) => Some(w.value.as_str()),
                _ => None,
            })
            .ok_or_else(|| syntax("expected a value after ="))
    };
    let one_byte = |s: &str, what: &str| -> Result<u8, TransferError> {
        match s.as_bytes() {
            [b] => Ok(*b),
            _ => Err(unsupported(format!("{what} must be one ASCII character"))),
        }
    };
    while let Some(t) = toks.get(i) {
        if t.token == Token::SemiColon {
            i += 1;
        } else if t.is("ENCODING") {
            let encoding = value(i + 1)?.to_ascii_uppercase();
            if encoding != "UTF8" && encoding != "UTF-8" {
                return Err(unsupported(format!(
                    "ENCODING = '{encoding}': files are UTF8 only"
                )));
            }
            i += 3;
        } else if t.is("NULL") {
            format.null = value(i + 1)?.to_string();
            i += 3;
        } else if t.is("SKIP") && !export {
            format.skip = value(i + 1)?
                .parse()
                .map_err(|_| syntax("SKIP needs a number"))?;
            i += 3;
        } else if t.is("ROW") && toks.get(i + 1).is_some_and(|t| t.is("SEPARATOR")) {
            format.row_separator = match value(i + 2)?.to_ascii_uppercase().as_str() {
                "LF" => "\n",
                "CRLF" => "\r\n",
                "CR" => "\r",
                other => {
                    return Err(unsupported(format!(
                        "ROW SEPARATOR = '{other}': LF, CRLF or CR"
                    )));
                }
            };
            i += 4;
        } else if t.is("COLUMN") && toks.get(i + 1).is_some_and(|t| t.is("SEPARATOR")) {
            format.separator = one_byte(value(i + 2)?, "COLUMN SEPARATOR")?;
            i += 4;
        } else if t.is("COLUMN") && toks.get(i + 1).is_some_and(|t| t.is("DELIMITER")) {
            format.delimiter = one_byte(value(i + 2)?, "COLUMN DELIMITER")?;
            i += 4;
        } else if t.is("DELIMIT") && export {
            format.quote = match value(i + 1)?.to_ascii_uppercase().as_str() {
                "AUTO" => QuoteStyle::Necessary,
                "ALWAYS" => QuoteStyle::Always,
                "NEVER" => QuoteStyle::Never,
                other => return Err(syntax(&format!("DELIMIT = {other}"))),
            };
            i += 3;
        } else if export
            && t.is("WITH")
            && toks.get(i + 1).is_some_and(|t| t.is("COLUMN"))
            && toks.get(i + 2).is_some_and(|t| t.is("NAMES"))
        {
            format.with_names = true;
            i += 3;
        } else {
            return Err(unsupported(format!(
                "the option at {:?} of an HTTP transfer is not supported (ENCODING, NULL, \
                 SKIP, ROW SEPARATOR, COLUMN SEPARATOR, COLUMN DELIMITER, DELIMIT, WITH COLUMN \
                 NAMES are)",
                t.token.to_string()
            )));
        }
    }
    Ok(format)
}

impl Transfer {
    /// Runs the transfer for `client` (at `peer`) through the tunnels it opened: the number of
    /// rows sent or loaded.
    pub(crate) async fn run(
        &self,
        service: &AccelsqlFlightSql,
        client: &Arc<ClientSession>,
        tunnels: &Tunnels,
        peer: Option<IpAddr>,
    ) -> Result<u64, TransferError> {
        match &self.kind {
            Kind::Export { query } => self.export(query, service, client, tunnels, peer).await,
            Kind::Import { table, columns } => {
                self.import(table, columns.as_deref(), service, client, tunnels, peer)
                    .await
            }
        }
    }

    async fn export(
        &self,
        query: &str,
        service: &AccelsqlFlightSql,
        client: &Arc<ClientSession>,
        tunnels: &Tunnels,
        peer: Option<IpAddr>,
    ) -> Result<u64, TransferError> {
        let mut uploads = Vec::with_capacity(self.files.len());
        for endpoint in &self.files {
            uploads.push(Upload::start(endpoint, tunnels, peer).await?);
        }
        let (mut stream, log) = service.run_started(client, query).await?;
        let schema = stream.schema();
        let mut rows = 0u64;
        let sent: Result<(), TransferError> = async {
            if self.format.with_names {
                let header = self.csv(&RecordBatch::new_empty(Arc::clone(&schema)), true)?;
                for upload in &mut uploads {
                    upload.send(&header).await?;
                }
            }
            let mut next = 0;
            while let Some(batch) = stream.next().await {
                let batch = batch.map_err(accelsql_engine::EngineError::from)?;
                if batch.num_rows() == 0 {
                    continue;
                }
                rows += batch.num_rows() as u64;
                let text = self.csv(&batch, false)?;
                uploads[next].send(&text).await?;
                next = (next + 1) % uploads.len();
            }
            for upload in uploads {
                upload.finish().await?;
            }
            Ok(())
        }
        .await;
        service.log_ended(
            &log,
            client,
            rows,
            sent.as_ref().err().map(|e| e.code.as_str()),
        );
        sent.map(|()| rows)
    }

    /// `batch` as CSV text (only the header line when asked for it).
    fn csv(&self, batch: &RecordBatch, header: bool) -> Result<Vec<u8>, TransferError> {
        let mut writer = WriterBuilder::new()
            .with_header(header)
            .with_delimiter(self.format.separator)
            .with_quote(self.format.delimiter)
            .with_quote_style(self.format.quote)
            .with_null(self.format.null.clone())
            .with_timestamp_format("%Y-%m-%d %H:%M:%S%.6f".into())
            .build(Vec::new());
        writer.write(batch).map_err(|e| {
            TransferError::new(NOT_SUPPORTED, format!("cannot write the rows as CSV: {e}"))
        })?;
        let mut text = writer.into_inner();
        if self.format.row_separator != "\n" {
            text = String::from_utf8_lossy(&text)
                .replace('\n', self.format.row_separator)
                .into_bytes();
        }
        Ok(text)
    }

    #[allow(clippy::too_many_arguments)]
    async fn import(
        &self,
        table: &str,
        columns: Option<&[String]>,
        service: &AccelsqlFlightSql,
        client: &Arc<ClientSession>,
        tunnels: &Tunnels,
        peer: Option<IpAddr>,
    ) -> Result<u64, TransferError> {
        service.check_statement_cap(client)?;
        // The table as the engine names it (Exasol's quoted names swap case).
        let name = accelsql_engine::exasol_text(table);
        let session = &client.session;
        let reference = TableReference::from(name.as_str());
        let provider = session
            .context()
            .table_provider(reference.clone())
            .await
            .map_err(accelsql_engine::EngineError::from)?;
        let target = provider.schema();
        // Which table column each CSV field fills.
        let positions: Vec<usize> = match columns {
            None => (0..target.fields().len()).collect(),
            Some(columns) => columns
                .iter()
                .map(|c| {
                    let want = TableReference::from(accelsql_engine::exasol_text(c).as_str());
                    let want = want.table();
                    target
                        .fields()
                        .iter()
                        .position(|f| f.name() == want)
                        .ok_or_else(|| {
                            TransferError::new("42000", format!("table {table} has no column {c}"))
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        let text_schema: SchemaRef = Arc::new(Schema::new(
            positions
                .iter()
                .map(|&p| Field::new(target.field(p).name(), DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let null = regex::Regex::new(&format!("^(?:{})?$", regex::escape(&self.format.null)))
            .map_err(|e| unsupported(format!("NULL: {e}")))?;
        let reader = || {
            ReaderBuilder::new(Arc::clone(&text_schema))
                .with_header(false)
                .with_delimiter(self.format.separator)
                .with_quote(self.format.delimiter)
                .with_bounds(self.format.skip, usize::MAX)
                .with_batch_size(16 * 1024)
                .with_null_regex(null.clone())
        };
        let mut batches = Vec::new();
        let mut held = Vec::new();
        let mut keep = |batch: RecordBatch| -> Result<(), TransferError> {
            held.push(session.reserve_memory("IMPORT rows", batch.get_array_memory_size())?);
            batches.push(widen(&batch, &positions, &target)?);
            Ok(())
        };
        for endpoint in &self.files {
            let mut decoder = reader().build_decoder();
            let mut download = Download::start(endpoint, tunnels, peer).await?;
            let csv_error = |e: accelsql_engine::datafusion::arrow::error::ArrowError| {
                TransferError::new("22P04", format!("{}: {e}", endpoint.file))
            };
            while let Some(data) = download.next().await? {
                let mut rest = &data[..];
                while !rest.is_empty() {
                    let used = decoder.decode(rest).map_err(csv_error)?;
                    rest = &rest[used..];
                    if decoder.capacity() == 0 {
                        if let Some(batch) = decoder.flush().map_err(csv_error)? {
                            keep(batch)?;
                        }
                    } else if used == 0 {
                        return Err(TransferError::new(
                            "22P04",
                            format!("{}: the CSV reader stopped", endpoint.file),
                        ));
                    }
                }
            }
            decoder.decode(&[]).map_err(csv_error)?;
            if let Some(batch) = decoder.flush().map_err(csv_error)? {
                keep(batch)?;
            }
        }
        let full: SchemaRef = Arc::new(Schema::new(
            target
                .fields()
                .iter()
                .map(|f| Field::new(f.name(), DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let rows = session.import_batches(&name, full, batches).await?;
        drop(held);
        service.log(&format!(
            "session={} IMPORT INTO {} rows={rows} (HTTP transport)",
            client.id,
            crate::results::log_word(&name)
        ));
        Ok(rows)
    }
}

/// `batch` (text columns for `positions` of `target`) as text columns for all of `target`'s
/// columns, NULL where the statement listed none.
fn widen(
    batch: &RecordBatch,
    positions: &[usize],
    target: &Schema,
) -> Result<RecordBatch, TransferError> {
    let width = target.fields().len();
    if positions.len() == width && positions.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(batch.clone());
    }
    let mut columns: Vec<ArrayRef> = (0..width)
        .map(|_| new_null_array(&DataType::Utf8, batch.num_rows()))
        .collect();
    for (i, &p) in positions.iter().enumerate() {
        columns[p] = Arc::clone(batch.column(i));
    }
    let schema = Schema::new(
        target
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(Arc::new(schema), columns)
        .map_err(|e| TransferError::new("22P04", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(sql: &str) -> Transfer {
        parse(sql).unwrap().unwrap()
    }

    #[test]
    fn pyexasols_export_of_a_query_is_read() {
        let t = read(
            "/*c*/\nEXPORT (\nSELECT a, 'x)' AS b FROM t -- (\n) INTO CSV\nAT \
             'https://10.0.0.1:4242' PUBLIC KEY 'sha256//abc=' FILE '000.gz'\nWITH COLUMN NAMES",
        );
        assert_eq!(
            t.kind,
            Kind::Export {
                query: "SELECT a, 'x)' AS b FROM t -- (".into()
            }
        );
        assert_eq!(t.files.len(), 1);
        assert_eq!(
            (t.files[0].token, t.files[0].tls, t.files[0].key.as_deref()),
            (4242, true, Some("abc="))
        );
        assert!(t.format.with_names);
    }

    #[test]
    fn a_table_export_and_an_import_with_options_are_read() {
        let t = read(
            "EXPORT \"S\".\"T\"(\"A\",b) INTO CSV AT 'http://1.2.3.4:5' FILE '000.csv' \
             AT 'http://1.2.3.4:6' FILE '001.csv' DELIMIT = ALWAYS COLUMN SEPARATOR = ';'",
        );
        assert_eq!(
            t.kind,
            Kind::Export {
                query: "SELECT \"A\", b FROM \"S\".\"T\"".into()
            }
        );
        assert_eq!(t.files.len(), 2);
        assert_eq!(t.format.separator, b';');
        let t = read(
            "IMPORT INTO s.t(a, \"B\") FROM CSV AT 'http://1.2.3.4:5' FILE '000.csv' \
             ENCODING = 'UTF8' NULL = 'NA' SKIP = 1 ROW SEPARATOR = 'CRLF'",
        );
        assert_eq!(
            t.kind,
            Kind::Import {
                table: "s.t".into(),
                columns: Some(vec!["a".into(), "\"B\"".into()])
            }
        );
        assert_eq!((t.format.skip, t.format.null.as_str()), (1, "NA"));
    }

    #[test]
    fn other_statements_are_left_to_the_engine_and_unknown_options_refused() {
        assert!(parse("SELECT 1").unwrap().is_none());
        assert!(parse("IMPORT INTO t FROM SCRIPT s AT c").unwrap().is_none());
        assert!(
            parse("EXPORT t INTO CSV AT 'ftp://h:1' FILE 'x'")
                .unwrap()
                .is_none()
        );
        let e = parse("IMPORT INTO t FROM CSV AT 'http://h:1' FILE 'x' TRIM").unwrap_err();
        assert_eq!(e.code, "0A000");
        let e = parse("IMPORT INTO t FROM CSV AT 'http://h:1' FILE 'x' (1..2)").unwrap_err();
        assert_eq!(e.code, "0A000");
        let e = parse("EXPORT t INTO CSV AT 'http://h:1'").unwrap_err();
        assert_eq!(e.code, "42000");
    }

    #[test]
    fn offsets_count_characters_per_line() {
        let text = "é\nab(c";
        let at = offset(text, Location { line: 2, column: 3 });
        assert_eq!(&text[at..], "(c");
    }
}
