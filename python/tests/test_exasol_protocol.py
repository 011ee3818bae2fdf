"""`accelsql serve --exasol-port`: the real pyexasol driver, unchanged, logs in (RSA-encrypted
password), runs statements and fetches results over Exasol's WebSocket API, on the same engine,
users and sessions as the Flight SQL port."""

import os

import pytest

pyexasol = pytest.importorskip("pyexasol") if not os.environ.get("CI") else __import__("pyexasol")


@pytest.fixture(scope="module")
def server(exasol_server):
    return exasol_server


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
    # A string literal is a CHAR of its length, as on Exasol.
    assert [c["type"] for c in stmt.columns().values()] == ["DECIMAL", "CHAR", "DOUBLE", "DECIMAL"]


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


@pytest.fixture(params=["plain", "compressed", "tls"])
def any_conn(server, request):
    """A connection plain, compressed, or over TLS with compression (the HTTP transport then
    compresses and encrypts its tunnels too)."""
    dsn, token, fingerprint = server
    if request.param == "tls":
        host, port = dsn.rsplit(":", 1)
        c = pyexasol.connect(dsn=f"{host}/{fingerprint}:{port}", user="sys", password=token,
                             encryption=True, compression=True)
    else:
        c = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False,
                             compression=request.param == "compressed")
    yield c
    c.close()


def test_export_to_pandas_and_import_from_pandas_round_trip_every_type(any_conn):
    pd = pytest.importorskip("pandas")
    conn = any_conn
    conn.execute(
        "CREATE OR REPLACE TABLE typed (i DECIMAL(18,0), d DECIMAL(12,2), f DOUBLE, s VARCHAR(100), "
        "b BOOLEAN, dt DATE, ts TIMESTAMP)")
    n = 20_000
    frame = pd.DataFrame({
        "I": range(n),
        "D": [f"{i % 1000}.{i % 100:02d}" for i in range(n)],
        "F": [i / 4 for i in range(n)],
        "S": [None if i % 7 == 0 else f'say "hi", {i}\nnext' for i in range(n)],
        "B": [i % 2 == 0 for i in range(n)],
        "DT": pd.to_datetime("2024-01-01") + pd.to_timedelta([i % 365 for i in range(n)], unit="D"),
        "TS": pd.to_datetime("2024-01-01 10:00:00") + pd.to_timedelta(range(n), unit="s"),
    })
    frame["DT"] = frame["DT"].dt.date
    conn.import_from_pandas(frame, "TYPED")
    # sum() of a DECIMAL(18,0) is a DECIMAL(36,0): beyond 18 digits Exasol sends a string.
    count, total, strings = conn.execute("SELECT count(*), sum(i), count(s) FROM typed").fetchone()
    assert (count, int(total), strings) == (n, n * (n - 1) // 2, n - len(range(0, n, 7)))

    back = conn.export_to_pandas("SELECT * FROM typed ORDER BY i")
    assert list(back.columns) == ["I", "D", "F", "S", "B", "DT", "TS"]
    assert len(back) == n
    assert back["I"].tolist() == list(range(n))
    assert back["F"].tolist() == frame["F"].tolist()
    assert back["S"].where(back["S"].notna(), None).tolist() == frame["S"].tolist()
    assert back["B"].tolist() == frame["B"].tolist()
    assert [f"{x:.2f}" for x in back["D"]] == frame["D"].tolist()
    assert pd.to_datetime(back["TS"]).tolist() == frame["TS"].tolist()
    assert back["DT"].tolist() == [d.isoformat() for d in frame["DT"]]

    # A table by name, and the rows as a list.
    assert conn.export_to_list("TYPED")[0][0] in {str(i) for i in range(n)}


def test_an_import_into_listed_columns_and_with_options(conn):
    conn.execute("CREATE OR REPLACE TABLE listed (a INT, b VARCHAR(10), c INT)")
    conn.import_from_iterable([(1, "x"), (2, None)], "LISTED",
                              import_params={"columns": ["C", "B"]})
    rows = conn.execute("SELECT a, b, c FROM listed ORDER BY c").fetchall()
    assert rows == [(None, "x", 1), (None, None, 2)]
    conn.import_from_iterable([("h1", "h2"), (5, 6)], "LISTED", import_params={"skip": 1, "columns": ["A", "C"]})
    assert conn.execute("SELECT a, c FROM listed WHERE a IS NOT NULL").fetchall() == [(5, 6)]


def test_a_failed_import_loads_nothing_and_says_why(conn):
    conn.execute("CREATE OR REPLACE TABLE strict (a INT)")
    with pytest.raises(Exception) as raised:
        conn.import_from_iterable([(1,), ("not a number",)], "STRICT")
    assert "not a number" in str(raised.value) or "22" in str(raised.value)
    assert conn.execute("SELECT count(*) FROM strict").fetchval() == 0
    assert conn.execute("SELECT 1").fetchval() == 1


def test_a_transfer_without_its_tunnel_is_refused(conn):
    with pytest.raises(pyexasol.ExaQueryError) as raised:
        conn.execute("EXPORT (SELECT 1) INTO CSV AT 'http://127.0.0.1:424242' FILE '000.csv'")
    assert raised.value.code == "08H01"


def test_abort_query_from_another_thread_stops_a_running_statement(server):
    import threading
    import time
    dsn, token, _ = server
    conn = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False)
    conn.set_attr({"feedbackInterval": 1})
    assert conn.attr["feedbackInterval"] == 1
    started = time.monotonic()
    threading.Timer(1.0, conn.abort_query).start()
    with pytest.raises(pyexasol.ExaQueryError) as raised:
        conn.execute("SELECT count(*) FROM generate_series(1, 100000000000) a")
    assert raised.value.code == "57014"
    assert time.monotonic() - started < 30
    assert conn.execute("SELECT 'still here'").fetchval() == "still here"
    conn.close()


