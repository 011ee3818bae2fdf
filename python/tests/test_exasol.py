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
