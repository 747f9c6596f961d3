"""``ActivityTracker``: counts units of outstanding work so ``wait_idle`` can wait on it.

A unit is held by: an event between ``submit`` and its actor having taken it in; a session
actor while it runs a turn or holds queued work; a running delegation until its completion
has been submitted; a delivery in flight. Each holder takes its unit before releasing the
one it came from, so the count never touches zero while work is still moving.
"""

from __future__ import annotations

import threading
import time

from hermes_actors._green import brief_lock

__all__ = ["ActivityTracker"]


class ActivityTracker:
    """A counter with an idle event: ``add``, ``done``, ``wait_idle``.

    Units are taken and released several times per turn, so the count is kept under a
    brief lock (:func:`~hermes_actors._green.brief_lock`) and waiters wait on an event set
    at zero (a ``Condition`` costs a re-entrant lock in pure Python per use under gevent).
    """

    def __init__(self) -> None:
        self._lock = brief_lock()
        self._idle = threading.Event()
        self._idle.set()
        self._count = 0
        self._cut = False

    @property
    def count(self) -> int:
        """Outstanding units now."""
        return self._count

    def add(self, n: int = 1) -> None:
        """Take ``n`` units."""
        with self._lock:
            self._count += n
            if self._count > 0 and not self._cut:
                self._idle.clear()

    def done(self, n: int = 1) -> None:
        """Release ``n`` units; wakes waiters at zero."""
        with self._lock:
            self._count -= n
            if self._count <= 0:  # a bookkeeping bug must not hang wait_idle forever
                self._count = 0
                self._idle.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is outstanding; False on timeout or after :meth:`cut`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._idle.wait(remaining)
            with self._lock:
                if self._count == 0:
                    return True
                if self._cut or (deadline is not None and time.monotonic() >= deadline):
                    return False

    def cut(self) -> None:
        """Release every waiter now and from now on (a forced stop ends the drain)."""
        with self._lock:
            self._cut = True
            self._idle.set()
