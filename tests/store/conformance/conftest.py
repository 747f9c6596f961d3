"""The backend conformance suite: one set of tests, run against every backend.

``backend`` is a fresh backend of each kind in ``tmp_path`` (``sqlite``: ``SessionDB``;
``postgres``: ``PostgresBackend`` on a fresh database of the session's test server;
``files``: the ``FilesBackend`` of degraded mode); ``reopen()`` closes it and opens the same
kind on the same home (and database) again, for durability tests: every kind keeps
everything across a reopen (the files backend journals its inbox, ledger and outbox too),
so the durability tests hold for every kind alike. A backend joins by adding a row to ``KINDS`` (and to ``SERVER_KINDS`` when it
needs the test server: those tests are marked ``postgres``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from hermes_actors.store.backends.files.backend import FilesBackend
from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
from hermes_actors.store.backends.sqlite.db import SessionDB
from hermes_actors.store.protocol import Backend


class Place(NamedTuple):
    """Where a backend under test keeps its data: a home, and a database for server kinds."""

    home: Path
    dsn: str | None = None


def _postgres(place: Place) -> Backend:
    from hermes_actors.store.backends.postgres.backend import PostgresBackend

    assert place.dsn is not None
    return PostgresBackend(place.dsn, place.home, pool_size=2)


#: Backend kind -> how to open one on a place.
KINDS: dict[str, Callable[[Place], Backend]] = {
    "sqlite": lambda place: SessionDB(place.home / "state.db"),
    "postgres": _postgres,
    "files": lambda place: FilesBackend(place.home, JsonlTranscripts(place.home / "sessions")),
}
#: The kinds that need the test server (``postgres_dsn``).
SERVER_KINDS = frozenset({"postgres"})


class Opened:
    """The backend under test, with a way to reopen it."""

    def __init__(self, kind: str, place: Place) -> None:
        self.kind = kind
        self.place = place
        self.home = place.home
        self.backend = KINDS[kind](place)
        self._all = [self.backend]

    def reopen(self) -> Backend:
        """Close the backend and open the same kind on the same home (and database)."""
        self.backend.close()
        self.backend = KINDS[self.kind](self.place)
        self._all.append(self.backend)
        return self.backend

    def close(self) -> None:
        for backend in self._all:
            backend.close()


@pytest.fixture(params=[pytest.param(kind, marks=pytest.mark.postgres)
                        if kind in SERVER_KINDS else kind for kind in sorted(KINDS)])
def opened(request, tmp_path) -> Opened:
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    dsn = request.getfixturevalue("postgres_dsn") if request.param in SERVER_KINDS else None
    it = Opened(request.param, Place(home, dsn))
    yield it
    it.close()


@pytest.fixture
def backend(opened) -> Backend:
    return opened.backend
