"""``PostgresBackend``: the session store's backend on a PostgreSQL server (§16).

The same tables with the same meanings as :class:`~hermes_actors.store.backends.sqlite.db.
SessionDB` (sessions, messages, routing with its flag columns, inbox, deliveries, outbox,
node state), the same operation records and answers, checked by the same conformance suite.
What differs is where the work runs:

* opening connects once (a clear :class:`~hermes_actors.errors.StoreUnreachableError` when
  the server cannot be reached, the DSN's password masked), runs the forward migrations of
  :mod:`~.schema`, then opens the read pool (:mod:`~.connection`);
* writes go through the :class:`~.committer.GroupCommitter` to the :class:`~.writer.Writer`
  (one write connection, group commit); ``apply_later`` only queues;
* reads run on a pooled connection in the caller's thread or greenlet, concurrently. A read
  whose connection the server dropped is run once more on a fresh one (reads have no
  effects); a read that still fails raises :class:`StoreUnavailableError`.

The node id is kept in the home (``<home>/node_id``), not in the database: one server may
hold the store of several gateway homes (the cluster issue builds on that), and each home is
one node. Node state a degraded start left in the home is imported into ``node_state`` as on
SQLite.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

from hermes_actors.config import DEFAULT_POOL_SIZE
from hermes_actors.errors import StoreError, StoreUnavailableError
from hermes_actors.model.ids import new_id
from hermes_actors.store.backends.closing import ClosesOnce
from hermes_actors.store.backends.files.node_files import (
    import_home_files,
    read_node_id_file,
    write_node_id_file,
)
from hermes_actors.store.backends.postgres import fts
from hermes_actors.store.backends.postgres.committer import GroupCommitter
from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.backends.postgres.models import Delivery, Session, sql_of
from hermes_actors.store.backends.postgres.operations import PUT_NODE_VALUE
from hermes_actors.store.backends.postgres.reads import Reads
from hermes_actors.store.backends.postgres.schema import (
    SCHEMA_VERSION,
    applied_version,
    migrate,
    repair_canonical_tables,
    schema_problems,
)
from hermes_actors.store.backends.postgres.writer import Writer
from hermes_actors.store.ops import Op

__all__ = ["DEFAULT_POOL_SIZE", "PostgresBackend", "PostgresStatistics"]

log = logging.getLogger(__name__)

class PostgresStatistics(NamedTuple):
    """The backend's record: write transactions and lists, and its read pool."""

    #: Write transactions committed or attempted (one per group of lists).
    transactions: int
    #: Op lists written.
    lists: int
    #: The most lists one transaction held.
    largest_group: int
    #: Lists waiting for the next transaction now.
    waiting: int
    #: Connections of the read pool (``store.pool_size``).
    pool_size: int
    #: Read connections idle in the pool now.
    pool_available: int
    #: Reads waiting for a free connection of the pool now.
    pool_waiting: int = 0


