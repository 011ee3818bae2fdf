"""`accelsql serve` with clients nobody here wrote: ADBC's Flight SQL driver (DB-API) and
``accelsql.connect("grpc://…")``, from this process and from other OS processes. The server is
the real binary (``ACCELSQL_BIN``, else target/debug/accelsql), on one simulated GPU."""

import datetime
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from multiprocessing import get_context
from pathlib import Path

import pyarrow as pa
import pytest

import accelsql

adbc_flightsql = pytest.importorskip("adbc_driver_flightsql.dbapi") if not os.environ.get("CI") else __import__(
    "adbc_driver_flightsql.dbapi", fromlist=["dbapi"]
)
import adbc_driver_manager  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "alice", "wonder land"


def _binary() -> str:
    path = os.environ.get("ACCELSQL_BIN") or str(ROOT / "target" / "debug" / "accelsql")
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail(f"the accelsql binary is missing at {path} (build it: cargo build -p accelsql-cli)")
        pytest.skip(f"SKIPPED: no accelsql binary at {path}")
    return path


class Server:
    """A running `accelsql serve`; stopped with SIGTERM."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        binary = _binary()
        self.users = tmp / "users"
        if not self.users.exists():
            subprocess.run(
                [binary, "serve", "add-user", "--users", str(self.users), USER, "--rounds", "1000"],
                input=PASSWORD + "\n",
                text=True,
                check=True,
                capture_output=True,
            )
        self.log = open(tmp / "server.log", "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--simulated-gpus", "1",
             "--users", str(self.users), "--data-dir", str(tmp / "data"), *extra],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        line = self.proc.stdout.readline()
        match = re.match(r"listening: (grpc://\S+)", line)
        assert match, f"first line: {line!r}"
        self.url = match.group(1)

    def connect(self, **kwargs):
        return adbc_flightsql.connect(
            self.url, db_kwargs={"username": USER, "password": PASSWORD}, autocommit=True, **kwargs
        )

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        finally:
            self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve"))
    yield s
    assert s.stop() == 0, s.log_text()


def _gpu_script(name: str, seconds: float) -> str:
    return textwrap.dedent(f"""
        CREATE OR REPLACE PYTHON3 SCALAR SCRIPT {name}(id INTEGER)
        EMITS (id INT, start_time DOUBLE, end_time DOUBLE) AS
        %perInstanceRequiredAcceleratorDevices GpuNvidia;
        import time
        def run(ctx):
            start = time.time()
            time.sleep({seconds})
            ctx.emit(ctx.id, start, time.time())
        /
        """)


def test_adbc_dbapi_runs_queries_parameters_ddl_and_metadata(server):
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute("CREATE TABLE fruit(name VARCHAR, n BIGINT)")
        cur.execute("INSERT INTO fruit VALUES ('apple', 3), ('pear', 5)")
        cur.execute("SELECT name, n FROM fruit WHERE n > $1 ORDER BY name", parameters=(1,))
        assert cur.fetchall() == [("apple", 3), ("pear", 5)]
        cur.execute("SELECT sum(n) AS total FROM fruit")
        table = cur.fetch_arrow_table()
        assert table.column(0).to_pylist() == [8]
        cur.execute("SELECT $1 || '!' AS s", parameters=("it's",))
        assert cur.fetchone() == ("it's!",)
        # Metadata RPCs.
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "accelsql"
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        tables = [
            t["table_name"]
            for catalog in objects
            for schema in catalog["catalog_db_schemas"] or []
            for t in schema["db_schema_tables"] or []
        ]
        assert "fruit" in tables
        assert conn.adbc_get_table_schema("fruit").names == ["name", "n"]
        # Settings and EXPLAIN.
        cur.execute("SET datafusion.execution.batch_size = 4096")
        cur.execute("EXPLAIN SELECT * FROM fruit")
        assert cur.fetchall()
        cur.close()


def test_script_ddl_keeps_its_semicolons_and_slashes(server):
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT ratio(a DOUBLE, b DOUBLE) RETURNS DOUBLE AS\n"
            "def run(ctx):\n"
            "    x = ctx.a; y = ctx.b\n"
            "    return x / y\n"
            "/\n"
        )
        cur.execute("SELECT ratio(9, 2) AS r")
        assert cur.fetchall() == [(4.5,)]
        cur.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs scripts as itself unless it is root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no system Python for nobody")
def test_a_server_run_as_root_runs_scripts_as_an_unprivileged_user(tmp_path, monkeypatch):
    # The system's Python, which any user may run (this suite's may live in root's home).
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    server = Server(tmp_path)
    secret = tmp_path / "root-only"
    secret.write_text("the server's secret")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    try:
        _scripts_run_as_nobody(server, secret)
    finally:
        assert server.stop() == 0, server.log_text()


def test_a_server_whose_unprivileged_user_cannot_run_python_says_so(server):
    log = server.log_text()
    if os.geteuid() != 0:
        assert "run as OS user" not in log
    else:
        assert "run as OS user nobody" in log or "WARNING: script workers run as root" in log, log


def _scripts_run_as_nobody(server, secret):
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT whoami_srv(path VARCHAR(200)) "
            "RETURNS VARCHAR(200) AS\n"
            "import os\n"
            "def run(ctx):\n"
            "    try:\n"
            "        open(ctx.path).read()\n"
            "        got = 'read'\n"
            "    except PermissionError:\n"
            "        got = 'denied'\n"
            "    return '%d %s' % (os.getuid(), got)\n/"
        )
        cur.execute(f"SELECT whoami_srv('{secret}')")
        uid, got = cur.fetchone()[0].split()
    import pwd
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        nobody = 65534
    assert (int(uid), got) == (nobody, "denied")
    assert "run as OS user nobody" in server.log_text()


def test_wrong_password_is_refused(server):
    with pytest.raises(adbc_driver_manager.Error) as info:
        conn = adbc_flightsql.connect(
            server.url, db_kwargs={"username": USER, "password": "nope"}, autocommit=True
        )
        try:
            conn.cursor().execute("SELECT 1")
        finally:
            conn.close()
    assert "28000" in str(info.value) or "nauthenticated" in str(info.value)


def test_22069_arrives_with_its_code_readable(server):
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT needs_gpu() RETURNS INT AS\n"
            "%perInstanceRequiredAcceleratorDevices GpuNvidia;\n"
            "def run(ctx):\n    return 1\n/\n"
        )
        with pytest.raises(adbc_driver_manager.Error) as info:
            cur.execute("SELECT needs_gpu() AS a, needs_gpu() + 1 AS b")
            cur.fetchall()
        details = dict(info.value.details or [])
        code = details.get("x-accelsql-code")
        text = str(info.value)
        assert (code is not None and code.strip() in (b"22069", "22069")) or "[22069]" in text, (details, text)
        # The session goes on.
        cur.execute("SELECT needs_gpu() AS a")
        assert cur.fetchall() == [(1,)]
        cur.close()


def test_deep_statements_are_answered_or_refused_and_the_server_goes_on(server):
    # Chains of a few hundred operators overflowed a 2 MiB worker stack and aborted the
    # process; now they are answered, and far deeper ones get 54001.
    with server.connect() as conn:
        cur = conn.cursor()
        for shape in (
            "SELECT 1" + " + 1" * 400,
            "SELECT count(*) FROM (VALUES (1)) v(a) WHERE " + " OR ".join(["a = 2"] * 400),
            "SELECT 1 AS x" + " UNION ALL SELECT 1" * 400,
        ):
            cur.execute(shape)
            assert len(cur.fetchall()) >= 1
        for shape in ("SELECT 1" + " + 1" * 50_000, "SELECT " + "(" * 50_000 + "1" + ")" * 50_000):
            with pytest.raises(adbc_driver_manager.Error) as info:
                cur.execute(shape)
                cur.fetchall()
            details = dict(info.value.details or [])
            code = details.get("x-accelsql-code")
            assert (code is not None and code.strip() in (b"54001", "54001")) or "54001" in str(info.value)
        cur.execute("SELECT 2")
        assert cur.fetchall() == [(2,)]
        cur.close()
    assert server.proc.poll() is None


def test_accelsql_connect_speaks_to_the_server(server):
    with accelsql.connect(server.url, user=USER, password=PASSWORD, lower_ident=True) as conn:
        conn.execute("CREATE TABLE nums(x DOUBLE) AS VALUES (1.0), (2.0), (NULL)")
        assert conn.execute("SELECT x * 2 AS y FROM nums ORDER BY x").fetchall() == [
            (2.0,), (4.0,), (None,)]
        pd = pytest.importorskip("pandas")
        df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None]})
        assert conn.import_from_pandas(df, "imported") == 3
        assert conn.import_from_pandas(df, "imported") == 3  # appends
        out = conn.export_to_pandas("SELECT a, b FROM imported ORDER BY a, b")
        assert out["a"].tolist() == [1, 1, 2, 2, 3, 3]
        assert conn.export_to_arrow("imported").num_rows == 6
        assert conn.execute("SELECT ? + 1", [41]).fetchone()[0] == 42
        stmt = conn.execute("INSERT INTO nums VALUES (5.0)")
        assert stmt.rowcount() == 1
        assert conn.gpu_count == 1
        with pytest.raises(accelsql.AccelsqlError) as info:
            conn.execute("SELEKT 1")
        assert info.value.code == "42000"
        assert info.value.message.startswith("SQL error") and "InvalidArgument;" not in info.value.message, info.value.message
        with pytest.raises(accelsql.AccelsqlError) as info:
            conn.register_udf(lambda x: x, name="f", inputs=["DOUBLE"], returns="DOUBLE")
        assert info.value.code == "0A000"
        # A connection is its own session: it sees the server's tables, not another's
        # temporary ones.
        conn.execute("CREATE TEMPORARY TABLE mine AS SELECT 1 AS x")
        with accelsql.connect(server.url, user=USER, password=PASSWORD, lower_ident=True) as other:
            assert other.execute("SELECT count(*) FROM nums").fetchval() == 4
            with pytest.raises(accelsql.AccelsqlError):
                other.execute("SELECT * FROM mine")
    with pytest.raises(accelsql.AccelsqlError) as info:
        accelsql.connect(server.url, user=USER, password="bad").execute("SELECT 1")
    assert info.value.code == "28000"


def _run_long_gpu(args):
    """In another OS process (the notebook's pool worker): one connection, one GPU statement."""
    url, ident, name = args
    with accelsql.connect(url, user=USER, password=PASSWORD, lower_ident=True) as conn:
        return conn.execute(f"SELECT {name}({ident})").fetchall()


def test_two_processes_gpu_calls_take_turns_in_arrival_order(server):
    with accelsql.connect(server.url, user=USER, password=PASSWORD) as conn:
        conn.execute(_gpu_script("long_running_gpu_srv", 1.5))
    ctx = get_context("spawn")
    with ctx.Pool(2) as pool:
        first = pool.apply_async(_run_long_gpu, ((server.url, 1, "long_running_gpu_srv"),))
        time.sleep(0.5)
        second = pool.apply_async(_run_long_gpu, ((server.url, 2, "long_running_gpu_srv"),))
        (a,), (b,) = first.get(timeout=120), second.get(timeout=120)
    assert a[0] == 1 and b[0] == 2
    # Serialized and FIFO: the second started after the first ended.
    assert b[1] >= a[2] - 0.01, (a, b)
    print("START/END", [datetime.datetime.fromtimestamp(t).time() for t in (a[1], a[2], b[1], b[2])])


KILLED_CLIENT = r"""
import sys, time
import adbc_driver_flightsql.dbapi as flightsql
conn = flightsql.connect(sys.argv[1], db_kwargs={"username": sys.argv[2], "password": sys.argv[3]}, autocommit=True)
cur = conn.cursor()
cur.execute("SET datafusion.execution.batch_size = 1")
cur.execute("SELECT slow_rows(id) FROM (SELECT CAST(value AS INT) AS id FROM generate_series(1, 200))")
reader = cur.fetch_record_batch()
reader.read_next_batch()
print("streaming", flush=True)
time.sleep(600)
"""


def test_a_killed_client_frees_the_gpu_for_the_others(server):
    with accelsql.connect(server.url, user=USER, password=PASSWORD) as conn:
        conn.execute(_gpu_script("slow_rows", 0.1))
        conn.execute(
            "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT quick_gpu() RETURNS INT AS\n"
            "%perInstanceRequiredAcceleratorDevices GpuNvidia;\n"
            "def run(ctx):\n    return 7\n/\n"
        )
    victim = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, server.url, USER, PASSWORD],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = victim.stdout.readline()
        assert line.strip() == "streaming", victim.stderr.read()
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        started = time.monotonic()
        with accelsql.connect(server.url, user=USER, password=PASSWORD) as conn:
            assert conn.execute("SELECT quick_gpu()").fetchone()[0] == 7
        took = time.monotonic() - started
        # The victim's statement had ~20 s left; its lease went with its connection.
        assert took < 8, took
    finally:
        if victim.poll() is None:
            victim.kill()


