"""``FakeClock``: time that moves only when a test says so."""

from __future__ import annotations

import threading

__all__ = ["FakeClock"]


class FakeClock:
    """A clock for tests: ``time()`` epoch seconds, ``monotonic()``, ``advance(seconds)``;
    ``sleep(seconds)`` advances at once and is recorded in ``slept``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._wall = float(start)
        self._mono = 0.0
        #: Every ``sleep`` asked of this clock, in seconds, in order.
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        """Do not wait: advance by ``seconds`` and record it."""
        with self._lock:
            self.slept.append(seconds)
        self.advance(max(0.0, seconds))

    def time(self) -> float:
        """The fake epoch seconds."""
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        """The fake monotonic seconds (starts at 0)."""
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._wall += seconds
            self._mono += seconds
