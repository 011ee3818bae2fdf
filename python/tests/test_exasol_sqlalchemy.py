"""sqlalchemy-exasol's `exa+websocket://` dialect, unchanged, on `accelsql serve --exasol-port`:
Core select and insert, reflection, and pandas' `to_sql`/`read_sql`, plain and over TLS with the
printed fingerprint."""

import os

import pytest

if os.environ.get("CI"):
    import sqlalchemy as sa
    import sqlalchemy_exasol  # noqa: F401 - the dialect must be installed under CI
else:
    sa = pytest.importorskip("sqlalchemy")
    pytest.importorskip("sqlalchemy_exasol")


@pytest.fixture(params=["plain", "tls"])
def engine(exasol_server, request):
    dsn, token, fingerprint = exasol_server
    host, port = dsn.rsplit(":", 1)
    query = ("ENCRYPTION=no&SSLCertificate=SSL_VERIFY_NONE" if request.param == "plain"
             else f"FINGERPRINT={fingerprint}")
    engine = sa.create_engine(f"exa+websocket://sys:{token}@{host}:{port}/PUBLIC?{query}")
    yield engine
    engine.dispose()


def test_core_insert_select_and_reflection(engine):
    with engine.connect() as c:
        c.execute(sa.text("CREATE OR REPLACE TABLE sq (id INT, name VARCHAR(20), score DECIMAL(8,2))"))
        c.execute(sa.text("CREATE OR REPLACE VIEW sq_view AS SELECT id FROM sq"))
        table = sa.Table("sq", sa.MetaData(), autoload_with=c)
        assert [(col.name, type(col.type).__name__) for col in table.columns] == [
            ("id", "INTEGER"), ("name", "VARCHAR"), ("score", "DECIMAL")]
        assert table.c.name.type.length == 20
        c.execute(table.insert(), [{"id": 1, "name": "a", "score": 1.5}, {"id": 2, "name": "b", "score": None}])
        rows = c.execute(sa.select(table.c.id, table.c.name).where(table.c.id > 0).order_by(table.c.id)).fetchall()
        assert rows == [(1, "a"), (2, "b")]
        c.commit()
        inspector = sa.inspect(c)
        assert "sq" in inspector.get_table_names()
        assert "sq_view" not in inspector.get_table_names()
        assert inspector.get_view_names() == ["sq_view"]
        assert "public" in inspector.get_schema_names()
        assert inspector.has_table("sq") and not inspector.has_table("no_such_table")
        assert inspector.get_pk_constraint("sq")["constrained_columns"] == []


def test_pandas_to_sql_and_read_sql(engine):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None], "c": [0.5, 1.5, 2.5]})
    frame.to_sql("frame", engine, if_exists="replace", index=False)
    back = pd.read_sql("SELECT * FROM frame ORDER BY a", engine)
    assert back["a"].tolist() == [1, 2, 3]
    assert back["b"].tolist()[:2] == ["x", "y"] and pd.isna(back["b"].tolist()[2])
    assert back["c"].tolist() == [0.5, 1.5, 2.5]
