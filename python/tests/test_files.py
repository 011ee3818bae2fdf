"""Files as tables: Parquet and CSV files named in FROM, COPY TO, and their errors."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import accelsql


def test_a_parquet_file_is_a_table(conn, tmp_path):
    path = tmp_path / "docs.parquet"
    emb = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 0.0, 0.0, 1.0, 0.6, 0.8], pa.float32()), 2)
    pq.write_table(pa.table({"id": [1, 2, 3], "emb": emb}), path, compression="zstd")
    st = conn.execute(f"SELECT id FROM '{path}' ORDER BY id")
    assert st.fetchall() == [(1,), (2,), (3,)]
    best = conn.execute(
        f"SELECT id, cosine_similarity(emb, [1.0, 0.0]) AS s FROM '{path}' ORDER BY s DESC LIMIT 1"
    ).fetchone()
    assert best[0] == 1 and best[1] == pytest.approx(1.0)


def test_copy_to_and_a_glob(conn, tmp_path):
    for n in range(2):
        conn.execute(f"COPY (SELECT {n} AS part, 'x' AS s) TO '{tmp_path}/p{n}.csv'")
    assert conn.execute(f"SELECT sum(part) FROM '{tmp_path}/*.csv'").fetchval() == 1


def test_a_missing_file_has_a_code(conn, tmp_path):
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.execute(f"SELECT * FROM '{tmp_path}/missing.parquet'")
    assert e.value.code == "58P01"
    assert "missing.parquet" in str(e.value)
