"""The connection and statement API: execute, fetching, settings, lifetime, shared engines."""

import os
import threading

import pyarrow as pa
import pytest

import accelsql


def test_execute_and_fetch(conn):
    conn.execute("CREATE TABLE t(id BIGINT, name VARCHAR) AS VALUES (1, 'a'), (2, 'b'), (3, NULL)")
    st = conn.execute("SELECT id, name FROM t ORDER BY id")
    assert st.column_names() == ["id", "name"]
    assert list(st.columns()) == ["id", "name"]
    assert st.columns()["id"] == pa.int64()
    assert st.rowcount() == 3
    assert st.fetchone() == (1, "a")
    assert st.fetchmany(5) == [(2, "b"), (3, None)]
    assert st.fetchone() is None
    assert st.fetchall() == []
    assert list(conn.execute("SELECT id FROM t ORDER BY id")) == [(1,), (2,), (3,)]
    assert conn.execute("SELECT COUNT(*) FROM t").fetchval() == 3
    assert conn.execute("SELECT id FROM t ORDER BY id DESC").fetchcol() == [3, 2, 1]


def test_fetchmany_crosses_batches(conn):
    conn.set("datafusion.execution.batch_size", 7)
    st = conn.execute("SELECT value FROM generate_series(1, 100) ORDER BY value")
    got = []
    while True:
        chunk = st.fetchmany(9)
        if not chunk:
            break
        assert len(chunk) <= 9
        got.extend(v for (v,) in chunk)
    assert got == list(range(1, 101))


def test_dml_rowcount_and_multiple_statements(conn):
    st = conn.execute("CREATE TABLE d(x INT); INSERT INTO d VALUES (1), (2), (3)")
    assert st.rowcount() == 3
    assert conn.execute("SELECT SUM(x) FROM d").fetchval() == 6
    # The last statement's result; the ones before it ran.
    st = conn.execute("INSERT INTO d VALUES (4); SELECT x FROM d ORDER BY x")
    assert st.fetchcol() == [1, 2, 3, 4]
    assert conn.execute("-- one more\n/* really */ INSERT INTO d VALUES (5)").rowcount() == 1
    assert conn.execute("SELECT x FROM d WHERE x > 3").rowcount() == 2


def test_an_empty_result_keeps_its_columns(conn):
    st = conn.execute("SELECT 1 AS a, 'x' AS b WHERE 1 = 0")
    assert st.column_names() == ["a", "b"]
    assert st.rowcount() == 0
    assert st.fetchall() == []
    assert conn.execute("CREATE TABLE e(x INT)").column_names() in ([], ["count"])


def test_settings_from_connect_and_set():
    with accelsql.connect(simulated_gpus=2, gpu_wait_timeout="5s", **{"datafusion.execution.batch_size": 1234}) as c:
        rows = dict(c.execute("SELECT name, value FROM information_schema.df_settings").fetchall())
        assert rows["datafusion.execution.batch_size"] == "1234"
        assert rows["accelsql.gpu_wait_timeout"] == "5s"
        c.set("gpu_wait_timeout", "10s")
        rows = dict(c.execute("SELECT name, value FROM information_schema.df_settings").fetchall())
        assert rows["accelsql.gpu_wait_timeout"] == "10s"
    with pytest.raises(accelsql.AccelsqlError):
        accelsql.connect(simulated_gpus=2, gpu_wait_timeout="soon").execute("SELECT 1")


def test_close_and_context_manager():
    with accelsql.connect(simulated_gpus=2) as c:
        assert not c.closed
        assert c.gpu_count == 2
    assert c.closed
    with pytest.raises(accelsql.AccelsqlError) as e:
        c.execute("SELECT 1")
    assert e.value.code == "08003"
    c.close()  # twice is fine


