"""Fixtures of the accelsql package tests: connections on two simulated GPUs."""

import itertools

import pytest

import accelsql

_names = itertools.count()


@pytest.fixture
def conn():
    """A connection to this process's engine with two simulated GPUs."""
    with accelsql.connect(simulated_gpus=2) as c:
        yield c


@pytest.fixture
def unique():
    """A name no other test uses (scripts are shared by every connection of the engine)."""
    return lambda prefix: f"{prefix}_{next(_names)}"