class PostgresBackend(Reads, ClosesOnce):
    """The store on the PostgreSQL database ``dsn`` names, for the gateway home ``home``.

    ``pool_size`` read connections are opened at start, plus one for writes. With
    ``read_only=True`` nothing is created or changed (``hermes-actors db check``): the
    database must hold a hermes schema, every session is read-only, writes raise
    :class:`StoreError`. Raises :class:`~hermes_actors.errors.StoreUnreachableError` when
    the server cannot be used at all.
    """

    #: The backend's kind (``Backend.kind``).
    kind = "postgres"
    #: Whether the data lives in the home (``Backend.local``).
    local = False

    def __init__(self, dsn: str, home: str | Path, *, pool_size: int = DEFAULT_POOL_SIZE,
                 read_only: bool = False, writer_idle_timeout: float | None = None) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self._server = Server(dsn, read_only=read_only,
                              writer_idle_timeout=writer_idle_timeout)
        #: The database, as it may be shown (the DSN with its password masked).
        self.where = self._server.where
        #: The gateway home this store belongs to.
        self.home = Path(home)
        #: Whether this handle was opened read-only.
        self.read_only = read_only
        self._closed = False
        self._close_lock = threading.Lock()
        self._open()
        super().__init__(self._server, self._server.pool(pool_size))
        self._pool_size = pool_size
        self._writer: Writer | None = None
        self._committer: GroupCommitter | None = None
        if not read_only:
            self._writer = Writer(self._server)
            self._committer = GroupCommitter(self._writer.apply_group)

    def _open(self) -> None:
        conn = self._server.connect_at_start()
        try:
            if self.read_only:
                version = applied_version(conn)
                if version < 1:
                    raise StoreUnavailableError(
                        f"{self.where} holds no hermes_actors database")
                self._schema = version
            else:
                migrate(conn, where=self.where)
                repair_canonical_tables(conn)
                self._schema = SCHEMA_VERSION
            self._node_id = read_node_id_file(self.home) or ""
            if not self.read_only:
                if not self._node_id:
                    self._node_id = new_id()
                    write_node_id_file(self.home, self._node_id)
                self._import_home_files(conn)
        except psycopg.Error as exc:
            raise self._server.unavailable("open", exc) from None
        except OSError as exc:
            raise StoreUnavailableError(f"cannot keep the node id in {self.home}: {exc}") from None
        finally:
            conn.close()

    def _import_home_files(self, conn: Any) -> None:
        def put(found: dict[str, str]) -> None:
            with conn.transaction():
                for name, value in found.items():
                    conn.execute(PUT_NODE_VALUE, (self._node_id, name, value))

        import_home_files(self.home, put, self.where)

    def close(self) -> None:
        """Apply the writes already queued, then close every connection (idempotent)."""
        if not self._first_close():
            return
        try:
            if self._committer is not None:
                self._committer.close()
        finally:
            if self._writer is not None:
                self._writer.close()
            self._pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store database {self.where} is closed")

    def _writable(self) -> GroupCommitter:
        self._check_open()
        if self._committer is None:
            raise StoreError(f"{self.where} is open read-only")
        return self._committer

    def statistics(self) -> PostgresStatistics:
        """Write transactions and lists so far, waiting lists, the read pool's size."""
        stats = self._pool.get_stats()
        c = self._committer.statistics() if self._committer is not None else None
        return PostgresStatistics(
            c.transactions if c else 0, c.lists if c else 0, c.largest if c else 0,
            c.waiting if c else 0, self._pool_size, stats.get("pool_available", 0),
            stats.get("requests_waiting", 0))

    # -- writes -----------------------------------------------------------------------------

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops`` in order as one transaction; one result per op (see the writer)."""
        return self._writable().run(list(ops))

    def apply_later(self, ops: list[Op], callback: Callable[[bool, Any], None]) -> None:
        """:meth:`apply` without waiting: ``callback(ok, results_or_error)`` on the committer
        once committed (it must not block)."""
        self._writable().post(list(ops), callback)

    # -- identity ---------------------------------------------------------------------------

    def node_id(self) -> str:
        """The home's node id (``<home>/node_id``, created at the first open)."""
        return self._node_id

    # -- the tools of ``hermes-actors db`` --------------------------------------------------

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on a pooled connection and return its rows (autocommit): a
        diagnostic and fault-injection hook for tests and tools, never used by the store."""
        def run(cur: Any) -> list[tuple[Any, ...]]:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description is not None else []

        return self._read(run)

    def session_row(self, session_id: str) -> dict[str, Any] | None:
        """The ``sessions`` row of ``session_id`` as a dict (``source`` decoded), or ``None``."""
        s = Session
        sql, params = sql_of(s.select().where(s.id == session_id))

        def read(cur: Any) -> dict[str, Any] | None:
            cur.execute(sql, params)
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([c.name for c in cur.description], row, strict=True))

        found = self._read(read)
        if found is not None and found["source"]:
            found["source"] = json.loads(found["source"])
        return found

    def ledger_rows(
        self, states: tuple[str, ...] | None = None, session_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows as dicts of every column, oldest first, optionally filtered."""
        d = Delivery
        query = d.select()
        if states is not None:
            query = query.where(d.state.in_(list(states)))
        if session_key is not None:
            query = query.where(d.session_key == session_key)
        sql, params = sql_of(query.order_by(d.created_at, d.obligation_id))

        def read(cur: Any) -> list[dict[str, Any]]:
            cur.execute(sql, params)
            names = [c.name for c in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

        return self._read(read)

    def search(self, query: str, limit: int = 20) -> list[dict[str, Any]]:
        """Transcript messages matching ``query`` (FTS5 syntax, see :mod:`~.ftsquery`), with
        ``id`` and ``session_id``, best match first; a malformed query raises ``StoreError``."""
        return self._read(lambda cur: fts.search(cur, query, limit))

    def check_fts(self) -> str:
        """``"ok"``, ``"missing"`` or ``"corrupt"``, from the server's catalog."""
        return self._read(fts.status)

    def rebuild_fts(self) -> None:
        """Drop and rebuild the full-text index from ``messages`` (no message is touched)."""
        if self.read_only:
            raise StoreError(f"{self.where} is open read-only")
        self._read(lambda cur: fts.rebuild(cur.connection))

    def detach_fts(self) -> None:
        """Drop the full-text index; messages stay, search is refused until a rebuild."""
        if self.read_only:
            raise StoreError(f"{self.where} is open read-only")
        self._read(lambda cur: fts.detach(cur.connection))

    def integrity_check(self) -> str:
        """``"ok"``, or what is wrong with the schema (version, a missing table or index,
        an index the server marks unusable)."""
        problems = self._read(schema_problems)
        return "ok" if not problems else "; ".join(problems[:5])
