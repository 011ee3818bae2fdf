"""Tables of an `accelsql serve` under faults: a server killed with SIGKILL while four clients
insert keeps every acknowledged row exactly once and nothing else; a full disk (a file-size
limit) fails the INSERT with 53100, leaves the table as it was and the server serving; clients
of one connection per cell (the notebook's way) share the server's tables. The server is the
real binary (``ACCELSQL_BIN``, else target/debug/accelsql); every process started here is
stopped by its pid."""

import os
import re
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import accelsql

ROOT = Path(__file__).resolve().parents[2]


def _binary() -> str:
    path = os.environ.get("ACCELSQL_BIN") or str(ROOT / "target" / "debug" / "accelsql")
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail(f"the accelsql binary is missing at {path}")
        pytest.skip(f"SKIPPED: no accelsql binary at {path}")
    return path


class Serve:
    """`accelsql serve --no-auth` on a data directory, on 127.0.0.1."""

    def __init__(self, data: Path, file_size_limit: int = 0) -> None:
        def limit() -> None:
            if file_size_limit:
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

        self.proc = subprocess.Popen(
            [_binary(), "serve", "--listen", "127.0.0.1:0", "--no-auth", "--simulated-gpus", "0",
             "--data-dir", str(data), "-q"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=limit,
        )
        line = self.proc.stdout.readline()
        match = re.match(r"listening: (grpc://\S+)", line)
        assert match, f"first line: {line!r}"
        self.url = match.group(1)

    def connect(self):
        return accelsql.connect(self.url, lower_ident=True)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=20)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def test_a_killed_server_keeps_every_acknowledged_row_once(tmp_path):
    data = tmp_path / "data"
    server = Serve(data)
    try:
        with server.connect() as c:
            c.execute("CREATE TABLE events (client BIGINT, n BIGINT)")
        acknowledged = {k: [] for k in range(4)}
        attempted = {k: [] for k in range(4)}
        stop = threading.Event()

        def insert(k: int) -> None:
            try:
                with server.connect() as c:
                    n = 0
                    while not stop.is_set():
                        attempted[k].append(n)
                        c.execute(f"INSERT INTO events VALUES ({k}, {n})")
                        acknowledged[k].append(n)
                        n += 1
            except Exception:  # noqa: BLE001 - the server dies under the clients
                pass

        threads = [threading.Thread(target=insert, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while sum(len(v) for v in acknowledged.values()) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert sum(len(v) for v in acknowledged.values()) >= 40
    finally:
        if server.proc.poll() is None:
            server.kill()
    again = Serve(data)
    try:
        with again.connect() as c:
            rows = c.execute("SELECT client, n FROM events").fetchall()
            assert len(rows) == len(set(rows)), "a row is there twice"
            for k in range(4):
                mine = {n for (client, n) in rows if client == k}
                # Every acknowledged row is there; at most the one in flight at the kill besides.
                assert set(acknowledged[k]) <= mine
                assert mine <= set(attempted[k])
            # The table takes writes after the restart.
            c.execute("INSERT INTO events VALUES (9, 9)")
            assert c.execute("SELECT count(*) FROM events WHERE client = 9").fetchval() == 1
    finally:
        assert again.stop() == 0


def test_a_full_disk_fails_the_insert_and_changes_nothing(tmp_path):
    data = tmp_path / "data"
    # Files of the server's may not pass 4 MiB: an INSERT writing more fails (EFBIG).
    server = Serve(data, file_size_limit=4 << 20)
    try:
        with server.connect() as c:
            c.execute("CREATE TABLE big (id BIGINT, s VARCHAR)")
            c.execute("INSERT INTO big VALUES (1, 'small')")
            with pytest.raises(accelsql.Error) as caught:
                c.execute(
                    "INSERT INTO big SELECT value, repeat(md5(CAST(value AS VARCHAR)), 8) "
                    "FROM generate_series(1, 400000)"
                )
            assert caught.value.code == "53100", caught.value
            assert c.execute("SELECT count(*) FROM big").fetchval() == 1
        # The server goes on serving, other connections included.
        with server.connect() as c:
            assert c.execute("SELECT s FROM big").fetchval() == "small"
            c.execute("INSERT INTO big VALUES (2, 'fits')")
            assert c.execute("SELECT count(*) FROM big").fetchval() == 2
    finally:
        assert server.stop() == 0


def test_each_cell_on_its_own_connection_sees_the_servers_tables(tmp_path):
    """The "GPU Resource Considerations" notebook's way: every cell opens its own connection."""
    server = Serve(tmp_path / "data")
    try:
        with server.connect() as cell:
            cell.execute("CREATE TABLE cities (name VARCHAR(100), lat DOUBLE, lon DOUBLE)")
        with server.connect() as cell:
            cell.execute("INSERT INTO cities VALUES ('Berlin', 52.52, 13.40), ('Paris', 48.85, 2.35)")
        with server.connect() as cell:
            got = cell.execute(
                "SELECT name, round(haversine_km(lat, lon, 48.85, 2.35)) FROM cities ORDER BY name"
            ).fetchall()
            assert got == [("Berlin", 878.0), ("Paris", 0.0)]
    finally:
        assert server.stop() == 0
