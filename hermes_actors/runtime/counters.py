"""Running totals of what came in and what the turns did, for ``/metrics`` and ``stats()``.

Counted where it happens (``Gateway`` for ingress, the session actors for turns and queue
depths) so a scrape reads a few numbers instead of asking every live session actor: its cost
does not grow with the number of sessions. Increments take a brief lock
(:func:`~hermes_actors._green.brief_lock`); they are a few per message.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from hermes_actors._green import brief_lock

__all__ = [
    "REFUSAL_REASONS",
    "TURN_DURATION_BUCKETS",
    "IngressCounters",
    "IngressStatistics",
    "QueueGauge",
    "TurnCounters",
    "TurnStatistics",
]

#: Why a message was not accepted: the session's queue was full, it repeated an accepted
#: message, the gateway was stopping, or the request was malformed (HTTP).
REFUSAL_REASONS = ("queue_full", "duplicate", "stopping", "invalid", "store_unavailable")

#: Upper bounds (seconds) of the turn-duration histogram's buckets: from an echo turn to
#: the half hour of ``agent.timeout``.
TURN_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                         30.0, 60.0, 120.0, 300.0, 900.0, 1800.0)


class IngressStatistics(NamedTuple):
    """Messages offered to the gateway since it was created."""

    #: Human messages accepted (durable and routed to their session).
    accepted: int
    #: Messages not accepted, by reason (every reason of :data:`REFUSAL_REASONS` present).
    refused: dict[str, int]


class IngressCounters:
    """Counts accepted and refused messages (thread-safe)."""

    def __init__(self) -> None:
        self._lock = brief_lock()
        self._accepted = 0
        self._refused = dict.fromkeys(REFUSAL_REASONS, 0)

    def accepted(self) -> None:
        """One message was accepted."""
        with self._lock:
            self._accepted += 1

    def refused(self, reason: str) -> None:
        """One message was refused for ``reason`` (one of :data:`REFUSAL_REASONS`)."""
        with self._lock:
            self._refused[reason] += 1

    def statistics(self) -> IngressStatistics:
        """A snapshot."""
        with self._lock:
            return IngressStatistics(self._accepted, dict(self._refused))


class TurnStatistics(NamedTuple):
    """Finished turns since the gateway was created."""

    #: Turns by final status (``completed``, ``interrupted``, ``failed``, ``partial``).
    by_status: dict[str, int]
    #: Cumulative counts per bucket of :data:`TURN_DURATION_BUCKETS` (``le`` semantics),
    #: then the count of all turns (the ``+Inf`` bucket).
    duration_buckets: tuple[int, ...]
    #: Sum of the durations, seconds.
    duration_sum: float
    #: The buckets' upper bounds (:data:`TURN_DURATION_BUCKETS`), for a reader that
    #: exports the histogram.
    bucket_bounds: tuple[float, ...] = TURN_DURATION_BUCKETS


class TurnCounters:
    """Counts finished turns by status and their durations (thread-safe)."""

    def __init__(self) -> None:
        self._lock = brief_lock()
        self._by_status: dict[str, int] = {}
        self._buckets = [0] * (len(TURN_DURATION_BUCKETS) + 1)
        self._sum = 0.0

    def finished(self, status: str, seconds: float) -> None:
        """One turn ended with ``status`` after ``seconds``."""
        index = bisect.bisect_left(TURN_DURATION_BUCKETS, seconds)
        with self._lock:
            self._by_status[status] = self._by_status.get(status, 0) + 1
            self._buckets[index] += 1
            self._sum += seconds

    def statistics(self) -> TurnStatistics:
        """A snapshot, with cumulative buckets."""
        with self._lock:
            counts, by_status, total = list(self._buckets), dict(self._by_status), self._sum
        cumulative, running = [], 0
        for count in counts:
            running += count
            cumulative.append(running)
        return TurnStatistics(by_status, tuple(cumulative), total)


class QueueGauge:
    """Events queued in live sessions, kept as a running total: each session actor adds
    the change of its own ``queue_depth`` after every message it handles."""

    def __init__(self) -> None:
        self._lock = brief_lock()
        self._total = 0

    def add(self, delta: int) -> None:
        """Add ``delta`` (negative when a queue shrank)."""
        with self._lock:
            self._total += delta

    @property
    def total(self) -> int:
        """Queued events now, over all live sessions."""
        return self._total
