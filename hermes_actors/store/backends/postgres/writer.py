"""``Writer``: op lists applied as transactions on the write connection, with group commit.

The committer (:mod:`~hermes_actors.store.backends.postgres.committer`) hands over the lists
that waited together; they are applied in ONE transaction. Its statements are collected in
a :class:`~.batch.Batch` and sent as one query, ``BEGIN`` first (one round trip for the
whole group, instead of one per statement: under gevent each round trip was also a wait of
the committer greenlet behind every other greenlet of the hub); the operations' results are
read from the answers (``batch.Later``), and only then is ``COMMIT`` sent, on its own, so
that a connection that breaks before it still means "nothing was committed" (2. below).
If anything in it fails, it is
rolled back and every list is applied alone, in arrival order, so one bad list fails only
its own caller (as on SQLite, a replay was preferred to a ``SAVEPOINT`` per list: failures
are rare, and two more round trips per list are not).

Failures, in the order they are handled:

1. The server refused a statement (a constraint, data it cannot store):
   :class:`~hermes_actors.errors.StoreError`
   for that list, no retry; it is a programming error or bad data, not an outage.
2. The connection broke, or the server asked for a retry (a serialization failure, a
   deadlock), or no connection could be opened, before ``COMMIT`` was sent: nothing was
   committed, so the transaction is run again on a fresh connection after a pause
   (:class:`Backoff`: capped exponential backoff with jitter, from
   :data:`RETRY_FIRST_DELAY` doubling up to :data:`RETRY_MAX_DELAY`, while the pauses fit
   in :data:`RETRY_BUDGET` seconds), then :class:`StoreUnavailableError` (an outage: the
   gateway is replaced). A server restart takes a second or two: immediate retries would
   all meet the closed port and turn that blip into an outage and a gateway replacement.
3. The connection broke *during* ``COMMIT``: the transaction may or may not have committed,
   and a replay could append a message or an outbox row twice. Nothing is retried; every
   list of the transaction fails with :class:`StoreUnavailableError` saying so.

The budget is that of one group: once a connection cannot be opened within it, the rest of
the group fails at once with the same error instead of waiting again per list. While the
committer pauses, callers queue behind it (the committer's queue is bounded).
"""

from __future__ import annotations

import logging
import random
import time
import zlib
from collections.abc import Callable
from typing import Any

import psycopg

from hermes_actors.errors import StoreUnavailableError
from hermes_actors.store.backends.postgres.batch import Batch, Later
from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.backends.postgres.operations import PostgresOps
from hermes_actors.store.ops import Op, OutboxAppend

__all__ = ["RETRY_BUDGET", "RETRY_FIRST_DELAY", "RETRY_MAX_DELAY", "Backoff", "Writer",
           "outbox_lock_keys"]

#: The first key of the outbox's advisory locks ("outb" in ASCII): with the second key, a
#: hash of the chat, one lock per chat (two-key locks never meet the migrations' one-key one).
OUTBOX_LOCK_CLASS = 0x6F757462
#: Taken first in a transaction that appends to the outbox, one per chat, in key order.
_OUTBOX_LOCKS = ("SELECT pg_advisory_xact_lock(%s, k) FROM unnest(%s::integer[])"
                 " WITH ORDINALITY AS keys(k, n) ORDER BY n")


def outbox_lock_keys(lists: list[list[Op]]) -> list[int]:
    """The second keys of the outbox locks a transaction of ``lists`` takes: one per chat it
    appends to, sorted (every transaction takes them in the same order: no deadlock).

    Why: every node of a cluster has its own committer, and cursors come from one sequence,
    so two nodes appending to one chat (two users' sessions of a group, on two nodes) could
    commit cursor 2 before cursor 1, and a reader past 2 would never see 1. Holding the
    chat's lock from before its cursor is drawn to the commit keeps one chat's cursors
    visible in their order."""
    keys = {zlib.crc32(f"{op.platform}\0{op.chat_id}".encode()) for ops in lists
            for op in ops if type(op) is OutboxAppend}
    return sorted(k - (1 << 32) if k >= 1 << 31 else k for k in keys)  # as int4

log = logging.getLogger(__name__)

#: Seconds of the first pause before a failed write transaction is tried again.
RETRY_FIRST_DELAY = 0.1
#: The longest pause between two attempts (the pauses double up to it).
RETRY_MAX_DELAY = 2.0
#: Seconds of pauses one group of writes may spend before the database is declared
#: unavailable: a server restart (about 2 s) fits, a real outage is reported within ~10 s
#: (plus the connect timeout of an attempt in progress).
RETRY_BUDGET = 8.0


class Backoff:
    """The pauses between attempts of one group's writes: capped exponential backoff with
    "equal jitter" (half the delay fixed, half random, so many writers of a cluster do not
    reconnect in step), within a total of ``budget`` seconds. ``sleep``, ``clock`` and
    ``rand`` are injectable for tests (``time.sleep`` is gevent's under monkey-patching, so
    the committer greenlet pauses cooperatively)."""

    def __init__(self, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random,
                 budget: float = RETRY_BUDGET) -> None:
        self._sleep = sleep
        self._clock = clock
        self._rand = rand
        self._deadline = clock() + budget
        #: Pauses taken so far.
        self.pauses = 0

    def pause(self) -> bool:
        """Sleep before the next attempt and return ``True``; ``False`` (no sleep) when the
        pause would end past the budget."""
        delay = min(RETRY_MAX_DELAY, RETRY_FIRST_DELAY * 2 ** self.pauses)
        delay = delay / 2 + self._rand() * delay / 2
        if self._clock() + delay > self._deadline:
            return False
        self.pauses += 1
        self._sleep(delay)
        return True


