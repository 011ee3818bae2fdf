"""An Exasol-style flow through the package: connect(schema=…), OPEN SCHEMA, scripts written as
for Exasol (no imports of os/datetime), connections read with exa.get_connection, parameters
bound by the engine (? and pyexasol's {name})."""

import datetime
import decimal

import pytest

import accelsql


def test_question_mark_params_are_bound_not_pasted(conn):
    conn.execute("CREATE TABLE people(name VARCHAR, age BIGINT) AS VALUES ('ann', 31), ('bob', 42)")
    got = conn.execute("SELECT name FROM people WHERE age > ? AND name <> ?", [30, "x' OR '1'='1"])
    assert sorted(got.fetchcol()) == ["ann", "bob"]
    # A value that looks like SQL stays a value.
    assert conn.execute("SELECT ? || '!'", ["it's; DROP TABLE people"]).fetchval() == "it's; DROP TABLE people!"
    assert conn.execute("SELECT count(*) FROM people").fetchval() == 2
    row = conn.execute(
        "SELECT ?, ?, ?, ?, ?, ?",
        [None, True, 2.5, decimal.Decimal("1.25"), datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 1, 12, 30)],
    ).fetchone()
    assert row == (None, True, 2.5, decimal.Decimal("1.25"), datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 1, 12, 30))
    with pytest.raises(ValueError):
        conn.execute("SELECT ?, ?", [1])


def test_pyexasol_named_params(conn):
    conn.execute("CREATE TABLE items(id BIGINT, label VARCHAR) AS VALUES (1, 'a'), (2, 'b')")
    got = conn.execute(
        "SELECT label FROM {table!i} WHERE id = {id} AND label <> '{id}' AND {col!q} IS NOT NULL",
        {"table": "items", "id": 2, "col": "label"},
    )
    assert got.fetchall() == [("b",)]
    with pytest.raises(ValueError, match="no raw text"):
        conn.execute("SELECT {x!r}", {"x": "1"})
    with pytest.raises(ValueError, match="not a plain identifier"):
        conn.execute("SELECT * FROM {t!i}", {"t": "items; DROP TABLE items"})


def test_result_names_fold_to_upper_case_as_in_exasol_by_default():
    with accelsql.connect(simulated_gpus=0) as conn:
        conn.execute("CREATE TABLE t(id BIGINT, Label VARCHAR) AS VALUES (1, 'a')")
        st = conn.execute('SELECT id, label, 1 AS a, 2 AS "b", 3 AS "MiXed" FROM t')
        assert st.column_names() == ["ID", "LABEL", "A", "b", "MiXed"]
        assert list(conn.export_to_pandas("t").columns) == ["ID", "LABEL"]
        # Names in SQL are found whatever their case.
        assert conn.execute("SELECT ID FROM T WHERE LABEL = 'a'").fetchval() == 1
    with accelsql.connect(simulated_gpus=0, lower_ident=True) as conn:
        assert conn.execute("SELECT 1 AS a").column_names() == ["a"]


def test_the_exasol_dialect_from_connect(unique):
    schema = unique("dialect")
    with accelsql.connect(simulated_gpus=0, dialect="exasol", schema=schema) as conn:
        assert conn.execute("SELECT '' IS NULL").fetchval() is True
        conn.execute('CREATE TABLE t (id DECIMAL(36, 0), "lbl" VARCHAR(10))')
        conn.execute("INSERT INTO t VALUES (123456789012345678901234567890123456, '')")
        st = conn.execute('SELECT ID, "lbl", REPEAT(1, 2) AS r FROM T')
        assert st.column_names() == ["ID", "lbl", "R"]
        assert st.fetchone() == (decimal.Decimal("123456789012345678901234567890123456"), None, "11")
        assert st.exasol_columns() == {
            "ID": {"type": "DECIMAL", "precision": 36, "scale": 0},
            "lbl": {"type": "VARCHAR", "size": 10, "characterSet": "UTF8"},
            "R": {"type": "VARCHAR", "size": 2000000, "characterSet": "UTF8"},
        }
        # A string literal is CHAR(n) ASCII (UTF8 with other characters), as Exasol types it.
        literals = conn.execute("SELECT 'abc' AS a, 'äb' AS u").exasol_columns()
        assert literals == {
            "A": {"type": "CHAR", "size": 3, "characterSet": "ASCII"},
            "U": {"type": "CHAR", "size": 2, "characterSet": "UTF8"},
        }
        kinds = conn.execute("SELECT 1.5e0 AS d, TRUE AS b, DATE '2024-01-02' AS t, CAST(1 AS BIGINT) AS n").exasol_columns()
        assert [v["type"] for v in kinds.values()] == ["DOUBLE", "BOOLEAN", "DATE", "DECIMAL"]
        assert kinds["N"]["precision"] == 19
        with pytest.raises(accelsql.AccelsqlError, match='object "id" not found') as e:
            conn.execute('SELECT "id" FROM t')
        assert e.value.code == "42000"
        # The dialect is a setting: the default one is a SET away.
        conn.execute("SET accelsql.sql_dialect = 'datafusion'")
        assert conn.execute("SELECT '' IS NULL").fetchval() is False
    with pytest.raises(accelsql.AccelsqlError, match="'datafusion', 'exasol'"):
        accelsql.connect(simulated_gpus=0, dialect="oracle")


