"""Fixtures of the accelsql package tests: connections on two simulated GPUs."""

import itertools
import os

import pytest

import accelsql

# Servers and shells the tests start keep their tables in memory unless a test names a data
# directory (their default is the user's data folder).
os.environ.setdefault("ACCELSQL_DATA_DIR", ":memory:")
# sqlalchemy-exasol would report each connection to Exasol's telemetry service: the tests
# reach 127.0.0.1 only.
os.environ.setdefault("EXASOL_TELEMETRY_DISABLE", "1")

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


class _ExasolServer(tuple):
    """(Exasol address, token, fingerprint), and the Flight SQL URL as `.flight`."""

    flight = None


@pytest.fixture(scope="module")
def exasol_server(tmp_path_factory, accelsql_binary):
    """An `accelsql serve --exasol-port` of one simulated GPU, for the module: its Exasol
    address (HOST:PORT), its token (the password of `sys`), its TLS certificate's fingerprint, and
    its Flight SQL URL as `.flight`."""
    import re
    import subprocess

    tmp = tmp_path_factory.mktemp("exasol")
    proc = subprocess.Popen(
        [accelsql_binary, "serve", "--listen", "127.0.0.1:0", "--exasol-port", "0", "--simulated-gpus", "1",
         "--data-dir", str(tmp / "data"), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines = [proc.stdout.readline() for _ in range(4)]
    token = re.match(r"token: (\S+)", lines[1]).group(1)
    dsn = re.match(r"exasol: (\S+)", lines[2]).group(1)
    fingerprint = re.match(r"exasol-fingerprint: ([0-9A-F]{64})$", lines[3].strip()).group(1)
    server = _ExasolServer((dsn, token, fingerprint))
    server.flight = re.match(r"listening: (\S+)", lines[0]).group(1)
    yield server
    proc.terminate()
    assert proc.wait(timeout=20) == 0
