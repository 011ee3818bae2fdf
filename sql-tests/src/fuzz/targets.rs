//! The fuzz targets: each parser that takes user text or bytes, with seed inputs to mutate.

use accelsql_engine::gpu_scheduler::{VisibleDevices, units};
use accelsql_engine::splitter::split_statements;
use accelsql_engine::udf_runtime::AcceleratorRequest;
use accelsql_engine::udf_runtime::annotations::parse_instance_limit;
use accelsql_engine::{EngineError, Result};

use super::grammar;
use super::mutate::{Rng, mutate, mutate_bytes};

/// One input: text for text parsers, bytes for binary decoders.
#[derive(Debug, Clone)]
pub(crate) enum Input {
    Text(String),
    Bytes(Vec<u8>),
}

impl Input {
    /// The text (empty for bytes).
    pub(crate) fn text(&self) -> &str {
        match self {
            Self::Text(text) => text,
            Self::Bytes(_) => "",
        }
    }

    /// The input as a finding shows it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Bytes(bytes) => bytes.escape_ascii().to_string(),
        }
    }
}

/// How a target runs an input.
pub(crate) enum Run {
    /// A parser called directly.
    Direct(fn(&Input) -> Result<()>),
    /// SQL text run in the target's own session.
    Sql,
    /// A statement from the grammar, run in the restricted grammar session.
    Grammar,
}

/// A parser under fuzzing.
pub struct Target {
    /// Its name in reports.
    pub name: &'static str,
    pub(crate) input: fn(&mut Rng) -> Input,
    pub(crate) run: Run,
}

fn text_from(seeds: &[&str], rng: &mut Rng) -> Input {
    let seed = *rng.pick(seeds);
    Input::Text(if rng.chance(10) {
        seed.to_string()
    } else {
        mutate(seed, rng)
    })
}

const SPLITTER_SEEDS: &[&str] = &[
    "SELECT 1; SELECT 'a;b' AS \"x;\" -- c;\n; /* ; */ SELECT 2",
    "CREATE PYTHON3 SCALAR SCRIPT f(x INT) RETURNS INT AS\ndef run(ctx):\n    return ctx.x # ;\n/\nSELECT f(1);",
    "CREATE OR REPLACE LUA SCRIPT s() AS\n  x = ';'\n/\n",
    "SELECT $$a;b$$; SELECT E'\\';'",
];

const DDL_SEEDS: &[&str] = &[
    "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT fz.f(x DOUBLE, s VARCHAR(20)) RETURNS DECIMAL(18,2) AS\ndef run(ctx):\n    return 1\n/",
    "CREATE PYTHON3 SET SCRIPT fz_g(...) EMITS (a BIGINT, b VARCHAR(2000000)) AS\ndef run(ctx):\n    ctx.emit(1, 'x')\n/",
    "CREATE PYTHON3 SCALAR SCRIPT fz_h() EMITS (...) AS\ndef run(ctx): pass\n/",
    "DROP SCRIPT IF EXISTS fz.f",
    "CREATE PYTHON3 SET SCRIPT \"Fz\".\"Q\"(x TIMESTAMP, y DATE, z BOOLEAN) RETURNS DOUBLE AS\n%perNodeAndCallInstanceLimit 2;\ndef run(ctx): return 1.0\n/",
];

const OPTION_SEEDS: &[&str] = &[
    "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT fz_opt() RETURNS INT AS\n%perInstanceRequiredAcceleratorDevices GpuNvidia|None;\n%perNodeAndCallInstanceLimit 4;\n%env A=b c;\nX = \"\"\"\n%env B=1;\n\"\"\"\ndef run(ctx): return 1\n/",
    "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT fz_opt2() RETURNS INT AS\n  %env PATH_X=/a:/b;\ny = (1\n %2)\ndef run(ctx): return y\n/",
];

const LANGUAGE_SEEDS: &[&str] = &[
    "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=builtin_python3 MYPY=builtin_python3'",
    "ALTER SESSION SET SCRIPT_LANGUAGES='R=builtin_r GPU_PY=/nonexistent/python3'",
];

const SETTING_SEEDS: &[&str] = &[
    "SET accelsql.gpu_wait_timeout = '30s'",
    "SET accelsql.udf_timeout = '250ms'",
    "SET accelsql.statement_timeout = '2s'",
    "ALTER SESSION SET QUERY_TIMEOUT = 5",
    "SET accelsql.optional_gpu_when_busy = 'cpu'",
    "SET accelsql.identifier_case = 'upper'",
    "SET accelsql.create_schema_opens = 'false'",
    "SET datafusion.execution.batch_size = 1024",
    "SET TIME ZONE '+02:00'",
    "RESET accelsql.udf_timeout",
];

const EXASOL_SEEDS: &[&str] = &[
    "CREATE OR REPLACE CONNECTION fz_c TO 'http://x' USER 'u' IDENTIFIED BY 'p'",
    "DROP CONNECTION IF EXISTS fz_c",
    "OPEN SCHEMA fz_s",
    "CREATE SCHEMA IF NOT EXISTS fz_s",
    "IMPORT INTO (y DOUBLE) FROM SCRIPT py_emit WITH a = 'b'",
    "EXPORT (SELECT 1 AS x) INTO SCRIPT py_emit",
    "SELECT CURRENT_SCHEMA, SESSIONTIMEZONE FROM DUAL",
    "SELECT TO_CHAR(DATE '2020-01-02', 'YYYY-MM-DD'), ADD_DAYS(DATE '2020-01-01', 3)",
];

