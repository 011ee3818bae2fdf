"""`accelsql serve --exasol-port`: the real pyexasol driver, unchanged, logs in (RSA-encrypted
password), runs statements and fetches results over Exasol's WebSocket API, on the same engine,
users and sessions as the Flight SQL port."""

import os
import re
import subprocess

import pytest

pyexasol = pytest.importorskip("pyexasol") if not os.environ.get("CI") else __import__("pyexasol")


@pytest.fixture(scope="module")
def server(tmp_path_factory, accelsql_binary):
    tmp = tmp_path_factory.mktemp("exasol")
    proc = subprocess.Popen(
        [accelsql_binary, "serve", "--listen", "127.0.0.1:0", "--exasol-port", "0", "--simulated-gpus", "1",
         "--data-dir", str(tmp / "data"), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines = [proc.stdout.readline() for _ in range(4)]
    token = re.match(r"token: (\S+)", lines[1]).group(1)
    dsn = re.match(r"exasol: (\S+)", lines[2]).group(1)
    fingerprint = re.match(r"exasol-fingerprint: ([0-9A-F]{64})$", lines[3].strip()).group(1)
    yield dsn, token, fingerprint
    proc.terminate()
    assert proc.wait(timeout=20) == 0


@pytest.fixture(params=[False, True], ids=["plain", "compressed"])
def conn(server, request):
    dsn, token, _ = server
    c = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False,
                         compression=request.param)
    yield c
    c.close()


def test_a_query_returns_its_rows_and_types_in_exasols_dialect(conn):
    stmt = conn.execute("SELECT 1 AS a, 'x' AS b, CAST(2.5 AS DOUBLE) AS c, CAST(NULL AS INT) AS d")
    assert stmt.fetchall() == [(1, "x", 2.5, None)]
    assert list(stmt.columns()) == ["A", "B", "C", "D"]
    assert [c["type"] for c in stmt.columns().values()] == ["DECIMAL", "VARCHAR", "DOUBLE", "DECIMAL"]


def test_a_large_result_is_fetched_in_parts(conn):
    conn.execute("CREATE OR REPLACE TABLE many AS SELECT * FROM generate_series(1, 2500)")
    rows = conn.execute("SELECT value, value * 2 AS w FROM many ORDER BY 1").fetchall()
    assert len(rows) == 2500
    assert rows[0] == (1, 2) and rows[-1] == (2500, 5000)


def test_dml_answers_its_row_count_and_a_rollback_undoes_it(conn):
    conn.execute("CREATE OR REPLACE TABLE counted (x INT)")
    assert conn.execute("INSERT INTO counted VALUES (1), (2), (3)").rowcount() == 3
    conn.set_autocommit(False)
    conn.execute("INSERT INTO counted VALUES (4)")
    conn.rollback()
    conn.set_autocommit(True)
    assert conn.execute("SELECT count(*) FROM counted").fetchval() == 3


def test_an_error_arrives_with_its_code_and_the_session_goes_on(conn):
    with pytest.raises(pyexasol.ExaQueryError) as raised:
        conn.execute("SELECT no_such_column FROM (SELECT 1 AS a)")
    assert raised.value.code == "42000"
    assert conn.execute("SELECT 42").fetchval() == 42


def test_tls_with_the_printed_fingerprint_as_pyexasol_checks_it(server):
    dsn, token, fingerprint = server
    host, port = dsn.rsplit(":", 1)
    c = pyexasol.connect(dsn=f"{host}/{fingerprint}:{port}", user="sys", password=token,
                         encryption=True, compression=True)
    assert c.execute("SELECT 'over TLS'").fetchval() == "over TLS"
    assert c.attr["encryptionEnabled"] is True
    c.close()
    wrong = "0" * 64
    with pytest.raises(pyexasol.ExaConnectionError):
        pyexasol.connect(dsn=f"{host}/{wrong}:{port}", user="sys", password=token, encryption=True)


def test_a_wrong_password_is_refused(server):
    dsn, _, _ = server
    with pytest.raises(pyexasol.ExaAuthError) as raised:
        pyexasol.connect(dsn=dsn, user="sys", password="wrong", encryption=False)
    assert raised.value.code == "08004"


def test_insert_multi_sends_its_rows_through_a_prepared_statement(conn):
    conn.execute("CREATE OR REPLACE TABLE people (id INT, name VARCHAR(20), score DOUBLE)")
    rows = [(i, f"p{i}", i / 2) for i in range(1, 501)]
    conn.ext.insert_multi("people", rows)
    assert conn.execute("SELECT count(*), sum(id), max(name) FROM people").fetchone() == (500, 125250, "p99")
    stmt = conn.cls_statement(conn, "SELECT name FROM people WHERE id = ?", prepare=True)
    stmt.execute_prepared([(7,)])
    assert stmt.fetchall() == [("p7",)]
    stmt.close()
