"""The clock protocol: anything with ``time()`` (epoch seconds) and ``monotonic()``.

Everything that decides by time (idle actors, housekeeping, marker age, restart storms) reads
an injected clock, so tests drive time with ``hermes_actors.testing.FakeClock``. A clock may
also offer ``sleep(seconds)`` (waiting out a platform's rate limit uses it when present).
The real one, :class:`SystemClock`, is :mod:`hermes_actors.model.timeutil`'s (the store reads
it too), re-exported here.
"""

from __future__ import annotations

from typing import Protocol

from hermes_actors.model.timeutil import SystemClock

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Wall time and monotonic time."""

    def time(self) -> float:
        """Epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going back."""
        ...
