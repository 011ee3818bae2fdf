"""pandas and Arrow round trips with NULLs and every supported type."""

import datetime
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import accelsql

TYPES_SQL = """
CREATE TABLE typed(
    b BOOLEAN, s SMALLINT, i INT, l BIGINT, f DOUBLE, r REAL, d DECIMAL(18, 2), big DECIMAL(36, 4),
    v VARCHAR, c CHAR(3), dt DATE, ts TIMESTAMP
) AS VALUES
    (true, 1, 10, 100, 1.5, 2.5, 12.34, CAST('123456789012345678901234567890.1234' AS DECIMAL(36, 4)), 'ab', 'xyz', DATE '2024-02-29', TIMESTAMP '2024-02-29 12:34:56.789'),
    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (false, -1, -10, -100, -0.25, 0.0, -0.01, CAST('0.0001' AS DECIMAL(36, 4)), '', 'q', DATE '1970-01-01', TIMESTAMP '1970-01-01 00:00:00')
"""

EXPECTED = [
    (
        True, 1, 10, 100, 1.5, 2.5, Decimal("12.34"), Decimal("123456789012345678901234567890.1234"),
        "ab", "xyz", datetime.date(2024, 2, 29), datetime.datetime(2024, 2, 29, 12, 34, 56, 789000),
    ),
    (None,) * 12,
    (
        False, -1, -10, -100, -0.25, 0.0, Decimal("-0.01"), Decimal("0.0001"),
        "", "q", datetime.date(1970, 1, 1), datetime.datetime(1970, 1, 1),
    ),
]


@pytest.fixture
def typed(conn):
    conn.execute(TYPES_SQL)
    return conn


def normalize(row):
    return tuple(v.strip() if isinstance(v, str) else v for v in row)


def test_every_type_fetches_as_python_values(typed):
    rows = typed.execute("SELECT * FROM typed").fetchall()
    assert sorted(map(normalize, rows), key=repr) == sorted(EXPECTED, key=repr)


def test_export_to_arrow_keeps_types_and_nulls(typed):
    table = typed.export_to_arrow("SELECT * FROM typed")
    assert isinstance(table, pa.Table)
    assert table.num_rows == 3
    assert table.schema.field("b").type == pa.bool_()
    assert table.schema.field("l").type == pa.int64()
    assert table.schema.field("f").type == pa.float64()
    assert pa.types.is_decimal(table.schema.field("d").type)
    assert table.schema.field("dt").type == pa.date32()
    assert pa.types.is_timestamp(table.schema.field("ts").type)
    for name in table.column_names:
        assert table.column(name).null_count == 1, name
    # A bare table name exports the table.
    assert typed.export_to_arrow("typed").num_rows == 3


def test_export_to_pandas(typed):
    df = typed.export_to_pandas("SELECT * FROM typed ORDER BY l")
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == ["b", "s", "i", "l", "f", "r", "d", "big", "v", "c", "dt", "ts"]
    assert len(df) == 3
    assert df["l"].tolist()[:2] == [-100.0, 100.0] and np.isnan(df["l"].tolist()[2])
    assert df["f"].isna().sum() == 1
    assert df["v"].isna().sum() == 1
    assert df["ts"].isna().sum() == 1
    assert df["ts"].iloc[1] == pd.Timestamp("2024-02-29 12:34:56.789")
    assert df["d"].iloc[1] == Decimal("12.34")


def test_export_hands_over_the_buffers_without_copying(conn):
    conn.execute("CREATE TABLE big AS SELECT value AS v, CAST(value AS DOUBLE) AS f FROM generate_series(1, 1000000)")
    before = pa.total_allocated_bytes()
    table = conn.export_to_arrow("SELECT * FROM big")
    assert table.num_rows == 1_000_000
    # 16 MB of data; pyarrow's own memory pool did not grow by it (the buffers are the engine's).
    assert pa.total_allocated_bytes() - before < 1_000_000
    assert pc.sum(table.column("v")).as_py() == 1_000_000 * 1_000_001 // 2