class _OutcomeUnknown(Exception):
    """The connection broke during ``COMMIT``."""

    def __init__(self, error: StoreUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


class _NoConnection(Exception):
    """No write connection could be opened."""

    def __init__(self, error: StoreUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


class Writer:
    """Applies op lists on one write connection (only the committer calls it)."""

    def __init__(self, server: Server, *, backoff: Callable[[], Backoff] = Backoff) -> None:
        self._server = server
        #: Makes the pauses of one group (a test passes one with a fake clock).
        self._backoff = backoff
        self._ops = PostgresOps()
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self._drop()
            try:
                conn = self._conn = self._server.connect(writer=True)
            except StoreUnavailableError as exc:
                raise _NoConnection(exc) from None
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # already broken
                pass

    def close(self) -> None:
        """Close the write connection (the committer has stopped)."""
        self._drop()

    def _transaction(self, body: Callable[[Batch], list[list[Any]]]) -> list[list[Any]]:
        """One attempt: ``BEGIN`` and ``body(batch)`` sent as one batch, the results read,
        then ``COMMIT``. ``body`` returns one list of results per op list."""
        conn = self._connection()
        cur = conn.cursor()
        try:
            batch = Batch(conn)
            pending = body(batch)
            batch.send()
            result = [[r.value() if isinstance(r, Later) else r for r in results]
                      for results in pending]
        except BaseException:
            self._ops.committed(False)
            try:
                cur.execute("ROLLBACK")
            except psycopg.Error:
                self._drop()  # broken: the server rolls back when it sees the socket close
            raise
        try:
            cur.execute("COMMIT")
        except psycopg.Error as exc:
            self._ops.committed(False)
            if conn.closed or conn.broken:
                self._drop()
                raise _OutcomeUnknown(StoreUnavailableError(
                    f"the connection to {self._server.where} broke during COMMIT, so the "
                    f"write may or may not be stored: {self._server.scrub(exc)}")) from None
            raise
        self._ops.committed(True)
        return result

    def _statements(self, batch: Batch, lists: list[list[Op]]) -> list[list[Any]]:
        """Every list's statements into ``batch``, after the outbox locks they need
        (:func:`outbox_lock_keys`); one list of results per op list."""
        keys = outbox_lock_keys(lists)
        if keys:
            batch.add(_OUTBOX_LOCKS, (OUTBOX_LOCK_CLASS, keys))
        return [[self._ops.apply(batch, op) for op in ops] for ops in lists]

    def apply_group(self, lists: list[list[Op]]) -> list[tuple[bool, Any]]:
        """Apply several callers' lists in one transaction; ``(ok, results or error)`` each."""
        backoff = self._backoff()
        if len(lists) > 1:
            while True:
                try:
                    results = self._transaction(
                        lambda batch: self._statements(batch, lists))
                except _OutcomeUnknown as exc:
                    return [(False, exc.error)] * len(lists)
                except _NoConnection as exc:
                    self._retrying(backoff, exc.error)
                    if backoff.pause():
                        continue
                    return [(False, exc.error)] * len(lists)
                except Exception as exc:  # noqa: BLE001 - replayed one by one below
                    log.debug("group commit of %d lists failed (%s); applying them one by "
                              "one", len(lists), self._server.scrub(exc))
                    break
                else:
                    return [(True, r) for r in results]
        outcomes: list[tuple[bool, Any]] = []
        for ops in lists:
            try:
                outcomes.append((True, self.apply(ops, backoff)))
            except _NoConnection as exc:  # the others would wait for the same timeout
                outcomes.extend([(False, exc.error)] * (len(lists) - len(outcomes)))
                break
            except Exception as exc:  # noqa: BLE001 - raised in that list's caller
                outcomes.append((False, exc))
        return outcomes

    def _retrying(self, backoff: Backoff, exc: BaseException) -> None:
        """Log a failed attempt: the first of a group as a warning, the others for debugging."""
        if backoff.pauses == 0:
            log.warning("write to %s failed (%s); retrying for up to %.0f s",
                        self._server.where, self._server.scrub(exc), RETRY_BUDGET)
        else:
            log.debug("write to %s failed again (%s)", self._server.where,
                      self._server.scrub(exc))

    def apply(self, ops: list[Op], backoff: Backoff | None = None) -> list[Any]:
        """Apply one list as one transaction, retrying as the module docstring says; raises
        ``_NoConnection`` when no connection can be opened (``apply_group`` reports it)."""
        if backoff is None:
            backoff = self._backoff()
        while True:
            try:
                return self._transaction(lambda batch: self._statements(batch, [ops]))[0]
            except _OutcomeUnknown as exc:
                raise exc.error from None
            except _NoConnection as exc:
                self._retrying(backoff, exc.error)
                if backoff.pause():
                    continue
                raise
            except psycopg.OperationalError as exc:  # lost connection, retry requested
                self._retrying(backoff, exc)
                if backoff.pause():
                    continue
                raise self._server.unavailable("write", exc) from None
            except (psycopg.Error, UnicodeError) as exc:  # a constraint, data the server
                raise self._server.rejected("write", exc) from None  # cannot store (a lone
                # surrogate fails to encode before it is sent)
