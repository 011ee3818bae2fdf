"""PEP 249 (DB-API 2.0): the published compliance suite (``dbapi-compliance`` from PyPI, Stuart
Bishop's ``dbapi20.py``) run against the package, and what it leaves out: parameter styles,
``executemany`` as one statement, ``description`` type codes, the exception classes by SQLSTATE,
``cancel()`` from another thread, and the Arrow-native fetches."""

import datetime
import decimal
import threading
import time

import pyarrow as pa
import pytest

import accelsql

dbapi20 = pytest.importorskip("dbapi20")


class TestCompliance(dbapi20.DatabaseAPI20Test):
    """The suite as published; the two tests it leaves to drivers are below."""

    driver = accelsql
    connect_args = ()
    connect_kw_args = {"simulated_gpus": 2, "lower_ident": True}

    def test_nextset(self):
        # One result per execute: nextset() says there is no other.
        con = self._connect()
        try:
            cur = con.cursor()
            cur.execute("SELECT 1")
            assert cur.nextset() is None
        finally:
            con.close()

    def test_non_idempotent_close(self):
        # Deliberately not as the suite wants (it says "reasonable persons differ"): closing a
        # closed connection does nothing, as in sqlite3 and psycopg, so that `with connect()`
        # after an explicit close() does not raise. Using it after close() raises.
        con = self._connect()
        con.close()
        con.close()
        with pytest.raises(accelsql.InterfaceError):
            con.cursor()

    def test_setoutputsize(self):
        # Accepted and ignored: results come whole.
        con = self._connect()
        try:
            cur = con.cursor()
            cur.setoutputsize(10, 0)
            cur.execute("SELECT 'longer than ten characters'")
            assert cur.fetchone() == ("longer than ten characters",)
        finally:
            con.close()


@pytest.fixture
def cur(conn):
    with conn.cursor() as c:
        yield c


def test_module_globals():
    assert accelsql.apilevel == "2.0"
    assert accelsql.threadsafety == 2
    assert accelsql.paramstyle == "qmark"


