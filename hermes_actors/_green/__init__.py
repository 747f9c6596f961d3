"""The one concurrency layer: plain threads, or greenlets once gevent has patched ``threading``.

Everything in the runtime and the store that depends on *how* it runs concurrently asks here:
whether gevent has monkey-patched ``threading`` (:func:`gevent_threading_patched`), which lock
to take (:func:`new_rlock`, :func:`brief_lock`), how to start work (:func:`spawn`), how to
yield (:func:`let_others_run`), and how to keep blocking file I/O from stalling the hub
(:func:`off_the_hub`). The light actor and its future, the same
choice for pykka, are in :mod:`hermes_actors._green.actor` (kept apart: the database writer
process imports this module and must not pay for pykka), and the patching itself, for the
processes that run under gevent, in :func:`hermes_actors._green.monkey.patch_all`. Nothing
here imports ``threading`` at import time, so that function can be imported before it patches.

Why the runtime needs to know at all: under ``gevent.monkey.patch_all()`` a
``threading.Thread`` is a greenlet wrapped in a thread object whose ``start()`` waits for a
hub round trip, and ``threading.RLock`` falls back to pure Python. Session actors and turn
workers are started by the thousand, so there they are bare greenlets, and locks are gevent's
own (or native, for sections that cannot yield). Without gevent nothing changes: real daemon
threads and ``threading`` locks.
Rejected: a gevent module of pykka (pykka 4 has none), and patching pykka's internals.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["brief_lock", "gevent_threading_patched", "let_others_run", "new_rlock", "off_the_hub",
           "spawn"]

_patched: list[bool] = []  # once gevent has patched threading, it stays patched


def gevent_threading_patched() -> bool:
    """Whether gevent has monkey-patched ``threading`` in this process (asked on hot
    paths: a yes is remembered)."""
    if _patched:
        return True
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("threading"):
        _patched.append(True)
        return True
    return False


def let_others_run() -> None:
    """Give other greenlets (under gevent) or threads a turn: for long passes in the hub
    that can be cut into pieces (the first fill of 100,000 routing rows)."""
    if gevent_threading_patched():
        import gevent

        gevent.sleep(0)
    else:
        import time

        time.sleep(0)


def new_rlock() -> Any:
    """A re-entrant lock for greenlets and threads of this process's runtime.

    Under gevent, ``threading.RLock`` is threading's pure-Python fallback (every acquire a
    few Python frames); gevent's own is a thin layer on its compiled semaphore. Only for
    locks that native helper threads (the database worker, the hub's thread pool) never
    take.
    """
    if gevent_threading_patched():
        from gevent.lock import RLock

        return RLock()
    import threading

    return threading.RLock()


def brief_lock() -> Any:
    """A lock for a critical section that neither blocks nor yields: a few statements on
    counters and maps, no I/O, no call that may switch greenlets, no lock but another brief
    one (always taken in the same order).

    Under gevent, ``threading.Lock`` is gevent's ``LockType``, whose ``acquire`` and
    ``release`` are Python frames (checks for the hub, the owner, a timeout); a turn took
    and released such locks ~17 times. For a section that cannot yield, the native lock is
    as correct and a single C call: a greenlet that holds it never lets another greenlet of
    its thread run before it releases, and a native thread (the hub's thread pool) that
    finds it held waits in C for a few statements. Never hold it across anything that can
    switch: another greenlet of the same thread asking for it then would block the hub.
    Without gevent it is ``threading.Lock()``, which is that native lock already.
    """
    if not _native_lock:
        if gevent_threading_patched():
            from gevent.monkey import get_original

            _native_lock.append(get_original("_thread", "allocate_lock"))
        else:
            import threading

            return threading.Lock()  # (gevent may still patch it later: not remembered)
    return _native_lock[0]()


_native_lock: list[Callable[[], Any]] = []  # the native allocate_lock, once gevent patched


def spawn(fn: Callable[[], Any], name: str) -> None:
    """Run ``fn()`` concurrently: a greenlet under gevent (a parked one of
    :data:`_POOL` when there is one), else a daemon thread."""
    if _patched or gevent_threading_patched():  # (once patched, no call: every turn spawns)
        _POOL.run(fn)
    else:
        import threading

        threading.Thread(target=fn, name=name, daemon=True).start()


class _GreenletPool:
    """Greenlets that run one ``spawn``'s work after another, parked in between.

    A turn's worker is a greenlet, a thousand and more of them a second. Starting a fresh
    greenlet costs more than its object: on Python 3.11 every new greenlet maps a fresh frame
    stack (``mmap``) at its first call and unmaps it when it ends (``munmap``), which was
    ~6 % of the hub's CPU in the throughput benchmark, with the garbage collector's passes
    the allocations trigger on top. A finished worker therefore parks (at most
    :attr:`max_idle` of them, the rest end) and the next ``spawn`` hands it its work.

    Each work runs in a fresh, empty ``contextvars`` context, as in a fresh greenlet.
    ``threading.local`` values (greenlet-local under gevent) stay with the worker, as they
    stay with a thread of a thread pool; nothing in this package keeps any. Only the hub's
    thread spawns here (under gevent the runtime's threads are greenlets of one hub).
    """

    def __init__(self, max_idle: int = 128) -> None:
        self.max_idle = max_idle
        self._idle: list[Any] = []

    def run(self, fn: Callable[[], Any]) -> None:
        import gevent

        if self._idle:
            worker = self._idle.pop()
            gevent.get_hub().loop.run_callback(worker.switch, fn)
        else:
            # The work rides in a list the worker empties: a Greenlet keeps its arguments
            # until it ends, and a worker lives on (parked, or as an actor's loop for as long
            # as its session), so a work passed as an argument stayed alive with it (a turn's
            # closure, and through it the turn, its event and its agent after the cache had
            # let the agent go).
            gevent.spawn(self._serve, [fn])

    def _serve(self, first: list[Callable[[], Any]]) -> None:
        import gevent

        hub = gevent.get_hub()
        me = gevent.getcurrent()
        fn: Callable[[], Any] | None = first.pop()
        while fn is not None:
            try:
                contextvars.Context().run(fn)
            except Exception:  # noqa: BLE001 - reported as gevent reports a greenlet's
                hub.handle_error(me, *sys.exc_info())
            fn = None  # drop the work's references while parked
            if len(self._idle) >= self.max_idle:
                return
            self._idle.append(me)
            fn = hub.switch()


_POOL = _GreenletPool()


def off_the_hub(fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking file I/O (``fn(*args)``) where it cannot stall every greenlet.

    Under gevent a write and fsync of a large mirror (74 MB at 100,000 sessions) would
    block the hub, and with it every actor, for tens of milliseconds; there it runs on a
    native thread of the hub's thread pool while the calling greenlet waits. Plain
    processes (and native threads other than the hub's) just call it.
    """
    if gevent_threading_patched():
        import gevent
        from gevent.monkey import get_original

        hub = gevent.get_hub()
        if hub.thread_ident == get_original("_thread", "get_ident")():
            done, value = hub.threadpool.apply(_outcome, (fn, args))
            if not done:
                raise value
            return value
    return fn(*args)


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """``(True, fn(*args))``, or ``(False, its exception)``: raised in the caller, which
    handles it, instead of in the thread pool, whose worker would print its traceback."""
    try:
        return True, fn(*args)
    except Exception as exc:  # noqa: BLE001 - re-raised by off_the_hub
        return False, exc
