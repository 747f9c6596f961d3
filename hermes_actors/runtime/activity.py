"""``ActivityTracker``: counts units of outstanding work so ``wait_idle`` can wait on it.

A unit is held by: an event between ``submit`` and its actor having taken it in; a session
actor while it runs a turn or holds queued work; a running delegation until its completion
has been submitted; a delivery in flight. Each holder takes its unit before releasing the
one it came from, so the count never touches zero while work is still moving.
"""

from __future__ import annotations

import threading

__all__ = ["ActivityTracker"]


class ActivityTracker:
    """A counter with a condition: ``add``, ``done``, ``wait_idle``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._cut = False

    @property
    def count(self) -> int:
        """Outstanding units now."""
        with self._cond:
            return self._count

    def add(self, n: int = 1) -> None:
        """Take ``n`` units."""
        with self._cond:
            self._count += n

    def done(self, n: int = 1) -> None:
        """Release ``n`` units; wakes waiters at zero."""
        with self._cond:
            self._count -= n
            if self._count < 0:  # a bookkeeping bug must not hang wait_idle forever
                self._count = 0
            if self._count == 0:
                self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is outstanding; False on timeout or after :meth:`cut`."""
        with self._cond:
            self._cond.wait_for(lambda: self._count == 0 or self._cut, timeout=timeout)
            return self._count == 0

    def cut(self) -> None:
        """Release every waiter now and from now on (a forced stop ends the drain)."""
        with self._cond:
            self._cut = True
            self._cond.notify_all()
