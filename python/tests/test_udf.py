"""Python callables registered as UDFs: vectorized and per row, types, the placement rule, errors."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import accelsql


@pytest.fixture
def t(conn):
    conn.execute("CREATE TABLE t(x DOUBLE, s VARCHAR) AS VALUES (1.0, 'a'), (2.5, NULL), (NULL, 'ccc')")
    return conn


def test_a_vectorized_callable_gets_pyarrow_arrays(t):
    seen = []

    def scale(x, factor):
        seen.append((type(x), type(factor)))
        return pc.multiply(x, factor)

    t.register_udf(scale, inputs=["DOUBLE", "DOUBLE"], returns="DOUBLE")
    # 10 is a BIGINT literal: cast to the DOUBLE parameter.
    assert t.execute("SELECT scale(x, 10) FROM t ORDER BY x").fetchcol() == [10.0, 25.0, None]
    assert all(issubclass(a, pa.Array) and issubclass(b, pa.Array) for a, b in seen)


def test_a_per_row_callable_gets_python_values_and_none_for_null(t):
    def shout(s):
        return None if s is None else s.upper() + "!"

    t.register_udf(shout, inputs=["VARCHAR(100)"], returns="VARCHAR(100)", vectorized=False)
    assert sorted(t.execute("SELECT shout(s) FROM t").fetchcol(), key=str) == ["A!", "CCC!", None]


def test_results_may_be_numpy_lists_or_chunked_arrays_and_are_cast(t):
    t.register_udf(lambda x: np.ones(len(x)), name="ones", inputs=["DOUBLE"], returns="DOUBLE")
    t.register_udf(lambda x: [7] * len(x), name="sevens", inputs=["DOUBLE"], returns="BIGINT")
    t.register_udf(lambda x: pa.chunked_array([x]), name="same", inputs=["DOUBLE"], returns="DOUBLE")
    # An int64 array for a DOUBLE result is cast.
    t.register_udf(lambda x: pa.array([1] * len(x)), name="ints", inputs=["DOUBLE"], returns="DOUBLE")
    row = t.execute("SELECT ones(x), sevens(x), same(x), ints(x) FROM t WHERE x = 1.0").fetchone()
    assert row == (1.0, 7, 1.0, 1.0)


def test_pyarrow_types_and_decimal_and_dates(conn):
    conn.register_udf(lambda d: d, name="same_date", inputs=[pa.date32()], returns=pa.date32())
    conn.register_udf(lambda d: d, name="same_dec", inputs=["DECIMAL(10,2)"], returns="DECIMAL(10,2)")
    import datetime
    from decimal import Decimal

    row = conn.execute("SELECT same_date(DATE '2024-02-29'), same_dec(1.25)").fetchone()
    assert row == (datetime.date(2024, 2, 29), Decimal("1.25"))


def test_a_zero_argument_callable_uses_ctx_num_rows(t):
    t.register_udf(lambda ctx: pa.array(range(ctx.num_rows)), name="row_no", returns="BIGINT")
    assert sorted(t.execute("SELECT row_no() FROM t").fetchcol()) in ([0, 1, 2], [0, 0, 0], [0, 0, 1])


def test_ctx_tells_the_placement_and_the_pinned_device(t):
    def placed_on(x, ctx):
        return pa.array([f"{ctx.placement}:{ctx.cuda_visible_devices}:{ctx.device_index}"] * len(x))

    t.register_udf(placed_on, inputs=["DOUBLE"], returns="VARCHAR(100)", accelerator="GpuNvidia|None")
    a, b = t.execute("SELECT placed_on(1.0) AS a, placed_on(2.0) AS b").fetchone()
    # The first optional call gets the GPUs, the second runs on the CPU.
    assert a in ("GPU:0:0", "GPU:1:1")
    assert b == "CPU::None"


def test_the_placement_rule_applies_as_for_scripts(t):
    t.register_udf(lambda x: x, name="req", inputs=["DOUBLE"], returns="DOUBLE", accelerator="GpuNvidia")
    t.register_udf(lambda x: x, name="opt", inputs=["DOUBLE"], returns="DOUBLE", accelerator="GpuNvidia|None")
    with pytest.raises(accelsql.AccelsqlError) as e:
        t.execute("SELECT req(x) AS a, req(x) AS b FROM t")
    assert e.value.code == "22069"
    # Each sub-select is its own block.
    assert t.execute("SELECT req(x) FROM (SELECT req(x) AS x FROM t) s WHERE x = 1.0").fetchval() == 1.0
    plan = "\n".join(str(r) for r in t.execute("EXPLAIN SELECT opt(x) AS a, req(x) AS b FROM t").fetchall())
    assert "gpu_placement" in plan
    assert "req" in plan and "opt" in plan
    calls = t.execute(
        "SELECT udf, placement FROM accelsql.udf_calls WHERE udf IN ('req', 'opt') ORDER BY statement_id"
    ).fetchall()
    assert ("req", "GPU") in [(u, p.upper()) for u, p in calls]


def test_only_its_connection_sees_a_callable_and_registering_again_replaces_it(conn):
    conn.register_udf(lambda x: x, name="mine", inputs=["BIGINT"], returns="BIGINT")
    with accelsql.connect(simulated_gpus=2) as other:
        with pytest.raises(accelsql.AccelsqlError):
            other.execute("SELECT mine(1)")
    conn.register_udf(lambda x: pc.add(x, 1), name="mine", inputs=["BIGINT"], returns="BIGINT")
    assert conn.execute("SELECT mine(1)").fetchval() == 2


def test_a_result_of_the_wrong_length_or_type_fails_with_22E02(t):
    t.register_udf(lambda x: pa.array([1.0]), name="short", inputs=["DOUBLE"], returns="DOUBLE")
    with pytest.raises(accelsql.AccelsqlError) as e:
        t.execute("SELECT short(x) FROM t")
    assert e.value.code == "22E02"
    assert "1 values for a batch of 3 rows" in e.value.message
    t.register_udf(lambda x: pa.array(["a"] * len(x)), name="text", inputs=["DOUBLE"], returns="DATE")
    with pytest.raises(accelsql.AccelsqlError) as e:
        t.execute("SELECT text(x) FROM t")
    assert e.value.code == "22E02"
    t.register_udf(lambda x: object(), name="junk", inputs=["DOUBLE"], returns="DOUBLE")
    with pytest.raises(accelsql.AccelsqlError) as e:
        t.execute("SELECT junk(x) FROM t")
    assert e.value.code == "22E02"


def test_an_exception_in_the_callable_fails_with_22U10_and_its_traceback(t):
    def broken(x):
        raise ZeroDivisionError("no way")

    t.register_udf(broken, inputs=["DOUBLE"], returns="DOUBLE")
    with pytest.raises(accelsql.AccelsqlError) as e:
        t.execute("SELECT broken(x) FROM t")
    assert e.value.code == "22U10"
    assert "ZeroDivisionError: no way" in e.value.message
    assert "in broken" in e.value.message  # the traceback

    def per_row(x):
        if x == 2.5:
            raise ValueError("bad row")
        return x

    t.register_udf(per_row, inputs=["DOUBLE"], returns="DOUBLE", vectorized=False)
    with pytest.raises(accelsql.AccelsqlError) as e:
        t.execute("SELECT per_row(x) FROM t ORDER BY x")
    assert e.value.code == "22U10"
    assert "row 1 of its batch" in e.value.message
    # The connection stays usable.
    assert t.execute("SELECT COUNT(*) FROM t").fetchval() == 3


def test_instance_limit_bounds_the_instances(conn):
    conn.execute("SET datafusion.execution.target_partitions = 4")
    conn.execute("CREATE TABLE w AS SELECT value AS v FROM generate_series(1, 100000)")
    seen = set()

    def which(v, ctx):
        seen.add(ctx.instance_id)
        return v

    conn.register_udf(which, inputs=["BIGINT"], returns="BIGINT", instance_limit=1)
    assert conn.execute("SELECT SUM(which(v)) FROM w").fetchval() == 100000 * 100001 // 2
    assert seen == {0}
