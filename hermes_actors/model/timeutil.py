"""Time as the project keeps it: timezone-aware UTC datetimes, compared as epoch seconds.

A naive timestamp can only come from old data written by the reference gateway, which wrote
host local time; it is interpreted that way once, on load, and never produced again.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime, timezone

__all__ = ["SystemClock", "epoch", "from_epoch", "isoformat", "parse_timestamp", "utc_now"]


class SystemClock:
    """The real clock (see ``hermes_actors.runtime.clock.Clock``).

    Its ``time`` and ``monotonic`` are the ``time`` module's own functions, set on the
    instance: the runtime reads the clock about a dozen times a turn, and a method around
    each was a Python call of its own.
    """

    def __init__(self) -> None:
        #: ``time.time()``: epoch seconds.
        self.time = time.time
        #: ``time.monotonic()``: seconds from an arbitrary origin, never going back.
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)`` (a greenlet's sleep under gevent)."""
        time.sleep(seconds)


def from_epoch(seconds: float) -> datetime:
    """The aware UTC datetime of an epoch-seconds value."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def utc_now(clock=None) -> datetime:
    """Now, as an aware UTC datetime, read from ``clock.time()`` when a clock is given."""
    if clock is None:
        return datetime.now(timezone.utc)
    return from_epoch(clock.time())


def epoch(value: datetime) -> float:
    """Epoch seconds of an aware datetime (a naive one is taken as host local time)."""
    return value.timestamp()


def isoformat(value: datetime | None) -> str | None:
    """ISO 8601 with offset (UTC) or ``None``."""
    if value is None:
        return None
    if value.tzinfo is None:  # host local time (never cached: the zone may change)
        return value.astimezone().astimezone(timezone.utc).isoformat()
    return _aware_isoformat(value)


@functools.lru_cache(maxsize=4096)
def _aware_isoformat(value: datetime) -> str:
    # Cached: an entry is serialised at every change with mostly the same times, and equal
    # aware datetimes are the same instant, so they render alike in UTC.
    if value.tzinfo is timezone.utc:  # as the project makes them: nothing to convert
        return value.isoformat()
    return value.astimezone(timezone.utc).isoformat()


def parse_timestamp(value: object) -> datetime | None:
    """Parse an ISO 8601 string or an epoch number into an aware UTC datetime.

    Returns ``None`` for anything malformed: old data must load, not crash the loader.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return from_epoch(float(value))
        if isinstance(value, datetime):
            parsed = value
        elif isinstance(value, str) and value.strip():
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        else:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # old data: host local time
        return parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
