"""Fixtures of the accelsql package tests: connections on two simulated GPUs."""

import itertools

import pytest

import accelsql

_names = itertools.count()


@pytest.fixture
def conn():
    """A connection to this process's engine with two simulated GPUs, naming result columns in
    DataFusion's lower case (``lower_ident=True``); the default, Exasol's upper case, is tested
    in test_exasol.py."""
    with accelsql.connect(simulated_gpus=2, lower_ident=True) as c:
        yield c


@pytest.fixture
def unique():
    """A name no other test uses (scripts are shared by every connection of the engine)."""
    return lambda prefix: f"{prefix}_{next(_names)}"
