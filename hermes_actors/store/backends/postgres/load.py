"""``PostgresLoad``: the target side of ``hermes-actors db migrate``, one transaction.

:mod:`hermes_actors.store.transfer` drives it: :meth:`~PostgresLoad.prepare` (the schema,
the tables locked, the check that they hold no rows, the secondary indexes dropped),
:meth:`~PostgresLoad.copy` per table (``COPY ... FROM STDIN`` through psycopg: a million
rows stream without a round trip each), :meth:`~PostgresLoad.finish_schema` (the indexes
and the full-text index built once over the copied rows, then the schema checked as ``db
check`` checks it: a million messages took 20 s here, against 31 s with the indexes kept
row by row),
:meth:`~PostgresLoad.set_sequence` per identity column, :meth:`~PostgresLoad.counts`, and
:meth:`~PostgresLoad.commit`. Everything, the schema included, happens in one transaction
(PostgreSQL's DDL is transactional): leaving the context without :meth:`commit` rolls it
all back, so a failed run leaves the database exactly as it found it and can be repeated.

The migrations' advisory lock is held from :meth:`prepare` to the end, so a gateway opening
the database meanwhile waits and then sees either nothing or everything. Errors name the
database by its masked DSN (:class:`~.connection.Server`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

from hermes_actors.errors import StoreError, UsageError
from hermes_actors.store.backends.postgres.batch import without_nul
from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.backends.postgres.schema import (
    CANONICAL_INDEXES,
    CANONICAL_TABLES,
    FTS_DDL,
    FTS_INDEX,
    migrate,
    repair_canonical_tables,
    schema_problems,
)

__all__ = ["LOCK_TIMEOUT", "PROGRESS_ROWS", "PostgresLoad"]

#: How long :meth:`PostgresLoad.prepare` waits for a lock a live client of the database
#: holds before it gives up (a PostgreSQL interval).
LOCK_TIMEOUT = "10s"
#: Rows between two progress reports of one table.
PROGRESS_ROWS = 100_000

_RETRY = "nothing was committed: fix the cause and run db migrate again"


class PostgresLoad:
    """One load of an empty PostgreSQL database (a context manager; see the module
    docstring). Entering connects: :class:`~hermes_actors.errors.StoreUnreachableError`
    when the server cannot be reached."""

    def __init__(self, dsn: str) -> None:
        self._server = Server(dsn)
        #: The database, as it may be shown (password masked).
        self.where = self._server.where
        self._conn: psycopg.Connection[Any] | None = None
        self._committed = False

    def __enter__(self) -> PostgresLoad:
        self._conn = self._server.connect_at_start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if not self._committed and not conn.closed:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            pass  # a connection that broke rolled back by itself
        finally:
            conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._committed:
            raise StoreError(f"the load of {self.where} is over")
        return self._conn

    def _failed(self, doing: str, exc: psycopg.Error) -> StoreError:
        return StoreError(f"{doing} {self.where} failed: {self._server.scrub(exc)}; {_RETRY}")

    # -- the steps --------------------------------------------------------------------------

    def prepare(self) -> None:
        """Begin the transaction, bring the schema to this build's version, lock the
        canonical tables, refuse (:class:`~hermes_actors.errors.UsageError`) when any holds
        a row, and drop their secondary indexes (:meth:`finish_schema` builds them again)."""
        conn = self._connection()
        try:
            conn.execute("BEGIN")
            conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            migrate(conn, where=self.where)
            repair_canonical_tables(conn)
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in CANONICAL_TABLES)))
            filled = [name for name in CANONICAL_TABLES if conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(name))
            ).fetchone() == (True,)]
        except psycopg.Error as exc:
            raise self._failed("preparing", exc) from None
        if filled:
            raise UsageError(
                f"the target {self.where} is not empty ({', '.join(filled)} hold rows): "
                "db migrate copies a home into an empty database only")
        try:
            for name in (*CANONICAL_INDEXES, FTS_INDEX):
                conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            raise self._failed("preparing", exc) from None

    def copy(self, table: str, columns: tuple[str, ...],
             batches: Iterable[list[tuple[Any, ...]]],
             progress: Callable[[int], None] | None = None) -> int:
        """``COPY`` every row of ``batches`` into ``table``'s ``columns``; returns how many
        rows were written. ``progress(rows so far)`` every :data:`PROGRESS_ROWS` rows."""
        conn = self._connection()
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in columns))
        written, reported = 0, 0
        try:
            with conn.cursor() as cur, cur.copy(statement) as copy:
                for batch in batches:
                    for row in batch:
                        copy.write_row([without_nul(v) if type(v) is str else v for v in row])
                    written += len(batch)
                    if progress is not None and written - reported >= PROGRESS_ROWS:
                        progress(written)
                        reported = written
        except psycopg.Error as exc:
            raise self._failed(f"copying {table} into", exc) from None
        return written

    def finish_schema(self) -> None:
        """Build the dropped indexes and the full-text index over the copied rows, then
        check the schema (version, tables, indexes) as ``db check`` does."""
        conn = self._connection()
        try:
            repair_canonical_tables(conn)
            conn.execute(FTS_DDL)
            with conn.cursor() as cur:
                problems = schema_problems(cur)
        except psycopg.Error as exc:
            raise self._failed("indexing", exc) from None
        if problems:
            raise StoreError(f"the schema of {self.where} is not right after the copy "
                             f"({'; '.join(problems)}); {_RETRY}")

    def set_sequence(self, table: str, column: str, high_water: int) -> int:
        """Move the identity sequence of ``table.column`` past the copied ids and past
        ``high_water`` (the highest id the source ever handed out): the next row gets the
        next id, never one a pruned row had. Returns the last id handed out (0: none)."""
        conn = self._connection()
        try:
            found = conn.execute(sql.SQL("SELECT coalesce(max({}), 0) FROM {}").format(
                sql.Identifier(column), sql.Identifier(table))).fetchone()
            last = max(int(found[0]) if found else 0, int(high_water))
            conn.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)",
                         (table, column, max(last, 1), last > 0))
        except psycopg.Error as exc:
            raise self._failed(f"setting the sequence of {table}.{column} in", exc) from None
        return last

    def counts(self, tables: Iterable[str]) -> dict[str, int]:
        """Rows per table, as this transaction sees them."""
        conn = self._connection()
        try:
            out = {}
            for name in tables:
                row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(name))).fetchone()
                out[name] = int(row[0]) if row else 0
            return out
        except psycopg.Error as exc:
            raise self._failed("counting the rows of", exc) from None

    def commit(self) -> None:
        """Commit everything. A connection lost during the ``COMMIT`` leaves its outcome
        unknown: the error says how to find out (a rerun refuses a database that holds the
        copy)."""
        conn = self._connection()
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise StoreError(
                f"committing the copy to {self.where} failed: {self._server.scrub(exc)}; "
                "it may or may not have been committed: run db migrate again (it refuses a "
                "database that holds the copy) or db check with the new store") from None
        self._committed = True