def test_exasol_style_flow(unique):
    schema = unique("flow")
    with accelsql.connect(simulated_gpus=1) as setup:
        # Scripts and connections are the engine's: every connection sees them.
        setup.execute(f"CREATE SCHEMA {schema}")  # becomes the current schema, as in Exasol
        setup.execute(f"CREATE OR REPLACE CONNECTION {schema}_conn TO 'https://example.invalid' USER 'u' IDENTIFIED BY 'p'")
        setup.execute(
            f"""CREATE OR REPLACE PYTHON3 SCALAR SCRIPT stamp(x DOUBLE) RETURNS VARCHAR(200) AS
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;
def run(ctx):
    c = exa.get_connection('{schema}_conn')
    return '%s %s %s %s %s' % (ctx.x, c.address, type(datetime.datetime.now()).__name__,
                               os.getenv('NO_SUCH_VARIABLE', 'unset'), exa.meta.script_schema)
/"""
        )
    with accelsql.connect(simulated_gpus=1, schema=schema) as conn:
        conn.execute("CREATE TABLE numbers(x DOUBLE) AS VALUES (1.0), (2.0), (3.0)")
        rows = conn.execute("SELECT stamp(x) FROM numbers ORDER BY x").fetchcol()
        assert rows == [f"{x} https://example.invalid datetime unset {schema.upper()}" for x in (1.0, 2.0, 3.0)]
        assert conn.execute("SELECT CURRENT_SCHEMA").fetchval() == schema.upper()
        conn.execute("CLOSE SCHEMA")
        with pytest.raises(accelsql.AccelsqlError) as e:
            conn.execute("SELECT * FROM numbers")
        assert e.value.code == "42000"
        conn.execute(f"OPEN SCHEMA {schema}")
        assert conn.execute("SELECT count(*) FROM numbers").fetchval() == 3
        with pytest.raises(accelsql.AccelsqlError) as e:
            conn.execute("OPEN SCHEMA no_such_schema_anywhere")
        assert e.value.code == "42000"


def test_import_from_script_loads_rows_through_the_users_python(unique):
    schema = unique("imp")
    with accelsql.connect(simulated_gpus=0, schema=schema) as conn:
        conn.execute(
            f"CREATE OR REPLACE CONNECTION {schema}_src TO 'mem://numbers' USER 'reader' IDENTIFIED BY 'pw'"
        )
        conn.execute(
            """CREATE OR REPLACE PYTHON3 SCALAR SCRIPT numbers(n INTEGER, src VARCHAR(100))
EMITS (n INTEGER, square DOUBLE, src VARCHAR(100)) AS
def run(ctx):
    for i in range(1, ctx.n + 1):
        ctx.emit(i, float(i * i), ctx.src)

def generate_sql_for_import_spec(import_spec):
    c = exa.get_connection(import_spec.connection_name)
    return "SELECT numbers(%d, '%s')" % (int(import_spec.parameters['COUNT']), c.address)
/"""
        )
        conn.execute("CREATE TABLE squares(n INT, square DOUBLE, src VARCHAR(100))")
        conn.execute(f"IMPORT INTO squares FROM SCRIPT numbers AT {schema}_src WITH count = '4'")
        df = conn.export_to_pandas("SELECT * FROM squares ORDER BY n")
        assert list(df.columns) == ["N", "SQUARE", "SRC"]
        assert df["SQUARE"].tolist() == [1.0, 4.0, 9.0, 16.0]
        assert set(df["SRC"]) == {"mem://numbers"}
        with pytest.raises(accelsql.AccelsqlError) as e:
            conn.execute("IMPORT INTO squares FROM SCRIPT no_such_script")
        assert e.value.code == "42000" and "not found" in e.value.message
        assert conn.execute("SELECT count(*) FROM squares").fetchval() == 4
