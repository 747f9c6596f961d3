"""``SqliteSnapshot``: one consistent, read-only view of a ``state.db``, read table by table.

What ``hermes-actors db migrate`` reads (:mod:`hermes_actors.store.transfer`). The file is
opened through the same read-only URI as ``db check`` (``mode=ro``; ``immutable`` when no
WAL exists), never migrated or repaired, and every read runs in ONE read transaction, so
the counts and the rows belong to the same moment. Tables are streamed in batches in
rowid order (a million messages are never in memory at once).

A writer child process that outlived its gateway for a moment (it holds
``state.db-writer.lock`` until its last commit is done) is waited for, as a restarted
gateway waits for it, so the snapshot never misses a commit in flight. The home lock is the
caller's business.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from hermes_actors.errors import StoreError, StoreUnavailableError, UsageError
from hermes_actors.store.backends.sqlite.db import BUSY_TIMEOUT_MS, read_only_uri
from hermes_actors.store.backends.sqlite.schema import SCHEMA_VERSION
from hermes_actors.store.backends.sqlite.writer_process import LOCK_SUFFIX, writer_lock

__all__ = ["SqliteSnapshot"]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteSnapshot:
    """A read-only snapshot of the database at ``path`` (a context manager).

    Entering it raises :class:`~hermes_actors.errors.StoreUnavailableError` when the file
    cannot be read as a database, and :class:`~hermes_actors.errors.UsageError` when its
    schema is not the one this build writes (an older one is upgraded by starting the
    gateway on it once; a newer one needs a newer hermes_actors).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        #: The database file.
        self.path = Path(path)
        #: The home's node id (``meta.node_id``), or ``None`` when it has none yet.
        self.node_id: str | None = None
        self._conn: sqlite3.Connection | None = None
        self._writer_lock: int | None = None
        self._sequences: dict[str, int] = {}

    def __enter__(self) -> SqliteSnapshot:
        if not self.path.is_file():
            raise StoreUnavailableError(f"no database file at {self.path}")
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _open(self) -> None:
        if Path(str(self.path) + LOCK_SUFFIX).exists():
            self._writer_lock = writer_lock(self.path, BUSY_TIMEOUT_MS / 1000, time.sleep)
        try:
            conn = sqlite3.connect(read_only_uri(self.path), uri=True, isolation_level=None,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
            self._conn = conn
            conn.execute("PRAGMA query_only = 1")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < 1:
                raise StoreUnavailableError(f"{self.path} is not a hermes_actors database")
            if version < SCHEMA_VERSION:
                raise UsageError(
                    f"{self.path} has schema version {version}, older than this hermes_actors "
                    f"writes ({SCHEMA_VERSION}): start the gateway on it once (it upgrades "
                    "the file), stop it, then run db migrate again")
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"{self.path} has schema version {version}, newer than this hermes_actors "
                    f"supports ({SCHEMA_VERSION}); upgrade hermes_actors")
            conn.execute("BEGIN")  # every read below sees the same snapshot
            row = conn.execute("SELECT value FROM meta WHERE name = 'node_id'").fetchone()
            self.node_id = row[0] if row else None
            self._sequences = {name: int(seq) for name, seq in conn.execute(
                "SELECT name, seq FROM sqlite_sequence")}
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read {self.path}: {exc}") from None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the snapshot of {self.path} is closed")
        return self._conn

    def count(self, table: str) -> int:
        """How many rows ``table`` has."""
        try:
            return int(self._connection().execute(
                f"SELECT count(*) FROM {_quoted(table)}").fetchone()[0])
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read {table} of {self.path}: {exc}") from None

    def high_water(self, table: str) -> int:
        """The highest id ``table``'s ``AUTOINCREMENT`` column has ever handed out (rows
        pruned since included; 0 when it never handed one out)."""
        return self._sequences.get(table, 0)

    def batches(self, table: str, columns: tuple[str, ...], flags: tuple[str, ...] = (),
                size: int = 5_000) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of ``table`` (these ``columns``, in rowid order) in lists of at most
        ``size``; a flag column comes as 0 or 1 whatever integer SQLite holds."""
        select = ", ".join(f"({_quoted(c)} != 0)" if c in flags else _quoted(c)
                           for c in columns)
        try:
            cursor = self._connection().execute(
                f"SELECT {select} FROM {_quoted(table)} ORDER BY rowid")
            while True:
                rows = cursor.fetchmany(size)
                if not rows:
                    return
                yield rows
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read {table} of {self.path}: {exc}") from None

    def close(self) -> None:
        """End the snapshot and release the file (idempotent)."""
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                conn.close()
        finally:
            if self._writer_lock is not None:
                os.close(self._writer_lock)
                self._writer_lock = None