def test_cancel_stops_a_running_statement(server):
    with accelsql.connect(server.url, user=USER, password=PASSWORD) as conn:
        conn.execute(_gpu_script("slow_rows_c", 0.1))
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute("SET datafusion.execution.batch_size = 1")
        timer = threading.Timer(1.0, cur.adbc_cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(adbc_driver_manager.Error):
            cur.execute("SELECT slow_rows_c(id) FROM (SELECT CAST(value AS INT) AS id FROM generate_series(1, 300))")
            cur.fetchall()
        assert time.monotonic() - started < 20
        timer.join()
        cur.close()
    # The GPU is free again.
    with accelsql.connect(server.url, user=USER, password=PASSWORD) as conn:
        started = time.monotonic()
        conn.execute(_gpu_script("after_cancel", 0.0))
        assert conn.execute("SELECT after_cancel(1)").fetchone()[0] == 1
        assert time.monotonic() - started < 8


def test_the_log_has_a_line_per_statement(server):
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT 41 + 1 AS logged_statement")
        cur.fetchall()
        cur.close()
    deadline = time.monotonic() + 5
    while "logged_statement" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    line = next(l for l in server.log_text().splitlines() if "logged_statement" in l)
    # User names have one (upper-case) form.
    assert re.search(r"session=\d+ user=ALICE stmt=\d+ id=\d+ ms=[\d.]+ rows=1 ", line), line
    assert "outcome=ok" in line


def test_off_loopback_the_server_needs_tls_or_stays_on_loopback(tmp_path):
    binary = _binary()
    # Its token would cross the network in clear text.
    out = subprocess.run(
        [binary, "serve", "--listen", "0.0.0.0:0", "--quiet"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    assert "--allow-cleartext-passwords" in out.stderr, out.stderr
    # No authentication at all is for loopback only.
    out = subprocess.run(
        [binary, "serve", "--listen", "0.0.0.0:0", "--no-auth", "--quiet"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert "loopback" in out.stderr, out.stderr


def test_without_users_clients_log_in_with_the_servers_token(tmp_path):
    binary = _binary()
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--simulated-gpus", "0", "--data-dir", str(data), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        url = re.match(r"listening: (grpc://\S+)", proc.stdout.readline()).group(1)
        token = re.match(r"token: ([0-9a-f]{64})$", proc.stdout.readline().strip()).group(1)
        # Also written owner-only into the data directory, as Jupyter does.
        token_file = data / "server-token"
        assert token_file.read_text().strip() == token
        assert token_file.stat().st_mode & 0o777 == 0o600
        with accelsql.connect(url, password=token) as conn:
            assert conn.execute("SELECT 6 * 7 AS x").fetchone()[0] == 42
        with pytest.raises(accelsql.AccelsqlError) as err:
            accelsql.connect(url, user="anyone", password="not-the-token").execute("SELECT 1")
        assert err.value.code == "28000"
        with pytest.raises(accelsql.AccelsqlError) as err:
            accelsql.connect(url).execute("SELECT 1")
        assert err.value.code == "28000"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_the_notebook_example_runs_against_the_server(server):
    """examples/gpu_resource_considerations.py --processes --server: the notebook's two
    connections from two OS processes, clients of one server, serialized by its lease queue."""
    example = ROOT / "examples" / "gpu_resource_considerations.py"
    out = subprocess.run(
        [sys.executable, str(example), "--processes", "--server", server.url, "--user", USER,
         "--password", PASSWORD],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert "=> serialized" in out.stdout, out.stdout
    assert "ERROR [22069]" in out.stdout, out.stdout
    # The driver's "(Status; Operation)" suffix is not part of the message.
    assert "InvalidArgument;" not in out.stdout, out.stdout


def test_a_server_on_a_cluster_spreads_queries_over_its_nodes(tmp_path):
    """`accelsql serve --cluster`: ADBC clients unchanged, queries run on a local cluster's 3
    executors (one Parquet file each), and stopping it stops every process."""
    binary = _binary()
    cluster = subprocess.Popen(
        [binary, "cluster", "local", "--executors", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    server = None
    try:
        line = cluster.stdout.readline()
        match = re.match(r"scheduler: (\S+)", line)
        assert match, f"first line: {line!r}"
        # The cluster's own secret; the node count comes from its scheduler.
        line = cluster.stdout.readline()
        secret = re.match(r"secret-file: (\S+)", line)
        assert secret, f"second line: {line!r}"
        server = Server(tmp_path, "--cluster", match.group(1), "--cluster-secret-file", secret.group(1))
        data = tmp_path / "parts"
        data.mkdir()
        with server.connect() as conn:
            cur = conn.cursor()
            for i, n in enumerate([10, 20, 30]):
                cur.execute(
                    f"COPY (SELECT value AS x FROM generate_series(1, {n})) "
                    f"TO '{data}/p{i}.parquet' STORED AS PARQUET"
                )
                # Read the row count: the statement runs as its result streams, and the next
                # execute would close (cancel) a result nobody read.
                assert cur.fetchall() == [(n,)]
            cur.execute(f"SELECT iproc() AS node, nproc() AS nodes, count(*) AS n FROM '{data}/' GROUP BY 1, 2 ORDER BY 1")
            rows = cur.fetchall()
            assert [r[0] for r in rows] == [0, 1, 2], rows
            assert {r[1] for r in rows} == {3}
            assert sum(r[2] for r in rows) == 60
            cur.close()
        assert server.stop() == 0, server.log_text()
        server = None
    finally:
        if server is not None:
            server.stop()
        cluster.send_signal(signal.SIGTERM)
        assert cluster.wait(timeout=20) == 0


def test_dbapi_cursor_over_the_wire(server):
    # PEP 249 through a server: the same Cursor as in process.
    with accelsql.connect(server.url, user=USER, password=PASSWORD, lower_ident=True) as conn:
        cur = conn.cursor()
        cur.execute("CREATE TABLE wire (id BIGINT, label VARCHAR(10))")
        assert cur.description is None
        cur.executemany("INSERT INTO wire VALUES (?, ?)", [(i, f"w{i}") for i in range(30)])
        assert cur.rowcount == 30
        cur.execute("SELECT id, label FROM wire WHERE id < :n ORDER BY id", {"n": 3})
        assert [c[0] for c in cur.description] == ["id", "label"]
        assert cur.description[0][1] == accelsql.NUMBER and cur.description[1][1] == accelsql.STRING
        assert cur.fetchmany(2) == [(0, "w0"), (1, "w1")]
        assert cur.fetch_arrow_table().column("id").to_pylist() == [2]
        with pytest.raises(accelsql.ProgrammingError) as info:
            cur.execute("SELECT * FROM no_such_wire_table")
        assert info.value.sqlstate.startswith("42")
        conn.execute(_gpu_script("slow_rows_dbapi", 0.1))
        cur.execute("SET datafusion.execution.batch_size = 1")
        timer = threading.Timer(1.0, cur.cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(accelsql.Error):
            cur.execute(
                "SELECT slow_rows_dbapi(id) FROM (SELECT CAST(value AS INT) AS id FROM generate_series(1, 300))"
            )
        timer.join()
        assert time.monotonic() - started < 20
        assert cur.execute("SELECT 1").fetchone() == (1,)


def test_sqlalchemy_over_the_wire(server):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pd = pytest.importorskip("pandas")
    host, port = server.url.split("://", 1)[1].rsplit(":", 1)
    engine = sqlalchemy.create_engine(f"accelsql+grpc://{USER}:{PASSWORD}@{host}:{port}")
    try:
        pd.DataFrame({"k": [1, 2], "v": ["a", "b"]}).to_sql("sa_wire", engine, index=False)
        assert pd.read_sql("SELECT v FROM sa_wire ORDER BY k", engine)["v"].tolist() == ["a", "b"]
        assert sqlalchemy.inspect(engine).has_table("sa_wire")
    finally:
        engine.dispose()
