"""Fixtures of the PostgreSQL backend's own tests (every test here is marked ``postgres``)."""

from __future__ import annotations

import pytest

from hermes_actors.store.backends.postgres.backend import PostgresBackend


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/store/postgres/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def open_pg(postgres_dsn, home):
    """``open_pg(**kwargs)`` opens a PostgresBackend on the test's database; all are closed
    after the test."""
    opened: list[PostgresBackend] = []

    def make(dsn: str | None = None, **kwargs) -> PostgresBackend:
        kwargs.setdefault("pool_size", 2)
        backend = PostgresBackend(dsn or postgres_dsn, kwargs.pop("home", home), **kwargs)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


@pytest.fixture
def pg(open_pg) -> PostgresBackend:
    return open_pg()
