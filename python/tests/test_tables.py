"""Tables in a data directory through the Python package: shared by every connection, there
after the process ends, transactional with ``autocommit=False``, and Delta Lake tables that
the ``deltalake`` package (delta-rs's own Python binding) and Polars read without accelsql."""

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import accelsql


def test_connections_share_tables_and_a_new_process_finds_them(tmp_path):
    data = tmp_path / "data"
    with accelsql.connect(data_dir=data, lower_ident=True) as a:
        a.execute("CREATE TABLE cities (name VARCHAR(100), lat DOUBLE, lon DOUBLE)")
        a.execute("INSERT INTO cities VALUES ('Berlin', 52.52, 13.40), ('Paris', 48.85, 2.35)")
        # Every cell of a notebook opens its own connection.
        with accelsql.connect(data_dir=data, lower_ident=True) as b:
            assert b.execute("SELECT count(*) AS n FROM cities").fetchval() == 2
    program = textwrap.dedent(
        f"""
        import accelsql
        with accelsql.connect(data_dir={str(data)!r}, lower_ident=True) as c:
            print(c.execute("SELECT name FROM cities ORDER BY name").fetchcol())
        """
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['Berlin', 'Paris']"


def test_writes_wait_for_commit_and_vanish_at_rollback(tmp_path):
    data = tmp_path / "data"
    with accelsql.connect(data_dir=data, lower_ident=True) as setup:
        setup.execute("CREATE TABLE t (id BIGINT)")
    with accelsql.connect(data_dir=data, lower_ident=True, autocommit=False) as a, accelsql.connect(
        data_dir=data, lower_ident=True
    ) as b:
        assert a.autocommit is False
        a.execute("INSERT INTO t VALUES (1), (2)")
        assert a.execute("SELECT count(*) FROM t").fetchval() == 2
        assert b.execute("SELECT count(*) FROM t").fetchval() == 0
        a.commit()
        assert b.execute("SELECT count(*) FROM t").fetchval() == 2
        a.execute("DELETE FROM t")
        a.rollback()
        assert b.execute("SELECT count(*) FROM t").fetchval() == 2
        # DB-API: a cursor's writes are the connection's.
        cur = a.cursor()
        cur.execute("INSERT INTO t VALUES (3)")
        a.set_autocommit(True)  # commits what waits, as JDBC's setAutoCommit(true)
        assert b.execute("SELECT sum(id) FROM t").fetchval() == 6


def test_a_conflict_is_40001_and_keeps_nothing(tmp_path):
    data = tmp_path / "data"
    with accelsql.connect(data_dir=data, lower_ident=True) as c:
        c.execute("CREATE TABLE acct (id BIGINT, balance BIGINT)")
        c.execute("INSERT INTO acct VALUES (1, 100)")
    a = accelsql.connect(data_dir=data, lower_ident=True, autocommit=False)
    b = accelsql.connect(data_dir=data, lower_ident=True, autocommit=False)
    a.execute("UPDATE acct SET balance = balance - 10 WHERE id = 1")
    b.execute("UPDATE acct SET balance = balance - 20 WHERE id = 1")
    a.commit()
    with pytest.raises(accelsql.Error) as caught:
        b.commit()
    assert caught.value.code == "40001"
    assert b.execute("SELECT balance FROM acct").fetchval() == 90
    a.close()
    b.close()


def test_delta_lake_readers_open_what_accelsql_wrote(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    pl = pytest.importorskip("polars")
    data = tmp_path / "data"
    with accelsql.connect(data_dir=data, lower_ident=True) as c:
        c.execute(
            "CREATE TABLE readings AS SELECT value AS id, value * 0.5 AS x, 'r' || value AS label "
            "FROM generate_series(1, 1000)"
        )
        c.execute("DELETE FROM readings WHERE id > 900")
        c.execute("UPDATE readings SET label = 'first' WHERE id = 1")
        c.execute("ALTER TABLE readings ADD COLUMN note VARCHAR(10)")
        c.execute("INSERT INTO readings VALUES (5000, 1.5, 'late', 'n')")
    folder = data / "tables" / "public" / "readings"
    table = deltalake.DeltaTable(str(folder))
    arrow = table.to_pyarrow_table()
    assert arrow.num_rows == 901
    assert sorted(arrow.column_names) == ["id", "label", "note", "x"]
    ids = sorted(arrow.column("id").to_pylist())
    assert ids[:2] == [1, 2] and ids[-1] == 5000
    frame = pl.read_delta(str(folder))
    assert frame.filter(pl.col("id") == 1)["label"].to_list() == ["first"]
    assert table.version() == 4
    # And the other way: a table another tool wrote is attached and read.
    outside = tmp_path / "outside"
    deltalake.write_deltalake(str(outside), pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}))
    with accelsql.connect(data_dir=data, lower_ident=True) as c:
        c.execute(f"CREATE EXTERNAL TABLE ext STORED AS DELTA LOCATION '{outside}'")
        assert c.execute("SELECT sum(k) FROM ext").fetchval() == 6
        c.execute("INSERT INTO ext VALUES (4, 'd')")
    assert deltalake.DeltaTable(str(outside)).to_pyarrow_table().num_rows == 4
