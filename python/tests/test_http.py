"""`accelsql serve --http`: the operator's endpoint — Prometheus metrics read with Prometheus' own
text parser, the probes, the login it asks for, the dashboard's page and data while GPU statements
wait on each other, and ending a session from it. The server is the real binary, on two simulated
GPUs, on 127.0.0.1 only."""

import base64
import contextlib
import json
import os
import re
import subprocess
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

# Prometheus' own parser of the OpenMetrics text format the endpoint serves (strict: it refuses
# what a Prometheus server would).
prometheus_parser = pytest.importorskip("prometheus_client.openmetrics.parser") if not os.environ.get("CI") else __import__(
    "prometheus_client.openmetrics.parser", fromlist=["parser"]
)
adbc_flightsql = pytest.importorskip("adbc_driver_flightsql.dbapi") if not os.environ.get("CI") else __import__(
    "adbc_driver_flightsql.dbapi", fromlist=["dbapi"]
)


class HttpServer:
    def __init__(self, binary, tmp):
        self.log = open(tmp / "server.log", "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--simulated-gpus", "2",
             "--data-dir", str(tmp / "data"), "--log-format", "json"],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        lines = [self.proc.stdout.readline() for _ in range(3)]
        self.url = re.match(r"listening: (\S+)", lines[0]).group(1)
        self.token = re.match(r"token: (\S+)", lines[1]).group(1)
        self.http = "http://" + re.match(r"http: (\S+)", lines[2]).group(1)

    def connect(self, user="sys", password=None):
        return adbc_flightsql.connect(
            self.url, db_kwargs={"username": user, "password": password or self.token}, autocommit=True
        )

    def get(self, path, auth="token", method="GET", headers=None):
        """(status, headers, body) of a request; `auth`: "token" (basic), "bearer", None, or (user, pw)."""
        request = urllib.request.Request(self.http + path, method=method, headers=headers or {})
        if auth == "token":
            auth = ("sys", self.token)
        if auth == "bearer":
            request.add_header("Authorization", "Bearer " + self.token)
        elif auth:
            pair = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", "Basic " + pair)
        try:
            with urllib.request.urlopen(request, timeout=20) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    def log_text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        finally:
            self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, accelsql_binary):
    s = HttpServer(accelsql_binary, tmp_path_factory.mktemp("http"))
    yield s
    assert s.stop() == 0, s.log_text()


def hold_and_wait(server, seconds):
    """Two GPU statements of two sessions on a GPU-exclusive server: one holds the lease for
    `seconds`, the other waits for it. Their outcomes (rows, or the exception), and the threads."""
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute(textwrap.dedent("""
            CREATE OR REPLACE PYTHON3 SCALAR SCRIPT hold_gpu(s DOUBLE) RETURNS DOUBLE AS
            %perInstanceRequiredAcceleratorDevices GpuNvidia;
            import time
            def run(ctx):
                time.sleep(ctx.s)
                return ctx.s
            /
            """))
    outcomes = {}

    def run(name, seconds):
        try:
            with server.connect() as conn:
                cur = conn.cursor()
                cur.execute(f"SELECT hold_gpu({seconds})")
                outcomes[name] = cur.fetchall()
        except Exception as e:  # the killed one
            outcomes[name] = e

    holder = threading.Thread(target=run, args=("holder", seconds))
    holder.start()
    time.sleep(0.5)
    waiter = threading.Thread(target=run, args=("waiter", 1))
    waiter.start()
    return outcomes, holder, waiter


@contextlib.contextmanager
def streaming(server, sql):
    """A reader of `sql`'s result, streaming from the server while the test reads it batch by
    batch; its cursor and connection are closed afterwards (a stopped reader's close may fail)."""
    conn = server.connect()
    cur = conn.cursor()
    try:
        cur.execute(sql)
        yield cur.fetch_record_batch()
    finally:
        try:
            cur.close()
        except Exception:  # the stopped statement's reader
            pass
        conn.close()


def assert_stopped(reader):
    """The rest of `reader` fails with the statement's 57014."""
    with pytest.raises(Exception) as stopped:
        for _ in range(100_000):
            reader.read_next_batch()
    assert "57014" in str(stopped.value), stopped.value