def test_pandas_round_trip_with_nulls(conn):
    df = pd.DataFrame(
        {
            "id": pd.array([1, None, 3], dtype="Int64"),
            "x": [1.5, np.nan, -2.0],
            "name": ["a", None, "c"],
            "flag": pd.array([True, None, False], dtype="boolean"),
            "at": pd.to_datetime(["2024-01-01 10:00:00", None, "1999-12-31 23:59:59"]),
            "day": [datetime.date(2024, 1, 1), None, datetime.date(2000, 2, 29)],
            "amount": [Decimal("1.10"), None, Decimal("-3.25")],
        }
    )
    assert conn.import_from_pandas(df, "imported") == 3
    back = conn.export_to_pandas("SELECT * FROM imported")
    assert list(back.columns) == list(df.columns)
    assert back["id"].isna().tolist() == [False, True, False]
    assert back["id"].dropna().tolist() == [1, 3]
    assert back["x"].isna().tolist() == [False, True, False]
    assert back["name"].tolist()[0] == "a" and back["name"].isna().tolist() == [False, True, False]
    assert back["flag"].tolist()[0] is True and back["flag"].isna().tolist() == [False, True, False]
    assert back["at"].iloc[0] == pd.Timestamp("2024-01-01 10:00") and pd.isna(back["at"].iloc[1])
    assert back["day"].tolist() == [datetime.date(2024, 1, 1), None, datetime.date(2000, 2, 29)]
    assert back["amount"].tolist() == [Decimal("1.10"), None, Decimal("-3.25")]
    # SQL sees the table, NULLs included.
    assert conn.execute("SELECT COUNT(*), COUNT(id), SUM(x) FROM imported").fetchone() == (3, 2, -0.5)


def test_import_appends_to_an_existing_table_casting_by_position(conn):
    conn.execute("CREATE TABLE target(a BIGINT, b VARCHAR, c DOUBLE) AS VALUES (1, 'x', 0.5)")
    df = pd.DataFrame({"p": [2, 3], "q": ["y", None], "r": [1, 2]})  # r: int64 into DOUBLE
    assert conn.import_from_pandas(df, "target") == 2
    assert conn.execute("SELECT a, b, c FROM target ORDER BY a").fetchall() == [
        (1, "x", 0.5), (2, "y", 1.0), (3, None, 2.0),
    ]
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.import_from_pandas(pd.DataFrame({"only": [1]}), "target")
    assert e.value.code == "42000"
    assert "3 columns" in e.value.message
    with pytest.raises(accelsql.AccelsqlError):
        conn.import_from_pandas(pd.DataFrame({"a": ["not a number"], "b": ["x"], "c": [1.0]}), "target")


def test_import_from_arrow_takes_tables_batches_and_readers(conn):
    table = pa.table({"k": pa.array([1, 2, 3], pa.int32()), "s": pa.array(["a", "b", None])})
    assert conn.import_from_arrow(table, "arrow_t") == 3
    assert conn.import_from_arrow(table.to_batches()[0], "arrow_t") == 3
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    assert conn.import_from_arrow(reader, "arrow_t") == 3
    assert conn.execute("SELECT COUNT(*), COUNT(s) FROM arrow_t").fetchone() == (9, 6)
    # Unquoted names fold to lower case, as in SQL.
    conn.import_from_arrow(table, "MixedCase")
    assert conn.execute("SELECT COUNT(*) FROM mixedcase").fetchval() == 3


def test_large_import_is_spread_over_partitions_and_queryable(conn):
    n = 200_000
    df = pd.DataFrame({"a": np.arange(n), "b": np.arange(n) * 0.5})
    conn.import_from_pandas(df, "many")
    assert conn.execute("SELECT COUNT(*), SUM(a) FROM many").fetchone() == (n, n * (n - 1) // 2)