def test_every_placeholder_style_binds_by_the_engine(cur):
    cur.execute("CREATE TABLE p (a INT, s VARCHAR(20))")
    cur.execute("INSERT INTO p VALUES (?, ?)", (1, "it's ?"))
    cur.execute("INSERT INTO p VALUES (:1, :2)", [2, "b"])
    cur.execute("INSERT INTO p VALUES ($2, $1)", ["c", 3])
    cur.execute("INSERT INTO p VALUES (:n, :s)", {"n": 4, "s": "d"})
    cur.execute("INSERT INTO p VALUES ({n}, {s})", {"n": 5, "s": "e"})
    # A :1 used twice binds one value; text in literals and ::casts is left alone.
    cur.execute("SELECT a, s, ':x ?', a::VARCHAR AS v FROM p WHERE a = :1 OR a + :1 = 6 ORDER BY a", [3])
    assert cur.fetchall() == [(3, "c", ":x ?", "3")]
    cur.execute("SELECT a, s FROM p ORDER BY a")
    assert cur.fetchall() == [(1, "it's ?"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]


def test_parameters_that_do_not_fit_are_programming_errors(cur):
    with pytest.raises(accelsql.ProgrammingError) as e:
        cur.execute("SELECT ?, ?", (1,))
    assert e.value.sqlstate == "07001"
    with pytest.raises(accelsql.ProgrammingError):
        cur.execute("SELECT ?", (1, 2))
    with pytest.raises(accelsql.ProgrammingError):
        cur.execute("SELECT :missing", {"other": 1})
    with pytest.raises(accelsql.ProgrammingError):
        cur.execute("SELECT ?, :1", (1,))
    # The cursor stays usable.
    assert cur.execute("SELECT 1").fetchone() == (1,)


def test_executemany_inserts_all_rows_in_few_statements(cur):
    cur.execute("CREATE TABLE many (id BIGINT, label VARCHAR(10))")
    rows = [(i, f"r{i}") for i in range(2500)]
    cur.executemany("INSERT INTO many VALUES (?, ?)", rows)
    assert cur.rowcount == 2500
    cur.execute("SELECT count(*), sum(id), max(label) FROM many")
    assert cur.fetchone() == (2500, sum(range(2500)), "r999")
    # Other statements run once per parameter row.
    cur.executemany("UPDATE many SET label = 'x' WHERE id = ?", [(1,), (2,), (99999,)])
    assert cur.rowcount == 2
    cur.executemany("INSERT INTO many VALUES (:id, :l)", [{"id": -1, "l": "n"}])
    assert cur.rowcount == 1


def test_description_type_codes_compare_to_the_type_objects(cur):
    cur.execute(
        "SELECT CAST(1 AS DECIMAL(10,2)) AS d, 1.5e0 AS f, 'x' AS s, DATE '2024-01-02' AS dt, "
        "TIMESTAMP '2024-01-02 03:04:05' AS ts, true AS b, X'00' AS bin"
    )
    d = {c[0]: c for c in cur.description}
    assert all(len(c) == 7 for c in cur.description)
    assert d["d"][1] == accelsql.NUMBER and (d["d"][4], d["d"][5]) == (10, 2)
    assert d["f"][1] == accelsql.NUMBER and d["f"][1] != accelsql.STRING
    assert d["s"][1] == accelsql.STRING
    assert d["dt"][1] == accelsql.DATETIME and d["ts"][1] == accelsql.DATETIME
    assert d["b"][1] == accelsql.NUMBER
    assert d["bin"][1] == accelsql.BINARY
    assert cur.fetchone() == (
        decimal.Decimal("1.00"),
        1.5,
        "x",
        datetime.date(2024, 1, 2),
        datetime.datetime(2024, 1, 2, 3, 4, 5),
        True,
        b"\x00",
    )
    cur.execute("CREATE TABLE ddl_only (a INT)")
    assert cur.description is None and cur.rowcount == -1


def test_errors_are_their_pep249_class_and_keep_the_code(cur):
    with pytest.raises(accelsql.ProgrammingError) as e:
        cur.execute("SELECT * FROM no_such_table")
    assert e.value.code.startswith("42") and e.value.sqlstate == e.value.code
    assert isinstance(e.value, accelsql.AccelsqlError) and isinstance(e.value, accelsql.DatabaseError)
    with pytest.raises(accelsql.DataError):
        cur.execute("SELECT CAST('x' AS INT)")
    cur.execute("CREATE TABLE indexed (a INT)")
    with pytest.raises(accelsql.NotSupportedError) as e:
        cur.execute("CREATE INDEX idx ON indexed (a)")
    assert e.value.code == "0A000"
    with pytest.raises(accelsql.InterfaceError):
        cur.fetchall()  # the last statement failed: no rows to fetch


def test_closed_cursor_and_connection_raise_interface_errors(conn):
    c = conn.cursor()
    c.close()
    c.close()
    with pytest.raises(accelsql.InterfaceError):
        c.execute("SELECT 1")
    other = accelsql.connect(simulated_gpus=2)
    oc = other.cursor()
    other.close()
    with pytest.raises(accelsql.InterfaceError):
        oc.execute("SELECT 1")
    with pytest.raises(accelsql.InterfaceError):
        other.cursor()


def test_commit_and_rollback_are_autocommit_no_ops(conn, cur):
    cur.execute("CREATE TABLE kept (a INT)")
    cur.execute("INSERT INTO kept VALUES (1)")
    conn.rollback()
    conn.commit()
    assert cur.execute("SELECT count(*) FROM kept").fetchone() == (1,)


def test_arrow_native_fetches_hand_over_the_rest(cur):
    cur.execute("SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (3, 'c')) AS t(n, s) ORDER BY n")
    assert cur.fetchone() == (1, "a")
    rest = cur.fetch_arrow_table()
    assert isinstance(rest, pa.Table) and rest.column("n").to_pylist() == [2, 3]
    assert cur.fetchall() == []
    cur.execute("SELECT 1 AS one")
    assert list(cur.fetch_df()["one"]) == [1]
    cur.execute("SELECT 2 AS two")
    assert cur.fetch_record_batch().read_all().column(0).to_pylist() == [2]


def test_polars_through_arrow(cur):
    polars = pytest.importorskip("polars")
    cur.execute("SELECT 1 AS a UNION ALL SELECT 2")
    frame = cur.pl()
    assert isinstance(frame, polars.DataFrame) and sorted(frame["a"].to_list()) == [1, 2]


def test_cancel_from_another_thread_stops_the_statement_and_frees_the_lease(conn, unique):
    name = unique("slow_gpu")
    conn.execute(
        f"""CREATE PYTHON3 SCALAR SCRIPT {name}(x INT) RETURNS INT AS
%perInstanceRequiredAcceleratorDevices GpuNvidia;
import time
def run(ctx):
    time.sleep(30)
    return ctx.x
/"""
    )
    cur = conn.cursor()
    timer = threading.Timer(1.5, cur.cancel)
    timer.start()
    began = time.monotonic()
    with pytest.raises(accelsql.OperationalError) as e:
        cur.execute(f"SELECT {name}(1)")
    timer.join()
    assert e.value.code == "57014"
    assert time.monotonic() - began < 20
    # The lease is released (the statement is dropped on the runtime, at once or nearly).
    deadline = time.monotonic() + 10
    held = "SELECT count(*) FROM accelsql.gpu_leases WHERE state <> 'released'"
    while conn.cursor().execute(held).fetchone() != (0,):
        assert time.monotonic() < deadline, "the cancelled statement kept its GPU lease"
        time.sleep(0.05)
    # The connection goes on.
    assert cur.execute("SELECT 1").fetchone() == (1,)
    conn.execute(f"DROP SCRIPT {name}")


def test_results_show_as_html_tables_in_notebooks(conn):
    st = conn.execute("SELECT 1 AS n, '<b>' AS s, CAST(NULL AS VARCHAR) AS z UNION ALL SELECT 2, 'x', 'y'")
    html = st._repr_html_()
    assert html.startswith("<table>") and "<th>n<br><small>DECIMAL</small></th>" in html
    assert "&lt;b&gt;" in html and "<b>" not in html.replace("<br>", "")
    assert "<i>NULL</i>" in html and "2 rows" in html
    big = conn.execute("SELECT * FROM generate_series(1, 500)")
    assert big._repr_html_().count("<tr>") == 51 and "the first 50 shown" in big._repr_html_()


def test_pandas_read_sql_uses_the_cursor(conn):
    pd = pytest.importorskip("pandas")
    conn.execute("CREATE TABLE rs (a INT, b VARCHAR(5)) AS VALUES (1, 'x'), (2, NULL)")
    import warnings

    with warnings.catch_warnings():
        # pandas names SQLAlchemy and sqlite3 as the connections it tests; a DB-API one works.
        warnings.simplefilter("ignore", UserWarning)
        df = pd.read_sql("SELECT a, b FROM rs WHERE a >= ? ORDER BY a", conn, params=(1,))
    assert list(df.columns) == ["a", "b"]
    assert df["a"].tolist() == [1, 2] and df["b"].tolist()[0] == "x"
