"""``DbExecutor``: every SQLite call runs on one dedicated worker thread that owns the connection.

Why one thread: a SQLite connection must not be shared between threads without a lock, and
a single writer needs no lock at all. Callers (many actors, on many threads or greenlets)
hand a function to the worker and wait for its result; the database sees one serial history.

Why batches: a caller that arrives while the worker is busy joins the *open batch*, and the
worker takes the whole batch at once when it is free. One hand-off (one wake-up of the
worker, one wake-up of the waiting callers) then serves many calls, and consecutive calls
of the same *group function* run as one call of it: :class:`~hermes_actors.store.backends.sqlite.db.SessionDB`
uses that for group commit (several callers' write transactions merged into one COMMIT).
There is no timer: at low load a batch holds one call and nothing waits for company; under
load batches grow by themselves while the worker is busy. Calls run in arrival order, and a
caller returns only after the whole batch ran, so a result (a COMMIT) is never reported
before it happened.

Under gevent (``threading`` monkey-patched) a ``threading.Thread`` would be a greenlet and a
blocking SQLite call would stall the hub. There the worker is a native thread, callers in
the hub's thread wait on a gevent event, and the worker wakes the hub through one
long-lived async watcher (thread-safe to ``send``). A caller on a foreign native thread
waits on a native lock instead.

Rejected: a connection per caller thread (WAL allows it, but writers would contend for the
database lock and group commit would be impossible); running SQLite on the hub's default
thread pool (its threads change, so no thread could own the connection); one gevent
``ThreadPool`` task per call (the former design: each call paid for a task, an async
watcher and a separate hand-off, which dominated short transactions); a commit delay to
collect more callers (adds latency at low load, and the busy worker already collects them).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from hermes_actors._green import gevent_threading_patched
from hermes_actors.errors import StoreError
from hermes_actors.store.groupcommit import MAX_GROUP, call_back

__all__ = [
    "MAX_GROUP",
    "DbExecutor",
    "ExecutorStatistics",
    "GroupFn",
    "call_back",
]

T = TypeVar("T")

#: A group function: called with the payloads of consecutive calls, returns one
#: ``(ok, value)`` per payload (``value`` is the result, or the exception to raise).
GroupFn = Callable[[list[Any]], Sequence[tuple[bool, Any]]]

class ExecutorStatistics(NamedTuple):
    """What the worker has done so far, and what waits for it now."""

    #: Batches taken by the worker (hand-offs between callers and the worker).
    batches: int
    #: Calls run (plain calls plus grouped payloads).
    calls: int
    #: Calls of group functions (for ``SessionDB``: write transactions).
    group_calls: int
    #: Payloads passed to group functions (for ``SessionDB``: op lists committed).
    grouped: int
    #: The most payloads one group call received.
    largest_group: int
    #: Calls waiting in the open batch now.
    waiting: int


class _Counters:
    """Counts kept by the worker thread (plain ints: only the worker writes them)."""

    __slots__ = ("batches", "calls", "group_calls", "grouped", "largest_group")

    def __init__(self) -> None:
        self.batches = self.calls = self.group_calls = self.grouped = self.largest_group = 0


class _Job:
    """One call: ``fn()``, or ``group([payload, ...])`` together with its neighbours."""

    __slots__ = ("fn", "group", "payload", "ok", "value", "callback")

    def __init__(self, fn: Callable[[], Any] | None, group: GroupFn | None, payload: Any,
                 callback: Callable[[bool, Any], None] | None = None) -> None:
        self.fn = fn
        self.group = group
        self.payload = payload
        self.ok = False
        self.value: Any = None
        #: For a call nobody waits for: ``callback(ok, value)`` once its batch ran.
        self.callback = callback

    def outcome(self) -> Any:
        """The result, or raise the error, in the caller."""
        if self.ok:
            return self.value
        raise self.value


def _call_back(jobs: list[_Job]) -> None:
    """Report the calls of a finished batch that nobody waits for."""
    for job in jobs:
        if job.callback is not None:
            call_back(job.callback, job.ok, job.value)


class _Batch:
    """Calls handed over together; ``done`` is set once all of them ran."""

    __slots__ = ("jobs", "done", "native_waiters", "hub_waits")

    def __init__(self, done: Any) -> None:
        self.jobs: list[_Job] = []
        self.done = done
        self.native_waiters: list[Any] = []
        self.hub_waits = False


def _run_jobs(jobs: list[_Job], counts: _Counters) -> None:
    """Run a batch in order; consecutive calls of one group function go in one call."""
    i, n = 0, len(jobs)
    counts.batches += 1
    counts.calls += n
    while i < n:
        job = jobs[i]
        if job.group is None:
            fn = job.fn
            assert fn is not None  # a plain call has a function
            try:
                job.value, job.ok = fn(), True
            except BaseException as exc:  # re-raised in the caller
                job.value = exc
            i += 1
            continue
        j = i + 1
        while j < n and j - i < MAX_GROUP and jobs[j].group == job.group:
            j += 1
        run = jobs[i:j]
        counts.group_calls += 1
        counts.grouped += len(run)
        counts.largest_group = max(counts.largest_group, len(run))
        try:
            outcomes = job.group([x.payload for x in run])
        except BaseException as exc:  # a broken group function fails only its calls
            outcomes = [(False, exc)] * len(run)
        for x, (ok, value) in zip(run, outcomes, strict=True):
            x.ok, x.value = ok, value
        i = j


class _ThreadWorker:
    """A real thread taking batches (plain, unpatched processes)."""

    def __init__(self, name: str) -> None:
        self.counts = _Counters()
        self._cond = threading.Condition()
        self._open: _Batch | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._open is None and not self._closed:
                    self._cond.wait()
                batch, self._open = self._open, None
            if batch is None:
                return
            _run_jobs(batch.jobs, self.counts)
            batch.done.set()
            _call_back(batch.jobs)

    def on_worker(self) -> bool:
        """Whether the caller is the worker thread."""
        return threading.get_ident() == self._thread.ident

    def waiting(self) -> int:
        """Calls in the open batch."""
        with self._cond:
            return len(self._open.jobs) if self._open is not None else 0

    def submit(self, job: _Job, *, wait: bool = True) -> Any:
        """Add ``job`` to the open batch and block until its batch ran (unless ``wait`` is
        false: then ``job.callback`` hears of it, on the worker thread)."""
        with self._cond:
            if self._closed:
                raise StoreError("the database executor is closed")
            batch = self._open
            if batch is None:
                batch = self._open = _Batch(threading.Event())
                self._cond.notify()
            batch.jobs.append(job)
        if not wait:
            return None
        batch.done.wait()
        return job.outcome()

    def close(self) -> None:
        """Let queued jobs finish, then stop the thread."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify()
        if not self.on_worker():
            self._thread.join()


