"""``GroupCommitter``: one committer applies every caller's op lists, several per transaction.

Why one committer with one connection, although a server takes concurrent transactions:
the store's domain assumes one serial history of writes, as SQLite gives it. Two concurrent
transactions could both read a ledger row as claimable, and, worse, outbox cursors drawn
from a sequence could become visible out of order, so a client reading "after cursor N"
would skip a reply that commits late. One writer keeps both impossible within a gateway,
and makes group commit free: lists that arrive while a transaction is in flight wait in the
queue and go into the next one together (one COMMIT, one WAL flush for all of them), up to
:data:`MAX_GROUP`. There is no timer: at low load a transaction holds one list. Reads do not
pass through here; they run concurrently on the backend's pool.

Written against ``threading`` on purpose: in a plain process the committer is a thread and
callers wait on events; under ``gevent.monkey.patch_all()`` the same code makes it a
greenlet, and psycopg (>= 3.1.14) waits on its socket cooperatively, so a transaction in
flight never holds up the hub. (The SQLite backend needs a native thread instead because
sqlite3 calls block in C.) Callers under gevent must be greenlets of the hub's thread, which
is what the runtime's actors and turns are.

``post`` does not wait for the transaction: its callback runs on the committer once the
list's transaction committed (or failed); it must not block, and a write it makes from there
runs inline.

The queue is bounded (:data:`MAX_QUEUE` lists): while the database is slow or the writer
pauses between retries, a caller (``run`` or ``post``) finding it full waits up to
:data:`QUEUE_WAIT` seconds for room, then gets :class:`~hermes_actors.errors.StoreBusyError`
(the HTTP API answers 503 with ``Retry-After``), instead of the queue growing without end.
The committer itself never waits for room (a callback's write would wait for itself).

A group that fails with an exception fails its lists only; an exit signal
(``GreenletExit``: the committer greenlet was killed, ``KeyboardInterrupt``, ``SystemExit``)
fails every queued list with :class:`~hermes_actors.errors.StoreUnavailableError`, closes
the committer and is re-raised, so the greenlet or thread really ends.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from gevent import GreenletExit

from hermes_actors.errors import StoreBusyError, StoreError, StoreUnavailableError
from hermes_actors.store.groupcommit import MAX_GROUP, call_back

__all__ = ["EXIT_SIGNALS", "MAX_GROUP", "MAX_QUEUE", "QUEUE_WAIT", "CommitterStatistics",
           "GroupCommitter"]

log = logging.getLogger("hermes_actors.store")

#: Most op lists waiting for the committer (about 40 full transactions).
MAX_QUEUE = 10_000
#: Seconds a caller waits for room in a full queue before :class:`StoreBusyError`.
QUEUE_WAIT = 1.0
#: Exceptions that end the committer instead of failing one group.
EXIT_SIGNALS: tuple[type[BaseException], ...] = (GreenletExit, KeyboardInterrupt, SystemExit)

#: Applies several lists in one transaction: one ``(ok, results or error)`` per list.
ApplyGroup = Callable[[list[list[Any]]], Sequence[tuple[bool, Any]]]


class CommitterStatistics(NamedTuple):
    """What the committer has done so far, and what waits for it now."""

    #: Transactions committed or attempted (one per group of lists).
    transactions: int
    #: Op lists applied.
    lists: int
    #: The most lists one transaction held.
    largest: int
    #: Lists waiting for the next transaction now.
    waiting: int


class _Job:
    __slots__ = ("ops", "done", "callback", "ok", "value")

    def __init__(self, ops: list[Any], done: threading.Event | None,
                 callback: Callable[[bool, Any], None] | None) -> None:
        self.ops = ops
        self.done = done
        self.callback = callback
        self.ok = False
        self.value: Any = None


class GroupCommitter:
    """Runs ``apply_group`` on one committer (a thread, or a greenlet under gevent)."""

    def __init__(self, apply_group: ApplyGroup, name: str = "hermes-pg-committer", *,
                 max_queue: int = MAX_QUEUE, queue_wait: float = QUEUE_WAIT) -> None:
        self._apply_group = apply_group
        self._max_queue = max_queue
        self._queue_wait = queue_wait
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the committer waits for work
        self._room = threading.Condition(lock)  # callers wait for room
        self._queue: deque[_Job] = deque()
        self._closed = False
        self._transactions = self._lists = self._largest = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _on_committer(self) -> bool:
        return threading.current_thread() is self._thread

    def _submit(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                raise StoreError("the database's committer is closed")
            if len(self._queue) >= self._max_queue and not self._on_committer():
                if not self._room.wait_for(
                        lambda: len(self._queue) < self._max_queue or self._closed,
                        timeout=self._queue_wait):
                    raise StoreBusyError(
                        f"the database's write queue is full ({len(self._queue)} writes "
                        f"waiting for {self._queue_wait:g} s): try again shortly")
                if self._closed:
                    raise StoreError("the database's committer is closed")
            self._queue.append(job)
            if len(self._queue) == 1:
                self._cond.notify()

    def run(self, ops: list[Any]) -> list[Any]:
        """Apply ``ops`` (in the next transaction, with whatever else waits) and return its
        results once committed, or raise its error."""
        if self._on_committer():  # a callback writing: run it now, alone
            ok, value = self._apply_group([ops])[0]
        else:
            job = _Job(ops, threading.Event(), None)
            self._submit(job)
            assert job.done is not None
            job.done.wait()
            ok, value = job.ok, job.value
        if ok:
            return value
        raise value

    def post(self, ops: list[Any], callback: Callable[[bool, Any], None]) -> None:
        """Queue ``ops`` and return at once; ``callback(ok, results_or_error)`` runs on the
        committer after their transaction."""
        self._submit(_Job(ops, None, callback))

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return  # closed and drained
                count = min(len(self._queue), MAX_GROUP)
                jobs = [self._queue.popleft() for _ in range(count)]
                self._room.notify_all()
            try:
                outcomes = self._apply_group([job.ops for job in jobs])
            except EXIT_SIGNALS as exc:
                self._exit(jobs, exc)
                raise
            except Exception as exc:  # noqa: BLE001 - a broken group fails its lists only
                outcomes = [(False, exc)] * len(jobs)
            self._transactions += 1
            self._lists += len(jobs)
            self._largest = max(self._largest, len(jobs))
            self._finish(jobs, outcomes)

    def _finish(self, jobs: list[_Job], outcomes: Sequence[tuple[bool, Any]]) -> None:
        for job, (ok, value) in zip(jobs, outcomes, strict=True):
            job.ok, job.value = ok, value
            if job.done is not None:
                job.done.set()
            elif job.callback is not None:
                call_back(job.callback, ok, value)

    def _exit(self, jobs: list[_Job], signal: BaseException) -> None:
        """The committer ends (``signal``): close, and fail ``jobs`` and every queued list
        so that no caller waits for ever."""
        with self._cond:
            self._closed = True
            jobs = jobs + list(self._queue)
            self._queue.clear()
            self._room.notify_all()
        error = StoreUnavailableError(
            f"the database's committer was stopped ({type(signal).__name__})")
        log.warning("the database's committer stops (%s): %d writes fail",
                    type(signal).__name__, len(jobs))
        self._finish(jobs, [(False, error)] * len(jobs))

    def statistics(self) -> CommitterStatistics:
        """Transactions and lists so far, and the lists waiting now."""
        with self._cond:
            waiting = len(self._queue)
        return CommitterStatistics(self._transactions, self._lists, self._largest, waiting)

    def close(self) -> None:
        """Apply what is queued, then stop; later writes raise :class:`StoreError`."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify()
            self._room.notify_all()
        if not self._on_committer():
            self._thread.join()