def test_result_set_header_offset_and_max_rows(conn):
    conn.execute("CREATE OR REPLACE TABLE big AS SELECT * FROM generate_series(1, 3000)")
    stmt = conn.execute("SELECT value FROM big")
    handle = stmt.result_set_handle
    header = conn.req({"command": "getResultSetHeader", "resultSetHandles": [handle]})
    result = header["responseData"]["results"][0]["resultSet"]
    assert (result["numRows"], result["numRowsInMessage"]) == (3000, 0)
    assert conn.req({"command": "getOffset", "resultSetHandle": handle})["responseData"] == {"rowOffset": 0}
    stmt.close()
    conn.set_attr({"resultSetMaxRows": 10})
    assert len(conn.execute("SELECT value FROM big").fetchall()) == 10
    conn.set_attr({"resultSetMaxRows": 0})


def test_metadata_commands_answer_what_the_session_sees(conn):
    conn.execute("CREATE SCHEMA IF NOT EXISTS meta_s")
    conn.execute("CREATE OR REPLACE TABLE meta_s.meta_t (a INT, b VARCHAR(10))")
    assert conn.meta.schema_exists("META_S")
    assert not conn.meta.schema_exists("NO_SUCH_SCHEMA")
    assert conn.meta.table_exists(("META_S", "META_T"))
    assert not conn.meta.table_exists(("META_S", "NO_SUCH_TABLE"))
    assert "SELECT" in conn.meta.list_sql_keywords()
    assert "META_S" in [r["SCHEMA_NAME"] for r in conn.meta.list_schemas()]
    columns = conn.meta.execute_meta_nosql("getColumns", {"schema": "META_S", "table": "META_T"}).fetchall()
    assert [(c["COLUMN_NAME"], c["ORDINAL_POSITION"]) for c in columns] == [("A", 1), ("B", 2)]
    types = [t["TYPE_NAME"] for t in conn.meta.execute_meta_nosql("getTypeInfo").fetchall()]
    assert "DECIMAL" in types and "VARCHAR" in types
    conn.execute("CREATE OR REPLACE PYTHON3 SCALAR SCRIPT meta_s.twice(x DOUBLE) RETURNS DOUBLE AS\n"
                 "def run(ctx):\n    return ctx.x * 2\n/")
    scripts = conn.meta.execute_meta_nosql("getScripts", {"schema": "META_S"}).fetchall()
    assert [s["SCRIPT_NAME"] for s in scripts] == ["TWICE"]


def test_kill_session_ends_the_others_connection(server):
    dsn, token, _ = server
    victim = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False)
    admin = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False)
    assert victim.execute("SELECT 1").fetchval() == 1
    admin.execute(f"KILL SESSION {victim.session_id()}")
    # The server closed the connection: not a statement's error, the socket's.
    with pytest.raises(pyexasol.ExaError) as raised:
        victim.execute("SELECT 2")
    assert not isinstance(raised.value, pyexasol.ExaQueryError), raised.value
    assert admin.execute("SELECT 3").fetchval() == 3
    admin.close()