class _GeventWorker:
    """A native thread taking batches; the hub learns of finished ones by an async watcher."""

    def __init__(self, name: str) -> None:
        import gevent
        import gevent.event
        from gevent.monkey import get_original

        self.name = name
        self.counts = _Counters()
        self._event = gevent.event.Event
        self._native_ident = get_original("_thread", "get_ident")
        self._native_lock = get_original("_thread", "allocate_lock")
        self._lock = self._native_lock()  # guards _open between the hub and the worker
        self._queue = get_original("queue", "SimpleQueue")()
        self._hub_thread = self._native_ident()
        self._finished: deque[_Batch] = deque()
        self._outstanding = 0  # batches a hub greenlet waits for (hub thread only)
        self._async = gevent.get_hub().loop.async_()
        self._async.start(self._on_finished)
        self._async.ref = False  # an idle executor must not keep the hub's loop alive
        self._open: _Batch | None = None
        self._closed = False
        self._exiting = False
        self._exit_event = self._event()
        self._exited = self._native_lock()
        self._exited.acquire()
        started = self._native_lock()
        started.acquire()
        ident: list[int] = []

        def boot() -> None:
            ident.append(self._native_ident())
            started.release()
            self._loop()

        get_original("_thread", "start_new_thread")(boot, ())
        started.acquire()
        self._worker_ident = ident[0]

    def _loop(self) -> None:
        try:
            while True:
                batch = self._queue.get()
                if batch is None:
                    return
                with self._lock:
                    if self._open is batch:
                        self._open = None
                _run_jobs(batch.jobs, self.counts)
                for waiter in batch.native_waiters:
                    waiter.release()
                if batch.hub_waits:
                    self._finished.append(batch)
                    self._async.send()
        finally:
            self._exiting = True
            self._async.send()
            self._exited.release()  # last: the hub closes the watcher only after this

    def _on_finished(self) -> None:
        # In the hub: wake the greenlets of every finished batch.
        while self._finished:
            batch = self._finished.popleft()
            self._outstanding -= 1
            batch.done.set()
            _call_back(batch.jobs)  # in the hub: callbacks must not block
        if self._exiting and not self._exit_event.is_set():
            self._exited.acquire()  # the worker's final send() is over (a brief wait)
            self._exited.release()
            self._exit_event.set()
            self._async.stop()
            self._async.close()
        elif self._outstanding == 0:
            self._async.ref = False

    def on_worker(self) -> bool:
        """Whether the caller runs on the worker's native thread."""
        return self._native_ident() == self._worker_ident

    def waiting(self) -> int:
        """Calls in the open batch."""
        with self._lock:
            return len(self._open.jobs) if self._open is not None else 0

    def submit(self, job: _Job, *, wait: bool = True) -> Any:
        """Add ``job`` to the open batch; the calling greenlet (or foreign thread) waits,
        unless ``wait`` is false: then ``job.callback`` hears of it, in the hub."""
        in_hub = self._native_ident() == self._hub_thread
        if not wait and not in_hub:  # callbacks run in the hub: wait here instead
            callback, job.callback = job.callback, None
            assert callback is not None  # a call nobody waits for has one
            try:
                value, ok = self.submit(job), True
            except Exception as exc:  # noqa: BLE001 - reported to the callback
                value, ok = exc, False
            callback(ok, value)
            return None
        waiter = None if in_hub else self._native_lock()
        if waiter is not None:
            waiter.acquire()
        first_hub_waiter = False
        with self._lock:
            if self._closed:
                raise StoreError("the database executor is closed")
            batch = self._open
            if batch is None:
                batch = self._open = _Batch(self._event())
                self._queue.put(batch)  # under the lock: never behind close()'s sentinel
            batch.jobs.append(job)
            if waiter is not None:
                batch.native_waiters.append(waiter)
            elif not batch.hub_waits:
                batch.hub_waits = first_hub_waiter = True
        if first_hub_waiter:
            self._outstanding += 1
            self._async.ref = True
        if not wait:
            return None
        if waiter is not None:
            waiter.acquire()
        else:
            batch.done.wait()
        return job.outcome()

    def close(self) -> None:
        """Let queued jobs finish, then stop the worker thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        if self.on_worker():
            return
        if self._native_ident() == self._hub_thread:
            if not self._exit_event.is_set():
                self._async.ref = True  # keep the loop alive until the worker's last word
                self._exit_event.wait()
        else:
            self._exited.acquire()
            self._exited.release()


class _InlineWorker:
    """No thread at all: every call runs in its caller. For a process whose one thread owns
    the connection (the database writer process); a hand-off there would only add two
    thread wake-ups to every write."""

    def __init__(self) -> None:
        self.counts = _Counters()

    def on_worker(self) -> bool:
        """Always: the caller is the worker."""
        return True

    def waiting(self) -> int:
        """Nothing ever waits."""
        return 0

    def submit(self, job: _Job, *, wait: bool = True) -> Any:
        """Run ``job`` now, in the caller (which is always the worker here)."""
        _run_jobs([job], self.counts)
        if not wait:
            _call_back([job])
            return None
        return job.outcome()

    def close(self) -> None:
        """Nothing to stop."""


class DbExecutor:
    """Runs functions on one dedicated worker thread (a native thread, also under gevent),
    or, with ``inline=True``, in the calling thread itself (single-threaded processes)."""

    def __init__(self, name: str = "hermes-db", *, inline: bool = False) -> None:
        #: Whether the worker is a native thread serving gevent callers cooperatively.
        self.gevent = gevent_threading_patched() and not inline
        self._impl: _ThreadWorker | _GeventWorker | _InlineWorker
        if inline:
            self._impl = _InlineWorker()
        elif self.gevent:
            self._impl = _GeventWorker(name)
        else:
            self._impl = _ThreadWorker(name)

    def on_worker(self) -> bool:
        """Whether the calling code already runs on the worker thread."""
        return self._impl.on_worker()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the worker; return its result or re-raise its error.

        Blocks the calling thread (or only the calling greenlet, under gevent). A call made
        from the worker itself runs inline, so nested use cannot deadlock.
        """
        if self._impl.on_worker():
            return fn(*args, **kwargs)
        return self._impl.submit(_Job(lambda: fn(*args, **kwargs), None, None))

    def run_grouped(self, group: GroupFn, payload: Any) -> Any:
        """Run ``group([payload, ...])`` on the worker, together with the payloads of other
        callers that were waiting at the same time; return this payload's result or raise
        its error.

        ``group`` must answer each payload independently (one failing payload must not
        fail the others) and return only once every answer is final (durable). Payloads
        are passed in arrival order, at most :data:`MAX_GROUP` at a time. From the worker
        itself the call runs inline, alone.
        """
        if self._impl.on_worker():
            ok, value = group([payload])[0]
            if ok:
                return value
            raise value
        return self._impl.submit(_Job(None, group, payload))

    def post_grouped(self, group: GroupFn, payload: Any,
                     callback: Callable[[bool, Any], None]) -> None:
        """:meth:`run_grouped` without waiting: ``callback(ok, result_or_error)`` is called
        once the payload ran (and committed). Under gevent the callback runs in the hub and
        must not block; otherwise it runs on the worker thread."""
        job = _Job(None, group, payload, callback)
        if self._impl.on_worker():
            ok, value = group([payload])[0]
            callback(ok, value)
            return
        self._impl.submit(job, wait=False)

    def statistics(self) -> ExecutorStatistics:
        """Batches, calls and group calls so far, and the calls waiting now."""
        c = self._impl.counts
        return ExecutorStatistics(c.batches, c.calls, c.group_calls, c.grouped,
                                  c.largest_group, self._impl.waiting())

    def close(self) -> None:
        """Stop the worker after the jobs already queued; later calls raise ``StoreError``."""
        self._impl.close()
