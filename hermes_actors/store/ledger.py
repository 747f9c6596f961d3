"""The delivery ledger's rules (§7), as pure functions both backends share.

A reply is an *obligation* from the moment it is recorded until it is delivered or given
up. Its id is derived from what is owed (session, turn, text), so recording the same reply
twice, e.g. once live and once by crash recovery, yields one row and one delivery.

States: ``pending`` → ``attempting`` → ``delivered`` | ``failed``; a failed row is
``abandoned`` after :data:`MAX_ATTEMPTS` attempts or :data:`MAX_AGE_SECONDS` of age. A row
being attempted by a live process is never claimed by another one: the owner is identified
by pid *and* process start time, so a recycled pid does not keep a dead owner's claim alive.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

__all__ = [
    "CLAIMABLE_STATES",
    "FINAL_STATES",
    "KINDS",
    "MAX_AGE_SECONDS",
    "MAX_ATTEMPTS",
    "STATES",
    "claim_allowed",
    "current_process",
    "finish_state",
    "obligation_id",
    "owner_alive",
]

#: What an obligation carries: a turn's reply, a reply found by crash recovery, a notice.
KINDS = ("reply", "recovered", "notice")
#: Every ledger state.
STATES = ("pending", "attempting", "delivered", "failed", "abandoned")
#: States a sender may claim (``attempting`` only when its owner is dead).
CLAIMABLE_STATES = ("pending", "attempting", "failed")
#: States that are never sent again (pruned after a week).
FINAL_STATES = ("delivered", "abandoned")
#: A failed obligation is abandoned after this many attempts...
MAX_ATTEMPTS = 3
#: ...or when it is older than this (24 h).
MAX_AGE_SECONDS = 24 * 3600.0
#: Start times of one process read twice may differ by clock-tick rounding.
_START_TIME_TOLERANCE = 1.0


def obligation_id(session_key: str, token: str | None, content: str) -> str:
    """24 hex of sha256 over ``session_key``, turn ``token`` and ``content``, NUL-separated."""
    raw = "\x00".join((session_key, token or "", content))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


def current_process() -> tuple[int, float]:
    """``(pid, start time as epoch seconds)`` of this process, to claim rows with."""
    import psutil

    return os.getpid(), psutil.Process().create_time()


def owner_alive(pid: int | None, started_at: float | None) -> bool:
    """Whether process ``pid`` exists and started at ``started_at`` (same process, not reuse)."""
    if not pid or started_at is None:
        return False
    import psutil

    try:
        created = psutil.Process(int(pid)).create_time()
    except (psutil.Error, ValueError, OverflowError):
        return False
    return abs(created - float(started_at)) <= _START_TIME_TOLERANCE


def _same_owner(pid_a: int | None, start_a: float | None, pid_b: int, start_b: float) -> bool:
    return (
        pid_a == pid_b
        and start_a is not None
        and abs(float(start_a) - float(start_b)) <= _START_TIME_TOLERANCE
    )


def claim_allowed(
    state: str,
    owner_pid: int | None,
    owner_started_at: float | None,
    *,
    claimer_pid: int,
    claimer_started_at: float,
    is_alive: Callable[[int | None, float | None], bool] = owner_alive,
) -> bool:
    """Whether a sender may move a row to ``attempting`` now.

    Refused: final states; a row owned by another live process; a row the claimer is
    already attempting (a second send from the same owner would be a duplicate).
    """
    if state not in CLAIMABLE_STATES:
        return False
    mine = _same_owner(owner_pid, owner_started_at, claimer_pid, claimer_started_at)
    if mine:
        return state != "attempting"
    if owner_pid and is_alive(owner_pid, owner_started_at):
        return False
    return True


def finish_state(state: str, *, attempts: int, created_at: float, now: float) -> str:
    """The stored state after an attempt ends: ``delivered``, ``failed`` or ``abandoned``."""
    if state not in ("delivered", "failed"):
        raise ValueError(f"an attempt ends 'delivered' or 'failed', not {state!r}")
    if state == "failed" and (attempts >= MAX_ATTEMPTS or now - created_at > MAX_AGE_SECONDS):
        return "abandoned"
    return state
