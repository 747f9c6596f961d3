"""Eviction planning for the agent cache: pure functions over plain records (§11).

The cache actor turns its slots into :class:`CacheItem` records in LRU order (least recently
used first) and asks a planner which to release; the planner never touches an agent, a
clock or a file, so every rule below is tested without actors or threads.

Rules shared by all planners: an agent in use (mid-turn) or whose transcript is not yet
persisted is never chosen. Such entries are *skipped*, not counted: they do not use up a
batch, the walk goes on to the next candidate. Each plan says what was skipped and why, so
the actor can warn "nothing could be released because ...".

Only the memory pass protects the most recently used entries: the LRU cap only ever removes
the oldest entries, and the idle TTL exists to release agents nobody used for an hour,
however recent they are relative to each other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "IN_USE",
    "PRESSURE_CHECK_GROWTH_BYTES",
    "PROTECTED",
    "UNPERSISTED",
    "CacheItem",
    "EvictionPlan",
    "Skipped",
    "describe_skipped",
    "plan_idle",
    "plan_lru",
    "plan_memory",
    "protected_count",
    "should_check_pressure",
]

#: Skip reason: the agent is checked out by a running turn.
IN_USE = "in_use"
#: Skip reason: the agent's transcript is not yet fully persisted.
UNPERSISTED = "unpersisted"
#: Skip reason: among the ``protect_recent`` most recently used.
PROTECTED = "protected"

#: A turn that added at least this many bytes to its transcript should be followed by a
#: cheap ``AgentCacheActor.check_pressure()``: 1 MB is far above a chat exchange and
#: typical of tool output (file dumps, web pages) that makes a transcript suddenly huge,
#: so the memory pass reacts before the next housekeeping tick (up to 300 s away).
PRESSURE_CHECK_GROWTH_BYTES = 1 << 20

_WHY = {
    IN_USE: "mid-turn",
    UNPERSISTED: "not yet persisted",
    PROTECTED: "protected as most recently used",
}


class CacheItem(NamedTuple):
    """What a planner needs to know of one cached agent."""

    #: The session key.
    key: str
    #: Monotonic seconds of the last checkout or checkin.
    last_used: float
    #: Checked out by a running turn.
    in_use: bool = False
    #: The transcript is fully persisted (a released agent can be rebuilt from the store).
    persisted: bool = True


class Skipped(NamedTuple):
    """A candidate that was passed over, and why."""

    #: The session key.
    key: str
    #: :data:`IN_USE`, :data:`UNPERSISTED` or :data:`PROTECTED`.
    reason: str


class EvictionPlan(NamedTuple):
    """The keys to release, in order, and the candidates passed over."""

    #: Session keys to release, least recently used first.
    victims: tuple[str, ...] = ()
    #: Candidates examined and passed over, in the order they were examined.
    skipped: tuple[Skipped, ...] = ()


def _blocker(item: CacheItem) -> str | None:
    if item.in_use:
        return IN_USE
    if not item.persisted:
        return UNPERSISTED
    return None


def _any(item: CacheItem) -> bool:
    return True


def _walk(items: Iterable[CacheItem], limit: int, protected: frozenset[str] = frozenset(),
          wanted: Callable[[CacheItem], bool] = _any) -> EvictionPlan:
    """Take up to ``limit`` wanted, evictable items in order; record what was passed over."""
    victims: list[str] = []
    skipped: list[Skipped] = []
    if limit <= 0:
        return EvictionPlan()
    for item in items:
        if not wanted(item):
            continue
        reason = _blocker(item) or (PROTECTED if item.key in protected else None)
        if reason is not None:
            skipped.append(Skipped(item.key, reason))
            continue
        victims.append(item.key)
        if len(victims) >= limit:
            break
    return EvictionPlan(tuple(victims), tuple(skipped))


def plan_lru(items: Iterable[CacheItem], max_size: int,
             size: int | None = None) -> EvictionPlan:
    """Release the least recently used evictable entries until ``max_size`` is met.

    When too few entries are evictable the cache stays over its cap until a later checkin.
    ``items`` may be a lazy iterable in LRU order when ``size`` says how many there are:
    the walk stops at the last victim, so a checkin at the cap costs O(1), not O(cache).
    """
    if size is None:
        items = list(items)
        size = len(items)
    return _walk(items, size - max_size)


def plan_idle(items: Sequence[CacheItem], now: float, idle_ttl: float | None) -> EvictionPlan:
    """Release every evictable entry unused for ``idle_ttl`` seconds or more at ``now``.

    ``idle_ttl`` of None or ``<= 0`` disables the idle TTL (an empty plan).
    """
    if idle_ttl is None or idle_ttl <= 0:
        return EvictionPlan()
    return _walk(items, len(items), wanted=lambda item: now - item.last_used >= idle_ttl)


def protected_count(size: int, protect_recent: int) -> int:
    """How many most recently used entries the memory pass protects: at most half."""
    return max(0, min(protect_recent, size // 2))


def plan_memory(items: Sequence[CacheItem], protect_recent: int,
                max_evictions: int) -> EvictionPlan:
    """Release up to ``max_evictions`` evictable entries, least recently used first.

    The ``protect_recent`` most recently used are passed over, but never more than half the
    cache, so a small cache of huge transcripts can still shed; 0 protects nothing.
    """
    keep = protected_count(len(items), protect_recent)
    protected = frozenset(item.key for item in items[len(items) - keep:]) if keep else frozenset()
    return _walk(items, max_evictions, protected)


def describe_skipped(plan: EvictionPlan) -> str:
    """Why a plan released nothing, for a log line: ``"2 mid-turn, 1 not yet persisted"``."""
    if not plan.skipped:
        return "no agent is cached"
    counts = Counter(s.reason for s in plan.skipped)
    return ", ".join(f"{counts[r]} {_WHY[r]}" for r in (IN_USE, UNPERSISTED, PROTECTED)
                     if counts[r])


def should_check_pressure(grown_bytes: int) -> bool:
    """Whether a turn that added ``grown_bytes`` to its transcript should check pressure."""
    return grown_bytes >= PRESSURE_CHECK_GROWTH_BYTES
