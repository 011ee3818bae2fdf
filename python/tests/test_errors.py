"""Errors are AccelsqlError exceptions carrying the engine's code and message."""

import pyarrow as pa
import pytest

import accelsql


def gpu_required(conn, name="needs_gpu"):
    conn.register_udf(
        lambda x: x, name=name, inputs=["BIGINT"], returns="BIGINT", accelerator="GpuNvidia"
    )


def test_two_gpu_required_calls_in_one_select_fail_with_22069(conn):
    gpu_required(conn)
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.execute("SELECT needs_gpu(1) AS a, needs_gpu(2) AS b")
    err = e.value
    assert err.code == "22069"
    assert str(err).startswith("[22069] Accelerator device request failed")
    assert err.message.startswith("Accelerator device request failed")
    assert "Insufficient accelerator resources" in err.message
    # The connection stays usable.
    assert conn.execute("SELECT needs_gpu(1)").fetchval() == 1


def test_a_required_call_without_gpus_fails_with_22069():
    with accelsql.connect(simulated_gpus=0) as c:
        gpu_required(c)
        with pytest.raises(accelsql.AccelsqlError) as e:
            c.execute("SELECT needs_gpu(1)")
        assert e.value.code == "22069"
        assert "No GPU is present" in e.value.message


def test_sql_errors_have_sqlstate_classes(conn):
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.execute("SELEC 1")
    assert e.value.code == "42000"
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.execute("SELECT * FROM no_such_table")
    assert e.value.code == "42000"
    assert "no_such_table" in e.value.message


def test_script_errors_keep_their_codes(conn, unique):
    name = unique("raises")
    conn.execute(
        f"CREATE PYTHON3 SCALAR SCRIPT {name}() RETURNS INT AS\n"
        "def run(ctx):\n    raise ValueError('bad input')\n/"
    )
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.execute(f"SELECT {name}()")
    assert e.value.code == "22U10"
    assert "ValueError: bad input" in e.value.message
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.execute("CREATE PYTHON3 SCALER SCRIPT x() RETURNS INT AS\ndef run(ctx): pass\n/")
    assert e.value.code == "42E03"


def test_registration_errors(conn):
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.register_udf(lambda x: x, name="f", inputs=["BIGINT"], returns="BIGINT", accelerator="GpuAmd")
    assert e.value.code == "22U01"
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.register_udf(lambda x: x, name="f", inputs=["VARCHAR(x)"], returns="BIGINT")
    assert e.value.code == "42U15"
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.register_udf(lambda x: x, name="abs", inputs=["BIGINT"], returns="BIGINT")
    assert e.value.code == "42E01"
    with pytest.raises(accelsql.AccelsqlError) as e:
        conn.register_udf(lambda x: x, inputs=["BIGINT"], returns="BIGINT")  # name '<lambda>'
    assert e.value.code == "42E01"
    with pytest.raises(TypeError):
        conn.register_udf(lambda x: x, name="f", inputs=[42], returns="BIGINT")
    conn.register_udf(lambda x: x, name="f", inputs=[pa.int64()], returns=pa.int64())


def test_the_exception_can_be_raised_and_caught_like_any_other():
    with pytest.raises(Exception):
        raise accelsql.AccelsqlError("plain")
    assert accelsql.AccelsqlError.__module__ == "accelsql"


def test_a_restricted_connection_refuses_escapes_with_42501(tmp_path, unique):
    name = unique("doubled")
    with accelsql.connect(simulated_gpus=0, lower_ident=True) as admin:
        admin.execute(
            f"CREATE PYTHON3 SCALAR SCRIPT {name}(x INT) RETURNS INT AS\n"
            "def run(ctx):\n    return ctx.x * 2\n/"
        )
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    out = tmp_path / "out.csv"
    with accelsql.connect(simulated_gpus=0, lower_ident=True, restricted=True) as c:
        assert c.restricted
        for sql in [
            f"CREATE OR REPLACE PYTHON3 SCALAR SCRIPT {name}(x INT) RETURNS INT AS\n"
            "def run(ctx):\n    return 0\n/",
            "ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3=/bin/sh'",
            f"SELECT * FROM '{secret}'",
            f"COPY (SELECT 1 AS a) TO '{out}'",
            "SET datafusion.runtime.memory_limit = '100G'",
        ]:
            with pytest.raises(accelsql.AccelsqlError) as e:
                c.execute(sql)
            assert e.value.code == "42501", sql
        assert not out.exists()
        # The script the host created still runs, as it was.
        assert c.execute(f"SELECT {name}(21)").fetchval() == 42
    # Other connections of the engine are not restricted.
    with accelsql.connect(simulated_gpus=0) as other:
        assert not other.restricted