def test_declared_column_types_arrive_as_exasol_describes_them(conn):
    conn.execute("CREATE OR REPLACE TABLE declared (v VARCHAR(20), c CHAR(3), d DECIMAL(10,2), n INT, "
                 "ts TIMESTAMP, dt DATE, b BOOLEAN, f DOUBLE, i INTERVAL DAY TO SECOND, "
                 "y INTERVAL YEAR TO MONTH)")
    types = conn.execute("SELECT * FROM declared").columns()
    assert types["V"] == {"type": "VARCHAR", "size": 20, "characterSet": "UTF8"}
    assert types["C"]["type"] == "CHAR" and types["C"]["size"] == 3
    assert types["D"] == {"type": "DECIMAL", "precision": 10, "scale": 2}
    assert types["N"] == {"type": "DECIMAL", "precision": 18, "scale": 0}
    assert types["TS"]["type"] == "TIMESTAMP" and types["TS"]["withLocalTimeZone"] is False
    assert (types["DT"]["type"], types["B"]["type"], types["F"]["type"]) == ("DATE", "BOOLEAN", "DOUBLE")
    assert types["I"]["type"] == "INTERVAL DAY TO SECOND"
    assert types["Y"]["type"] == "INTERVAL YEAR TO MONTH"


def _raw_login(dsn, token, compression=False):
    """A raw WebSocket (pyexasol's own library) logged in as pyexasol does."""
    import base64
    import json
    import websocket
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    ws = websocket.create_connection(f"ws://{dsn}", timeout=20)
    ws.send(json.dumps({"command": "login", "protocolVersion": 3}))
    pem = json.loads(ws.recv())["responseData"]["publicKeyPem"].encode()
    key = serialization.load_pem_public_key(pem)
    password = base64.b64encode(key.encrypt(token.encode(), padding.PKCS1v15())).decode()
    ws.send(json.dumps({"username": "sys", "password": password, "useCompression": compression}))
    assert json.loads(ws.recv())["status"] == "ok"
    return ws


