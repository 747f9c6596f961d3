"""Fixtures of the cluster tests (every test here is marked ``cluster``; those on the test
server are also marked ``postgres``, in their modules)."""

from __future__ import annotations

import threading

import pytest

from hermes_actors import InMemoryAdapter
from hermes_actors.testing import FakeClock
from hermes_actors.testing.leases import MemoryLeases


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/cluster/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory(clock) -> MemoryLeases:
    """An in-memory lease table on the test's fake clock."""
    return MemoryLeases(clock)


@pytest.fixture
def pg_leases(postgres_dsn):
    """``pg_leases()`` opens a PgLeases on the test's database; all are closed after."""
    from hermes_actors.store.backends.postgres.leases import PgLeases

    opened = []

    def make(dsn: str | None = None, **kwargs):
        leases = PgLeases.open(dsn or postgres_dsn, **kwargs)
        opened.append(leases)
        return leases

    yield make
    for leases in opened:
        leases.close()


class SlowFirstAnswer(InMemoryAdapter):
    """The first send of a ``/help`` answer blocks until ``release`` is set (a platform's
    rate-limit wait, up to 30 s)."""

    def __init__(self) -> None:
        super().__init__("telegram")
        self.entered, self.release = threading.Event(), threading.Event()
        self._first = True

    def send(self, target, text):
        if self._first and "/help" in text:
            self._first = False
            self.entered.set()
            assert self.release.wait(60)
        return super().send(target, text)