def families(text):
    return {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}


def sample(fams, family, name, **labels):
    for s in fams[family].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_probes_answer_without_a_login_and_everything_else_asks_for_one(server):
    assert server.get("/healthz", auth=None)[0] == 200
    assert server.get("/readyz", auth=None)[0] == 200
    for path in ["/metrics", "/", "/api/state"]:
        status, headers, body = server.get(path, auth=None)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Basic"), path
        assert body.startswith("[28000]"), body
    status, _, body = server.get("/metrics", auth=("sys", "not the token"))
    assert status == 401 and "wrong user or password" in body
    assert server.get("/metrics", auth="bearer")[0] == 200
    # A user without SELECT ANY DICTIONARY may log in, but not monitor.
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute('CREATE USER watcher IDENTIFIED BY "look here"')
        cur.execute("GRANT CREATE SESSION TO watcher")
    status, _, body = server.get("/api/state", auth=("watcher", "look here"))
    assert status == 403 and "SELECT ANY DICTIONARY" in body, body
    # Abuse of the HTTP port leaves the data port alone.
    status, _, _ = server.get("/metrics", auth=None, headers={"X-Big": "x" * 1_000_000})
    assert status in (400, 413, 431), status
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT 41 + 1")
        assert cur.fetchone() == (42,)


def test_metrics_parse_as_prometheus_text_and_add_up(server):
    with server.connect() as conn:
        cur = conn.cursor()
        for i in range(5):
            cur.execute(f"SELECT {i} AS n")
            cur.fetchall()
        with pytest.raises(Exception):
            cur.execute("SELECT * FROM no_such_table")
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute(textwrap.dedent("""
            CREATE OR REPLACE PYTHON3 SCALAR SCRIPT on_gpu_or_cpu(x DOUBLE) RETURNS DOUBLE AS
            %perInstanceRequiredAcceleratorDevices GpuNvidia|None;
            def run(ctx):
                return ctx.x
            /
            """))
        cur.execute("SELECT on_gpu_or_cpu(1), 2 AS y")
        cur.fetchall()
    before = families(server.get("/metrics")[2])
    server.get("/metrics", auth=("sys", "wrong"))
    with server.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT 1")
        cur.fetchall()
    status, headers, text = server.get("/metrics")
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    after = families(text)
    # Counters only grow; the histogram counts every statement that ended.
    ok_before = sample(before, "accelsql_statements", "accelsql_statements_total", outcome="ok")
    ok_after = sample(after, "accelsql_statements", "accelsql_statements_total", outcome="ok")
    assert ok_after >= ok_before + 1 and ok_before >= 5
    errors = [s for s in after["accelsql_statements"].samples if s.labels["outcome"] == "error"]
    assert errors and all(re.fullmatch(r"[0-9A-Z]{5}", s.labels["code"]) for s in errors), errors
    ended = sum(s.value for s in after["accelsql_statements"].samples if s.name.endswith("_total"))
    count = sample(after, "accelsql_statement_duration_seconds", "accelsql_statement_duration_seconds_count")
    assert count == ended
    failures = sample(after, "accelsql_login_failures", "accelsql_login_failures_total")
    assert failures >= sample(before, "accelsql_login_failures", "accelsql_login_failures_total") + 1
    # Each simulated device's memory, in bytes.
    totals = [s for s in after["accelsql_device_memory_bytes"].samples if s.labels["kind"] == "total"]
    assert sorted(s.labels["device"] for s in totals) == ["0", "1"] and all(s.value > 0 for s in totals)
    # The lease queue's requests and the spill.
    assert "accelsql_lease_requests" in after and "accelsql_spilled_bytes" in after
    # The preferred-GPU call ran on a (simulated) GPU, in a script worker the engine started.
    assert sample(after, "accelsql_udf_calls", "accelsql_udf_calls_total", placement="gpu", reason="preferred") >= 1
    started = sample(after, "accelsql_script_worker_events", "accelsql_script_worker_events_total", event="started")
    assert started >= 1, after["accelsql_script_worker_events"].samples
    assert sample(after, "accelsql_memory_pool_bytes", "accelsql_memory_pool_bytes", kind="reserved") >= 0
    # The statement log is one JSON object a line.
    lines = [json.loads(l) for l in server.log_text().splitlines() if l.startswith("{")]
    assert any(l["outcome"] == "ok" and l["sql"] == "SELECT 1" for l in lines), lines[-3:]


