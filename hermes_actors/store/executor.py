"""``DbExecutor``: every SQLite call runs on one dedicated worker thread that owns the connection.

Why one thread: a SQLite connection must not be shared between threads without a lock, and
a single writer needs no lock at all. Callers (many actors, on many threads or greenlets)
hand a function to the worker and wait for its result; the worker runs jobs in arrival
order, so the database sees one serial history. Under plain threads the worker drains a
queue; that queue is also where group commit can be added later (drain several write jobs,
run them in one transaction, answer each caller).

Under gevent (``threading`` monkey-patched) a ``threading.Thread`` would be a greenlet and a
blocking SQLite call would stall the hub. There the worker is the single native thread of a
``gevent.threadpool.ThreadPool(1)``, and callers wait on it cooperatively (other greenlets
keep running). A caller on a foreign native thread (not the hub's) cannot use the pool
directly; its job is handed to the hub thread-safely and it waits on a native lock.

Rejected: a connection per caller thread (WAL allows it, but writers would contend for the
database lock and group commit would be impossible), and running SQLite on the hub's default
thread pool (its threads change, so no thread could own the connection).
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from hermes_actors.errors import StoreError

__all__ = ["DbExecutor", "gevent_threading_patched"]

T = TypeVar("T")


def gevent_threading_patched() -> bool:
    """Whether gevent has monkey-patched ``threading`` in this process."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("threading"))


class _ThreadWorker:
    """A real thread draining a queue of jobs (plain, unpatched processes)."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            call, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # re-raised in the caller
                future.set_exception(exc)

    def on_worker(self) -> bool:
        """Whether the caller is the worker thread."""
        return threading.get_ident() == self._thread.ident

    def submit(self, call: Callable[[], T]) -> T:
        """Queue ``call`` and block until the worker ran it."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise StoreError("the database executor is closed")
            self._jobs.put((call, future))
        return future.result()

    def close(self) -> None:
        """Let queued jobs finish, then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._jobs.put(None)
        if not self.on_worker():
            self._thread.join()


class _GeventWorker:
    """The one native thread of a gevent ``ThreadPool(1)`` (monkey-patched processes)."""

    def __init__(self, name: str) -> None:
        from gevent.monkey import get_original
        from gevent.threadpool import ThreadPool

        self._native_ident = get_original("_thread", "get_ident")
        self._native_lock = get_original("_thread", "allocate_lock")
        self._pool = ThreadPool(1)
        self._hub_thread = self._native_ident()
        self._closed = False
        self.name = name
        self._worker_ident: int = self._pool.apply(self._native_ident)

    def on_worker(self) -> bool:
        """Whether the caller runs on the pool's native thread."""
        return self._native_ident() == self._worker_ident

    def submit(self, call: Callable[[], T]) -> T:
        """Run ``call`` on the pool thread; the calling greenlet waits cooperatively."""
        if self._closed:
            raise StoreError("the database executor is closed")
        if self._native_ident() == self._hub_thread:
            return self._pool.apply(call)
        return self._submit_from_foreign_thread(call)

    def _submit_from_foreign_thread(self, call: Callable[[], T]) -> T:
        import gevent

        done = self._native_lock()
        done.acquire()
        outcome: list[tuple[bool, Any]] = []

        def task() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as exc:
                outcome.append((False, exc))
            finally:
                done.release()

        # Callbacks run inside the hub and must not block: spawn a greenlet that submits.
        self._pool.hub.loop.run_callback_threadsafe(gevent.spawn, self._pool.spawn, task)
        done.acquire()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Wait for queued jobs, then stop the pool thread."""
        if self._closed:
            return
        self._closed = True
        if self._native_ident() == self._hub_thread:
            self._pool.join()
            self._pool.kill()


class DbExecutor:
    """Runs functions on one dedicated worker thread (a native thread, also under gevent)."""

    def __init__(self, name: str = "hermes-db") -> None:
        #: Whether the worker is a gevent thread-pool thread (callers wait cooperatively).
        self.gevent = gevent_threading_patched()
        self._impl: _ThreadWorker | _GeventWorker = (
            _GeventWorker(name) if self.gevent else _ThreadWorker(name)
        )

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
        return self._impl.submit(lambda: fn(*args, **kwargs))

    def close(self) -> None:
        """Stop the worker after the jobs already queued; later ``run`` calls raise."""
        self._impl.close()
