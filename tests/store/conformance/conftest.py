"""The backend conformance suite: one set of tests, run against every backend.

``backend`` is a fresh backend of each kind in ``tmp_path`` (``sqlite``: ``SessionDB``;
``files``: the ``FilesBackend`` of degraded mode); ``reopen()`` closes it and opens the same
kind on the same home again, for durability tests. ``DURABLE[kind]`` says what a kind keeps
across a reopen (the files backend keeps its inbox, ledger and outbox in memory only). A
backend added to the project (PostgreSQL) joins by adding a row to ``KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_actors.store.backends.files.backend import FilesBackend
from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
from hermes_actors.store.backends.sqlite.db import SessionDB
from hermes_actors.store.protocol import Backend

#: Backend kind -> how to open one on a home.
KINDS: dict[str, Callable[[Path], Backend]] = {
    "sqlite": lambda home: SessionDB(home / "state.db"),
    "files": lambda home: FilesBackend(home, JsonlTranscripts(home / "sessions")),
}

#: What each kind keeps across a close and reopen.
DURABLE: dict[str, frozenset[str]] = {
    "sqlite": frozenset({"routing", "messages", "node_state", "inbox", "ledger", "outbox"}),
    "files": frozenset({"routing", "messages", "node_state"}),
}


class Opened:
    """The backend under test, with a way to reopen it."""

    def __init__(self, kind: str, home: Path) -> None:
        self.kind = kind
        self.home = home
        self.backend = KINDS[kind](home)
        self._all = [self.backend]

    def reopen(self) -> Backend:
        """Close the backend and open the same kind on the same home."""
        self.backend.close()
        self.backend = KINDS[self.kind](self.home)
        self._all.append(self.backend)
        return self.backend

    def durable(self, what: str) -> bool:
        """Whether this kind keeps ``what`` across a reopen."""
        return what in DURABLE[self.kind]

    def close(self) -> None:
        for backend in self._all:
            backend.close()


@pytest.fixture(params=sorted(KINDS))
def opened(request, tmp_path) -> Opened:
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    it = Opened(request.param, home)
    yield it
    it.close()


@pytest.fixture
def backend(opened) -> Backend:
    return opened.backend
