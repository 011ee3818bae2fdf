"""Fixtures of the accelsql package tests: connections on two simulated GPUs."""

import itertools
import os

import pytest

import accelsql

# Servers and shells the tests start keep their tables in memory unless a test names a data
# directory (their default is the user's data folder).
os.environ.setdefault("ACCELSQL_DATA_DIR", ":memory:")

_names = itertools.count()


@pytest.fixture
def conn():
    """A connection to this process's engine with two simulated GPUs, naming result columns in
    DataFusion's lower case (``lower_ident=True``); the default, Exasol's upper case, is tested
    in test_exasol.py. Each test works in a schema of its own (the engine's tables are shared by
    all its connections), dropped with its tables afterwards."""
    schema = f"test_{next(_names)}"
    with accelsql.connect(simulated_gpus=2, lower_ident=True, schema=schema) as c:
        yield c
        try:
            c.execute("CLOSE SCHEMA")
            c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        except accelsql.Error:
            pass


@pytest.fixture
def unique():
    """A name no other test uses (scripts are shared by every connection of the engine)."""
    return lambda prefix: f"{prefix}_{next(_names)}"


@pytest.fixture(scope="session")
def accelsql_binary():
    """The `accelsql` binary the server tests start (``ACCELSQL_BIN``, else target/debug/accelsql);
    missing, the test fails under CI and is skipped elsewhere."""
    from pathlib import Path

    path = os.environ.get("ACCELSQL_BIN") or str(
        Path(__file__).resolve().parents[2] / "target" / "debug" / "accelsql"
    )
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail(f"the accelsql binary is missing at {path}")
        pytest.skip(f"SKIPPED: no accelsql binary at {path}")
    return path