def test_malformed_frames_and_tunnels_get_errors_and_never_stop_the_server(server):
    """A bounded fuzz of the port: mutated requests (bad JSON, unknown commands and fields,
    wrong types, garbage frames) after a login, mutated logins before one, and mutated tunnel
    requests; every request that is answered is answered with Exasol's error shape, and the
    server serves pyexasol afterwards."""
    import json
    import random
    import socket
    import websocket
    dsn, token, _ = server
    host, port = dsn.rsplit(":", 1)
    rng = random.Random(0x5EED)
    valid = [
        {"command": "execute", "sqlText": "SELECT 1"},
        {"command": "fetch", "resultSetHandle": 1, "startPosition": 0, "numBytes": 1000},
        {"command": "executePreparedStatement", "statementHandle": 1, "numColumns": 1, "numRows": 2,
         "columns": [{"name": "P1"}], "data": [[1, 2]]},
        {"command": "createPreparedStatement", "sqlText": "INSERT INTO t VALUES (?, ?)"},
        {"command": "getColumns", "schema": None, "table": "%", "column": 5},
        {"command": "setAttributes", "attributes": {"queryTimeout": -1, "feedbackInterval": "x",
                                                    "resultSetMaxRows": 1e30}},
        {"command": "execute", "sqlText": "EXPORT (SELECT 1) INTO CSV AT 'http://1.2.3.4:9' FILE '0.csv'"},
        {"command": "execute", "sqlText": "IMPORT INTO t FROM CSV AT 'https://x:1' PUBLIC KEY 'y' FILE 'z'"},
        {"command": "getResultSetHeader", "resultSetHandles": [None, -1, 2**70]},
    ]

    def mutate(text):
        data = bytearray(text.encode())
        kind = rng.randrange(5)
        if kind == 0 and data:
            for _ in range(rng.randrange(1, 5)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and data:
            del data[rng.randrange(len(data)):]
        elif kind == 2:
            data += bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        elif kind == 3:
            data = bytearray(bytes(rng.randrange(256) for _ in range(rng.randrange(128))))
        return bytes(data)

    ws = _raw_login(dsn, token)
    answered = 0
    for _ in range(300):
        frame = mutate(json.dumps(rng.choice(valid)))
        try:
            if rng.randrange(3) == 0:
                ws.send_binary(frame)
            else:
                ws.send(frame.decode("utf-8", "replace"))
            reply = json.loads(ws.recv())
            assert reply["status"] in ("ok", "error"), reply
            if reply["status"] == "error":
                assert len(reply["exception"]["sqlCode"]) == 5, reply
            answered += 1
        except (websocket.WebSocketException, ConnectionError, OSError):
            ws = _raw_login(dsn, token)
    assert answered > 200

    # Before a login, and on the tunnel's first bytes.
    for _ in range(100):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            if rng.randrange(2):
                s.sendall(mutate("\x02\x21\x21\x02\x01\x00\x00\x00\x01\x00\x00\x00"))
            else:
                s.sendall(mutate("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                 "Sec-WebSocket-Version: 13\r\n\r\n"))
            try:
                s.shutdown(socket.SHUT_WR)
                s.recv(1024)
            except OSError:
                pass  # the server closed it first

    c = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False)
    assert c.execute("SELECT 'alive'").fetchval() == "alive"
    c.close()


def test_the_port_on_a_cluster_front_end(accelsql_binary):
    """`serve --cluster … --exasol-port`: pyexasol's statements and its HTTP transport run on a
    two-node cluster; both processes are stopped by their pids."""
    import re
    import signal
    import subprocess
    cluster = subprocess.Popen([accelsql_binary, "cluster", "local", "--executors", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    server = None
    try:
        scheduler = re.match(r"scheduler: (\S+)", cluster.stdout.readline()).group(1)
        secret = re.match(r"secret-file: (\S*)", cluster.stdout.readline()).group(1)
        server = subprocess.Popen(
            [accelsql_binary, "serve", "--listen", "127.0.0.1:0", "--exasol-port", "0", "--in-memory",
             "--quiet", "--cluster", scheduler, "--cluster-secret-file", secret],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines = [server.stdout.readline() for _ in range(3)]
        token = re.match(r"token: (\S+)", lines[1]).group(1)
        dsn = re.match(r"exasol: (\S+)", lines[2]).group(1)
        c = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False)
        c.execute("CREATE TABLE spread AS SELECT * FROM generate_series(1, 10000)")
        assert c.execute("SELECT count(*), sum(value) FROM spread").fetchone() == (10000, 50005000)
        assert len(c.export_to_pandas("SELECT * FROM spread")) == 10000
        assert c.execute("SELECT param_value FROM exa_metadata WHERE param_name = 'nodeCount'").fetchval() == "2"
        c.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        cluster.send_signal(signal.SIGTERM)
        cluster.wait(timeout=60)


def test_a_million_rows_of_every_type_round_trip_compressed_and_encrypted(server):
    """The issue's size: 1M rows of seven types through pyexasol's HTTP transport, both ways,
    gzip-compressed inside TLS, checked value by value."""
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    dsn, token, fingerprint = server
    host, port = dsn.rsplit(":", 1)
    conn = pyexasol.connect(dsn=f"{host}/{fingerprint}:{port}", user="sys", password=token,
                            encryption=True, compression=True)
    conn.execute("CREATE OR REPLACE TABLE million (i DECIMAL(18,0), d DECIMAL(12,2), f DOUBLE, "
                 "s VARCHAR(100), b BOOLEAN, dt DATE, ts TIMESTAMP)")
    n = 1_000_000
    frame = pd.DataFrame({
        "I": np.arange(n),
        "D": np.round(np.arange(n) % 100_000 / 100, 2),
        "F": np.arange(n) / 4,
        "S": [None if i % 11 == 0 else f"s{i % 1000},\"{i}\"" for i in range(n)],
        "B": np.arange(n) % 3 == 0,
        "DT": (pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(n) % 3650, unit="D")).date,
        "TS": pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(n) * 1001, unit="ms"),
    })
    conn.import_from_pandas(frame, "MILLION")
    back = conn.export_to_pandas("SELECT * FROM million ORDER BY i")
    conn.close()
    assert back.shape == (n, 7)
    assert (back["I"].to_numpy() == frame["I"].to_numpy()).all()
    assert np.allclose(back["D"].to_numpy(), frame["D"].to_numpy())
    assert (back["F"].to_numpy() == frame["F"].to_numpy()).all()
    assert back["S"].isna().sum() == frame["S"].isna().sum()
    assert (back["S"].fillna("") == frame["S"].fillna("")).all()
    assert (back["B"].to_numpy() == frame["B"].to_numpy()).all()
    assert (pd.to_datetime(back["DT"]).dt.date == pd.Series(frame["DT"])).all()
    assert (pd.to_datetime(back["TS"]) == frame["TS"]).all()


def test_sessions_of_both_front_doors_show_in_one_system_table(server):
    import accelsql
    dsn, token, _ = server
    exa = pyexasol.connect(dsn=dsn, user="sys", password=token, encryption=False)
    flight = accelsql.connect(server.flight, user="sys", password=token)
    rows = exa.execute("SELECT session_id, client, status FROM exa_all_sessions").fetchall()
    clients = {int(session): client for session, client, _ in rows}
    assert clients[int(exa.session_id())].lower().startswith("exasol websocket (pyexasol"), clients
    assert "Flight SQL" in clients.values(), clients
    assert {status for _, _, status in rows} == {"ACTIVE"}
    # Seen from the Flight side too, and ended from there.
    flight_rows = flight.execute("SELECT session_id FROM exa_all_sessions").fetchall()
    assert int(exa.session_id()) in [int(r[0]) for r in flight_rows]
    flight.execute(f"KILL SESSION {exa.session_id()}")
    with pytest.raises(pyexasol.ExaError):
        exa.execute("SELECT 1")
    flight.close()
