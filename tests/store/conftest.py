"""Fixtures for the store tests: a fake clock, real homes in ``tmp_path``, stores closed after."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_actors.model.source import SessionSource
from hermes_actors.store import SessionStore
from hermes_actors.testing import FakeClock

T0 = 1_700_000_000.0


def dm(chat_id: str = "42", **fields) -> SessionSource:
    """A Telegram DM source."""
    return SessionSource("telegram", chat_id=chat_id, user_id="7", user_name="Alice", **fields)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def make_store(home: Path, clock: FakeClock):
    """``make_store(**kwargs)`` opens a store on ``home/sessions`` (no mirror timer); every
    store it made is closed after the test."""
    stores: list[SessionStore] = []

    def make(sessions_dir: Path | None = None, **kwargs) -> SessionStore:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("mirror_interval", None)
        store = SessionStore(sessions_dir or home / "sessions", **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store) -> SessionStore:
    return make_store()


@pytest.fixture
def executor():
    """A DbExecutor, closed after the test."""
    from hermes_actors.store.backends.sqlite.executor import DbExecutor

    ex = DbExecutor(name="test-db")
    yield ex
    ex.close()
