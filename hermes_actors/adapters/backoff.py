"""The pauses of a platform connection that keeps failing (a Telegram long poll, a Slack
Socket Mode connection): one schedule, so that every pull adapter retries alike."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BACKOFF", "pause_after"]

#: Pauses after consecutive failures, in seconds (the last one repeats).
BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


def pause_after(failures: int, pauses: Sequence[float] = BACKOFF) -> float:
    """The pause after a failure that ``failures`` earlier consecutive ones preceded (0:
    the first failure): the schedule's entry, its last one past its end."""
    return pauses[min(max(failures, 0), len(pauses) - 1)]