/// Requests of Exasol's WebSocket API as pyexasol sends them (the Exasol port).
const EXASOL_REQUEST_SEEDS: &[&str] = &[
    r#"{"command":"execute","sqlText":"EXPORT (\nSELECT a, 'x)' FROM t -- (\n) INTO CSV AT 'https://10.0.0.1:4242' PUBLIC KEY 'sha256//abc=' FILE '000.gz' WITH COLUMN NAMES"}"#,
    r#"{"command":"execute","sqlText":"IMPORT INTO s.t(a, \"B\") FROM CSV AT 'http://1.2.3.4:5' FILE '000.csv' ENCODING = 'UTF8' NULL = 'NA' SKIP = 1 ROW SEPARATOR = 'CRLF' COLUMN SEPARATOR = ';'"}"#,
    r#"{"command":"executePreparedStatement","statementHandle":1,"numColumns":2,"numRows":2,"columns":[{"name":"A"},{"name":"B"}],"data":[[1,2.5],["x",null]]}"#,
    r#"{"command":"createPreparedStatement","sqlText":"INSERT INTO t (a, b) VALUES (?, ?)","numRows":3}"#,
    r#"{"command":"getColumns","schema":"S%","table":null,"column":"%","tableTypes":["TABLE","VIEW"]}"#,
    r#"{"command":"setAttributes","attributes":{"autocommit":false,"queryTimeout":5,"feedbackInterval":1,"resultSetMaxRows":10}}"#,
];

const ANNOTATION_SEEDS: &[&str] = &[
    "GpuNvidia",
    "GpuNvidia|None",
    "None | GpuNvidia;",
    "None",
    "4",
    "1",
];
const VISIBLE_SEEDS: &[&str] = &[
    "0,1",
    "GPU-8d2f3c4e-1a2b-3c4d-5e6f-123456789abc",
    "MIG-GPU-1/2/0",
    "-1",
    "",
    "1, 0",
];
const UNIT_SEEDS: &[&str] = &[
    "250ms", "30s", "5min", "2h", "1.5", "16GiB", "512 MiB", "1.5GB", "123",
];

/// Every target, in the order a round runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "splitter",
        input: |rng| text_from(SPLITTER_SEEDS, rng),
        run: Run::Direct(|input| {
            let pieces = split_statements(input.text());
            // Every piece is text of the input: the splitter only cuts.
            for piece in &pieces {
                if piece.text.len() > input.text().len() {
                    return Err(EngineError::Relayed {
                        code: "XX000",
                        message: "a statement piece is longer than the input".into(),
                    });
                }
            }
            Ok(())
        }),
    },
    Target {
        name: "script_ddl",
        input: |rng| text_from(DDL_SEEDS, rng),
        run: Run::Sql,
    },
    Target {
        name: "script_options",
        input: |rng| text_from(OPTION_SEEDS, rng),
        run: Run::Sql,
    },
    Target {
        name: "script_languages",
        input: |rng| text_from(LANGUAGE_SEEDS, rng),
        run: Run::Sql,
    },
    Target {
        name: "settings",
        input: |rng| text_from(SETTING_SEEDS, rng),
        run: Run::Sql,
    },
    Target {
        name: "exasol_statements",
        input: |rng| text_from(EXASOL_SEEDS, rng),
        run: Run::Sql,
    },
    Target {
        name: "annotations",
        input: |rng| text_from(ANNOTATION_SEEDS, rng),
        run: Run::Direct(|input| {
            let _ = AcceleratorRequest::parse(input.text()).map_err(EngineError::Runtime);
            let _ = parse_instance_limit(input.text()).map_err(EngineError::Runtime);
            Ok(())
        }),
    },
    Target {
        name: "cuda_visible",
        input: |rng| text_from(VISIBLE_SEEDS, rng),
        run: Run::Direct(|input| {
            let _ = VisibleDevices::parse(input.text());
            Ok(())
        }),
    },
    Target {
        name: "units",
        input: |rng| text_from(UNIT_SEEDS, rng),
        run: Run::Direct(|input| {
            let _ = units::parse_duration(input.text());
            let _ = units::parse_bytes(input.text());
            Ok(())
        }),
    },
    Target {
        name: "worker_frames",
        input: |rng| {
            let seeds = accelsql_engine::udf_runtime::script::sample_worker_frames();
            let seed = rng.pick(&seeds).clone();
            Input::Bytes(mutate_bytes(&seed, rng))
        },
        run: Run::Direct(|input| {
            if let Input::Bytes(bytes) = input {
                let _ = accelsql_engine::udf_runtime::script::decode_worker_frame(bytes);
            }
            Ok(())
        }),
    },
    Target {
        name: "exasol_requests",
        input: |rng| {
            let seed = rng.pick(EXASOL_REQUEST_SEEDS);
            Input::Bytes(mutate_bytes(seed.as_bytes(), rng))
        },
        run: Run::Direct(|input| {
            if let Input::Bytes(bytes) = input {
                accelsql_server::read_exasol_request(bytes);
            }
            Ok(())
        }),
    },
    Target {
        name: "grammar_sql",
        input: |rng| Input::Text(grammar::statement(rng, true)),
        run: Run::Grammar,
    },
];
