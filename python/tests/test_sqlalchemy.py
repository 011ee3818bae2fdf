"""The SQLAlchemy 2 dialect (``accelsql://`` in process; ``accelsql+grpc://`` is in
test_server.py): Core statements, reflection with types, and pandas' to_sql/read_sql through it."""

import datetime
import decimal

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, inspect, select, text  # noqa: E402


@pytest.fixture
def engine(tmp_path):
    # A data directory of its own: an engine (and tables) no other test shares.
    e = create_engine(f"accelsql://?simulated_gpus=2&gpu_wait_timeout=30s&data_dir={tmp_path}")
    yield e
    e.dispose()


def test_core_statements_run_and_bind_parameters(engine):
    meta = MetaData()
    people = Table("people", meta, Column("id", Integer), Column("name", String(20)))
    meta.create_all(engine)
    with engine.connect() as conn:
        conn.execute(insert(people), [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}, {"id": 3, "name": None}])
        rows = conn.execute(select(people.c.name).where(people.c.id >= 2).order_by(people.c.id)).all()
        assert [r.name for r in rows] == ["bob", None]
        assert conn.execute(text("SELECT count(*) FROM people WHERE name = :n"), {"n": "ann"}).scalar() == 1
        conn.commit()
    # Another connect() of the engine sees the table: one session behind the engine.
    with engine.connect() as conn:
        assert conn.execute(select(sqlalchemy.func.count()).select_from(people)).scalar() == 3


def test_reflection_names_tables_columns_and_types(engine):
    with engine.connect() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE typed (i INT, b BIGINT, d DECIMAL(10, 2), f DOUBLE, s VARCHAR(5), "
            "ok BOOLEAN, day DATE, ts TIMESTAMP)"
        )
        conn.exec_driver_sql("CREATE VIEW typed_view AS SELECT i FROM typed")
    insp = inspect(engine)
    assert "public" in insp.get_schema_names()
    assert insp.get_table_names() == ["typed"]
    assert insp.get_view_names() == ["typed_view"]
    assert insp.has_table("typed") and not insp.has_table("nope")
    columns = {c["name"]: c["type"] for c in insp.get_columns("typed")}
    assert isinstance(columns["i"], sqlalchemy.Integer)
    assert isinstance(columns["b"], sqlalchemy.BigInteger)
    assert isinstance(columns["d"], sqlalchemy.Numeric) and (columns["d"].precision, columns["d"].scale) == (10, 2)
    assert isinstance(columns["f"], sqlalchemy.Double)
    assert isinstance(columns["s"], sqlalchemy.String)
    assert isinstance(columns["ok"], sqlalchemy.Boolean)
    assert isinstance(columns["day"], sqlalchemy.Date)
    assert isinstance(columns["ts"], sqlalchemy.TIMESTAMP)
    with pytest.raises(sqlalchemy.exc.NoSuchTableError):
        insp.get_columns("nope")
    # A reflected table works in Core.
    typed = Table("typed", MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        conn.execute(
            insert(typed),
            {"i": 1, "b": 2, "d": decimal.Decimal("3.25"), "f": 0.5, "s": "x", "ok": True,
             "day": datetime.date(2024, 1, 2), "ts": datetime.datetime(2024, 1, 2, 3, 4, 5)},
        )
        row = conn.execute(select(typed)).one()
    assert row.d == decimal.Decimal("3.25") and row.day == datetime.date(2024, 1, 2)


def test_pandas_to_sql_and_read_sql_round_trip(engine):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "n": [1, 2, 3],
            "x": [0.5, None, 2.5],
            "s": ["a", None, "c"],
            "b": [True, False, True],
            "t": pd.to_datetime(["2024-01-01 10:00", "2024-01-02 00:00", "2024-01-03 12:30"]),
        }
    )
    assert df.to_sql("frame", engine, index=False) == 3
    df.iloc[:1].to_sql("frame", engine, index=False, if_exists="append")
    back = pd.read_sql("SELECT * FROM frame ORDER BY n", engine)
    assert back["n"].tolist() == [1, 1, 2, 3]
    assert pd.isna(back["s"].tolist()[2]) and back["b"].tolist() == [True, True, False, True]
    assert back["t"].tolist()[0] == pd.Timestamp("2024-01-01 10:00")
    replaced = pd.DataFrame({"only": ["z"]})
    replaced.to_sql("frame", engine, index=False, if_exists="replace")
    assert pd.read_sql_table("frame", engine)["only"].tolist() == ["z"]


def test_gpu_rules_hold_through_sqlalchemy(engine):
    with engine.connect() as conn:
        conn.exec_driver_sql(
            "CREATE OR REPLACE PYTHON3 SCALAR SCRIPT sa_gpu(x INT) RETURNS INT AS\n"
            "%perInstanceRequiredAcceleratorDevices GpuNvidia;\n"
            "def run(ctx):\n    return ctx.x\n/"
        )
        assert conn.execute(text("SELECT sa_gpu(4)")).scalar() == 4
        with pytest.raises(sqlalchemy.exc.DataError) as e:
            conn.execute(text("SELECT sa_gpu(1), sa_gpu(2)"))
        assert e.value.orig.code == "22069"
        conn.exec_driver_sql("DROP SCRIPT sa_gpu")
