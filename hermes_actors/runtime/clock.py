"""The clock protocol: anything with ``time()`` (epoch seconds) and ``monotonic()``.

Everything that decides by time (idle actors, housekeeping, marker age, restart storms) reads
an injected clock, so tests drive time with ``hermes_actors.testing.FakeClock``. A clock may
also offer ``sleep(seconds)`` (waiting out a platform's rate limit uses it when present).
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Wall time and monotonic time."""

    def time(self) -> float:
        """Epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going back."""
        ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)`` (a greenlet's sleep under gevent)."""
        time.sleep(seconds)