def test_the_dashboard_shows_the_holder_and_the_waiter_and_ends_a_session(server):
    status, headers, page = server.get("/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    # Served whole: no request leaves for another host.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "external reference"
    assert "http://" not in page and "https://" not in page
    outcomes, holder, waiter = hold_and_wait(server, 4)
    deadline = time.time() + 15
    leases = []
    while time.time() < deadline:
        state = json.loads(server.get("/api/state")[2])
        leases = state["leases"]
        if sorted(l["state"] for l in leases) == ["holding", "waiting"]:
            break
        time.sleep(0.2)
    assert sorted(l["state"] for l in leases) == ["holding", "waiting"], leases
    assert all(l["statement"] for l in leases), [l["statement"] for l in leases]
    assert {l["session"] for l in leases} and all(l["user"] == "SYS" for l in leases), leases
    assert len(state["devices"]) == 2
    waiting = next(l for l in leases if l["state"] == "waiting")
    assert float(waiting["wait_ms"]) >= 0
    # End the waiter's session from the dashboard: its statement fails with a coded error.
    status, _, body = server.get(f"/api/kill?session={waiting['session']}", method="POST")
    assert status == 200, body
    waiter.join(30)
    holder.join(30)
    assert isinstance(outcomes["waiter"], Exception), outcomes
    assert re.search(r"\[\w{5}\]", str(outcomes["waiter"])), outcomes["waiter"]
    assert outcomes["holder"] == [(4.0,)]
    status, _, body = server.get("/api/kill?session=notanumber", method="POST")
    assert status == 400 and body.startswith("[22023]")


def test_slow_clients_and_floods_on_the_http_port_leave_both_ports_serving(server):
    import socket

    host, port = server.http[len("http://"):].rsplit(":", 1)
    # Slow clients: half a request header each, then nothing (closed after the header timeout).
    slow = []
    for _ in range(40):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bas")
        slow.append(s)
    try:
        # Meanwhile the endpoint answers, refusals with their codes, and the data port serves.
        assert server.get("/healthz", auth=None)[0] == 200
        status, _, body = server.get("/metrics", auth=("sys", "wrong token"))
        assert status == 401 and body.startswith("[28000]"), body
        assert server.get("/metrics", auth="bearer")[0] == 200
        status, _, _ = server.get("/healthz", auth=None, headers={"X-Big": "y" * 40_000})
        assert status == 431, status
        with server.connect() as conn:
            cur = conn.cursor()
            cur.execute("SELECT 6 * 7")
            assert cur.fetchone() == (42,)
    finally:
        for s in slow:
            s.close()


def test_a_running_statement_is_listed_with_its_rows_and_stopped_from_the_endpoint(server):
    with streaming(server, "SELECT value FROM generate_series(1, 200000000)") as reader:
        seen = []
        listed = []
        deadline = time.time() + 30
        while time.time() < deadline and len(set(seen)) < 2:
            reader.read_next_batch()
            state = json.loads(server.get("/api/state")[2])
            listed = [s for s in state["statements"] if "generate_series" in s["sql"]]
            if listed:
                seen.append(listed[0]["rows"])
            time.sleep(0.2)
        # Its rows so far grow as the client reads.
        assert len(set(seen)) >= 2 and seen == sorted(seen), seen
        running = listed[0]
        assert running["user"] and running["elapsed_ms"] >= 0, running
        status, _, body = server.get(
            f"/api/cancel?session={running['session']}&statement={running['number']}", method="POST"
        )
        assert status == 200, body
        assert_stopped(reader)
        state = json.loads(server.get("/api/state")[2])
        assert not [s for s in state["statements"] if "generate_series" in s["sql"]]
        status, _, body = server.get("/api/cancel?session=1&statement=999999", method="POST")
        assert status == 404 and body.startswith("[42704]"), body