def test_connections_share_the_engine_and_its_tables(unique):
    name = unique("shared_script")
    a = accelsql.connect(simulated_gpus=2)
    b = accelsql.connect(simulated_gpus=2)
    a.execute(
        f"CREATE OR REPLACE PYTHON3 SCALAR SCRIPT {name}(x BIGINT) RETURNS BIGINT AS\n"
        "def run(ctx):\n    return ctx.x + 1\n/"
    )
    assert b.execute(f"SELECT {name}(41)").fetchval() == 42
    # The engine's tables are every connection's; a temporary table is its own.
    table = unique("shared_table")
    a.execute(f"CREATE TABLE {table}(x INT) AS VALUES (1)")
    assert b.execute(f"SELECT x FROM {table}").fetchval() == 1
    a.execute(f"DROP TABLE {table}")
    a.execute("CREATE TEMPORARY TABLE only_a(x INT) AS VALUES (1)")
    with pytest.raises(accelsql.AccelsqlError):
        b.execute("SELECT * FROM only_a")
    # Another device configuration is another engine: the script is not there.
    with accelsql.connect(simulated_gpus=1) as other:
        assert other.gpu_count == 1
        with pytest.raises(accelsql.AccelsqlError):
            other.execute(f"SELECT {name}(1)")
    a.close()
    b.close()


def test_data_dir_keeps_scripts(tmp_path, unique):
    name = unique("kept")
    with accelsql.connect(simulated_gpus=2, data_dir=tmp_path) as c:
        c.execute(f"CREATE PYTHON3 SCALAR SCRIPT {name}() RETURNS INT AS\ndef run(ctx):\n    return 7\n/")
        assert c.execute(f"SELECT {name}()").fetchval() == 7
    assert (tmp_path / "scripts.json").exists()
    with accelsql.connect(simulated_gpus=2, data_dir=str(tmp_path)) as c:
        assert c.execute(f"SELECT {name}()").fetchval() == 7


def test_scripts_run_with_this_interpreter(conn, unique):
    name = unique("which_python")
    conn.execute(
        f"CREATE PYTHON3 SCALAR SCRIPT {name}() RETURNS VARCHAR(1000) AS\n"
        "import sys\ndef run(ctx):\n    return sys.executable\n/"
    )
    got = conn.execute(f"SELECT {name}()").fetchval()
    assert os.path.realpath(got) == os.path.realpath(os.sys.executable)


def test_one_connection_from_several_threads(conn):
    conn.execute("CREATE TABLE n AS SELECT value AS v FROM generate_series(1, 1000)")
    results = []

    def work():
        results.append(conn.execute("SELECT SUM(v) FROM n").fetchval())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [500500] * 4


def test_the_package_exports_its_api():
    for name in ["connect", "Connection", "Statement", "AccelsqlError", "UdfContext", "__version__"]:
        assert hasattr(accelsql, name), name
        if name != "__version__":
            assert getattr(accelsql, name).__doc__, name
    assert issubclass(accelsql.AccelsqlError, Exception)


def test_user_picks_a_catalog_user_in_process(tmp_path):
    """connect(user=...) in process: a session of that catalog user, with its privileges only."""
    with accelsql.connect(simulated_gpus=2, data_dir=tmp_path) as admin:
        assert admin.execute("SELECT CURRENT_USER").fetchval() == "SYS"
        admin.execute('CREATE USER ann IDENTIFIED BY "pw"')
        with pytest.raises(accelsql.AccelsqlError) as e:
            accelsql.connect(simulated_gpus=2, data_dir=tmp_path, user="ann")
        assert e.value.code == "42501"
        admin.execute("GRANT CREATE SESSION TO ann")
        with accelsql.connect(simulated_gpus=2, data_dir=tmp_path, user="ann") as ann:
            assert ann.execute("SELECT CURRENT_USER").fetchval() == "ANN"
            with pytest.raises(accelsql.AccelsqlError) as e:
                ann.execute('CREATE USER bob IDENTIFIED BY "pw"')
            assert e.value.code == "42501"
    with pytest.raises(accelsql.AccelsqlError) as e:
        accelsql.connect(simulated_gpus=2, data_dir=tmp_path, user="nobody")
    assert e.value.code == "42704"
    with pytest.raises(ValueError):
        accelsql.connect(simulated_gpus=2, data_dir=tmp_path, user="ann", password="pw")
