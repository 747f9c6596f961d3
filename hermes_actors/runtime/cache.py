"""``AgentCacheActor``: the cached agents, one per session key (§11).

Agents are cached so a session keeps its prompt cache across turns. The actor owns the map;
turn workers check an agent out for the length of a turn and back in afterwards, so an agent
mid-turn is never released. Three passes release agents, each planned by a pure function of
:mod:`hermes_actors.runtime.eviction`: the LRU cap at every checkin, the idle TTL
(``sweep_idle``) and the memory budget (``sweep_memory``, ``check_pressure``) from
housekeeping.

Evictions are soft: ``commit_memory(transcript)`` when the agent has it, then
``release_clients()``, then the object is dropped. These calls, and ``close()``, are agent
code of unknown speed (a transcript read, a browser ending): the actor decides, and its
:class:`~hermes_actors.runtime.errands.Errands` worker makes the calls in order, off the
mailbox. A caller told "done" (``on_done``) hears it after its errands ran. An evicted agent is never reused; the next
turn gets a fresh one from the agent factory, which rebuilds history from the store
(§17.30). ``close()`` happens only at real boundaries: ``discard`` (``/new``, ``/reset``) and
``close_all`` (shutdown). ``close()`` is not an agent's thread-safe call (``interrupt`` is),
so an agent discarded while a turn holds it is *retired*: it leaves the map at once, is
closed when its turn checks it in, and is never put back.

Why an ``OrderedDict`` and not cachetools: ``LRUCache`` evicts by itself inside
``__setitem__`` (``popitem`` of the least recently used key, whatever it is), so it would
drop an agent mid-turn or with an unpersisted transcript, could not let the cache sit over
its cap while every agent is busy, and would run the eviction side effects (a store read,
``commit_memory``) inside a mapping assignment. It also iterates in insertion order, not
LRU order, so a planner could not see the order without private attributes. ``TTLCache``
measures from insertion (re-setting the key resets it, but expiry then silently drops
entries on any mutation, mid-turn or not, with no release). So the map is a plain
``OrderedDict`` kept in LRU order (``move_to_end`` on checkout and checkin), and idle time
is since last *use*: each slot records the injected clock's ``monotonic()`` at checkout
and at checkin, and ``plan_idle`` compares that with now. A turn that runs longer than the
TTL is in use, so it is never idle-released; its checkin restarts its idle time.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import pykka

from hermes_actors._green import off_the_hub
from hermes_actors._green.actor import LightActor
from hermes_actors.runtime.errands import Errands
from hermes_actors.runtime.eviction import (
    IN_USE,
    PRESSURE_CHECK_GROWTH_BYTES,
    CacheItem,
    EvictionPlan,
    describe_skipped,
    plan_idle,
    plan_lru,
    plan_memory,
)
from hermes_actors.runtime.guard import call_agent, call_optional
from hermes_actors.runtime.memory import MB, MemoryProbe, malloc_trim, resolve_budget

if TYPE_CHECKING:
    from hermes_actors.config import AgentCacheConfig

__all__ = ["EVICTION_REASONS", "PRESSURE_CHECK_GROWTH_BYTES", "AgentCacheActor",
           "CacheStatistics", "Checkin", "Checkout", "wait_settled"]

log = logging.getLogger("hermes_actors.cache")

#: The reasons an agent is evicted, as counted in :attr:`CacheStatistics.evictions`.
EVICTION_REASONS = ("lru", "idle", "memory")


@dataclass
class _Slot:
    agent: Any
    session_id: str
    in_use: bool
    last_used: float
    persisted: bool


@dataclass
class _Retired:
    """An agent discarded while a turn held it; ``closed`` once ``close()`` was called."""

    agent: Any
    closed: bool


class CacheStatistics(NamedTuple):
    """A snapshot of the agent cache."""

    #: Cached agents now.
    size: int
    #: Cached agents checked out by running turns.
    in_use: int
    #: Evictions so far, by reason (``lru``, ``idle``, ``memory``).
    evictions: dict[str, int]
    #: Agents closed at boundaries (``discard``, ``close_all``, a replaced session).
    closed: int
    #: The memory budget in bytes, or None when the memory pass is disabled.
    budget_bytes: int | None
    #: The anonymous memory measured by the last memory check, or None before any.
    last_anon_bytes: int | None
    #: Agents discarded while mid-turn, to be closed when their turn checks them in.
    retired: int


class Checkout(NamedTuple):
    """Ask message for :meth:`AgentCacheActor.checkout`: every turn sends one, and a plain
    message costs a third of a proxy call."""

    session_key: str
    session_id: str


class Checkin(NamedTuple):
    """Tell message for :meth:`AgentCacheActor.checkin` (see :class:`Checkout`)."""

    session_key: str
    session_id: str
    agent: Any
    persisted: bool | None = True
    on_done: Callable[[], None] | None = None


class AgentCacheActor(LightActor):
    """Owns the cached agents; see the module docstring.

    ``settings`` is an ``AgentCacheConfig``; ``clock`` has ``monotonic()``; ``probe`` has
    ``anon_bytes()`` and ``limit_bytes()`` (default: the real :class:`MemoryProbe`);
    ``load_transcript(session_id)`` gives the messages an evicted agent commits to memory
    (without it ``commit_memory`` is skipped: there is nothing to commit from). It runs on
    the actor's thread during an eviction. ``current_session_id(session_key)`` (the store's
    routing, ``None`` for an unknown key) tells a checkin whether the conversation its agent
    served is still current.
    """

    use_daemon_thread = True

    def __init__(
        self,
        settings: AgentCacheConfig,
        clock: Any,
        *,
        probe: Any = None,
        load_transcript: Callable[[str], list[dict]] | None = None,
        current_session_id: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__()
        self._current_session_id = current_session_id
        self._settings = settings
        self._clock = clock
        self._probe = probe if probe is not None else MemoryProbe()
        self._load_transcript = load_transcript
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._retired: dict[int, _Retired] = {}
        self._evictions = dict.fromkeys(EVICTION_REASONS, 0)
        self._closed = 0
        self._last_anon: int | None = None
        self._warned = False
        self._probe_failed = False
        self._budget = self._resolve_budget()
        self._errands = Errands()
        #: Set by ``close_all``: from then on an agent checked in is closed, never cached.
        self._shut = False

    def on_stop(self) -> None:
        """Let the errands handed over run, then stop their worker."""
        self._errands.stop()

    def on_receive(self, message: Any) -> Any:
        """The turn path's plain messages: :class:`Checkout` and :class:`Checkin`."""
        if type(message) is Checkin:
            return self.checkin(message.session_key, message.session_id, message.agent,
                                persisted=message.persisted, on_done=message.on_done)
        if type(message) is Checkout:
            return self.checkout(message.session_key, message.session_id)
        return super().on_receive(message)

    # -- turns ----------------------------------------------------------------------------

    def checkout(self, session_key: str, session_id: str) -> Any | None:
        """The cached agent for this session (marked in use), or None on a miss.

        A cached agent of another session id (the session was reset) is closed: None.
        """
        slot = self._slots.get(session_key)
        if slot is None:
            return None
        if slot.session_id != session_id:
            del self._slots[session_key]
            self._retire(session_key, slot)
            return None
        if slot.in_use:
            log.warning("agent already checked out session_key=%s; the turn gets a fresh one",
                        session_key)
            return None
        slot.in_use = True
        slot.last_used = self._clock.monotonic()
        self._slots.move_to_end(session_key)
        return slot.agent

    def checkin(self, session_key: str, session_id: str, agent: Any, *,
                persisted: bool | None = True,
                on_done: Callable[[], None] | None = None) -> None:
        """Return (or first insert) an agent after a turn; enforces the LRU cap.

        ``persisted=False`` says the turn's transcript is not fully in the store yet: the
        agent is then never evicted until a later checkin says it is. ``persisted=None``
        returns an agent lent to a turn that never began: only the loan ends (its flag, its
        last use and its place in the order stay as the checkout left them). An agent
        discarded while it was out is closed now (if ``close_all`` has not already) and not
        cached.
        ``on_done()`` is called at the end, evictions included (a turn sends its checkin
        without waiting and counts it as outstanding work until then).
        """
        with self._errands:
            try:
                self._checkin(session_key, session_id, agent, persisted)
            finally:
                if on_done is not None:
                    self._errands.run(on_done)

    def _checkin(self, session_key: str, session_id: str, agent: Any,
                 persisted: bool | None) -> None:
        retired = self._retired.pop(id(agent), None)
        if retired is not None and retired.agent is agent:
            if not retired.closed:
                self._close(session_key, agent)
            return
        if self._shut:  # a turn that outlived the shutdown's close: its agent is the last
            self._close(session_key, agent)
            return
        slot = self._slots.get(session_key)
        if self._ended(session_key, session_id):
            # The conversation this agent served ended while a turn held it (/new, /reset,
            # a suspension's rotation), in whatever order that raced with this checkin: a
            # boundary, so it is closed now and never cached. (Had the discard come after
            # this checkin, it would have found the agent cached and closed it itself.)
            if slot is not None and slot.agent is agent:
                del self._slots[session_key]
            self._close(session_key, agent)
            return
        if persisted is None:  # unused: the turn never began
            if slot is not None and slot.agent is agent:
                slot.in_use = False
                return
            persisted = True
        if slot is not None and slot.agent is not agent:
            del self._slots[session_key]
            self._retire(session_key, slot)
            slot = None
        now = self._clock.monotonic()
        if slot is None:
            self._slots[session_key] = _Slot(agent, session_id, False, now, persisted)
        else:
            slot.in_use, slot.last_used = False, now
            slot.session_id, slot.persisted = session_id, persisted
        self._slots.move_to_end(session_key)
        if len(self._slots) > self._settings.max_size:  # planning is not free: only when over
            lazy = (CacheItem(k, s.last_used, s.in_use, s.persisted)
                    for k, s in self._slots.items())
            plan = plan_lru(lazy, self._settings.max_size, len(self._slots))
            self._apply(plan, "lru")
            # An agent out for a turn is being used right now: the most recent use there
            # is. The ones this walk passed over move to the end, so the next walk does
            # not pass them again (busy agents would otherwise drift to the front).
            for skipped in plan.skipped:
                if skipped.reason == IN_USE:
                    self._slots.move_to_end(skipped.key)

    def _ended(self, session_key: str, session_id: str) -> bool:
        if self._current_session_id is None:
            return False
        current = self._current_session_id(session_key)
        return current is not None and current != session_id

    # -- boundaries -----------------------------------------------------------------------

    def discard(self, session_key: str,
                on_done: Callable[[], None] | None = None) -> bool:
        """Close and forget the session's agent (``/new``, ``/reset``); False if none.

        An agent mid-turn is closed when its turn checks it in, never cached again.
        ``on_done()`` is called once the close (if any) ran.
        """
        slot = self._slots.pop(session_key, None)
        if slot is not None:
            self._retire(session_key, slot)
        if on_done is not None:
            self._errands.run(on_done)
        return slot is not None

    def close_all(self) -> int:
        """Close every agent, cached or retired (shutdown); returns how many were closed.

        An agent still out is closed too and a late checkin of it is ignored; an agent
        checked in later that the cache never held (a turn that outlived the drain, on a
        fresh agent) is closed at its checkin. The closes run off the mailbox: wait for
        them with :func:`wait_settled`.
        """
        self._shut = True
        count = 0
        for key, slot in list(self._slots.items()):
            self._close(key, slot.agent)
            count += 1
            if slot.in_use:
                self._retired[id(slot.agent)] = _Retired(slot.agent, closed=True)
        self._slots.clear()
        for retired in self._retired.values():
            if not retired.closed:
                self._close("(retired)", retired.agent)
                retired.closed = True
                count += 1
        return count

    def settle(self) -> pykka.Future:
        """A future answered once the releases and closes decided so far have been carried
        out. The mailbox does not wait for them (a turn's checkout would, behind an agent's
        slow ``commit_memory``): the caller waits, with :func:`wait_settled`."""
        return self._errands.settled()

    # -- housekeeping ---------------------------------------------------------------------

    def sweep_idle(self) -> int:
        """Release agents unused for ``idle_ttl_secs`` (0 disables); returns how many."""
        plan = plan_idle(self._items(), self._clock.monotonic(), self._settings.idle_ttl_secs)
        return self._apply(plan, "idle")

    def sweep_memory(self) -> int:
        """The memory pass: over budget, release up to ``max_evictions_per_pass`` agents.

        Least recently used first, then ``malloc_trim``. When over budget and nothing can be
        released, one warning says why (until the figure drops or something is released).
        Returns how many were released; 0 when the pass is disabled.
        """
        if self._budget is None:
            return 0
        anon = self._measure()
        if anon is None:
            return 0
        return self._memory_pass(anon)

    def check_pressure(self) -> int:
        """The post-turn memory check: one cheap measurement, the memory pass if over budget.

        A turn worker calls it after a turn that added at least
        :data:`PRESSURE_CHECK_GROWTH_BYTES` (1 MB) to its transcript, so a sudden large
        transcript is shed before the next housekeeping tick. Returns how many were released.
        """
        return self.sweep_memory()

    def statistics(self) -> CacheStatistics:
        """A snapshot record."""
        return CacheStatistics(
            size=len(self._slots),
            in_use=sum(1 for s in self._slots.values() if s.in_use),
            evictions=dict(self._evictions),
            closed=self._closed,
            budget_bytes=self._budget,
            last_anon_bytes=self._last_anon,
            retired=sum(1 for r in self._retired.values() if not r.closed),
        )

    # -- internals ------------------------------------------------------------------------

    def _items(self) -> list[CacheItem]:
        return [CacheItem(k, s.last_used, s.in_use, s.persisted) for k, s in self._slots.items()]

    def _resolve_budget(self) -> int | None:
        try:
            budget = resolve_budget(self._settings.memory_high_mb, self._probe)
        except Exception:  # noqa: BLE001 - a broken probe disables the pass, not the cache
            log.exception("memory budget could not be resolved; the memory pass is disabled")
            return None
        if budget is None:
            log.info("agent cache memory pass disabled (memory_high_mb=%s)",
                     self._settings.memory_high_mb)
        else:
            log.info("agent cache memory budget %.0f MB (memory_high_mb=%s)",
                     budget / MB, self._settings.memory_high_mb)
        return budget

    def _measure(self) -> int | None:
        try:
            anon = int(self._probe.anon_bytes())
        except Exception:  # noqa: BLE001
            if not self._probe_failed:
                log.exception("memory probe failed; the memory pass is skipped")
            self._probe_failed = True
            return None
        self._probe_failed = False
        self._last_anon = anon
        return anon

    def _memory_pass(self, anon: int) -> int:
        budget = self._budget
        assert budget is not None
        if anon <= budget:
            self._warned = False
            return 0
        s = self._settings
        plan = plan_memory(self._items(), s.protect_recent, s.max_evictions_per_pass)
        if not plan.victims:
            if not self._warned:
                log.warning(
                    "memory over budget (anon %.0f MB > budget %.0f MB) and nothing could be "
                    "released: %s", anon / MB, budget / MB, describe_skipped(plan))
                self._warned = True
            return 0
        self._warned = False
        released = self._apply(plan, "memory")

        def trimmed() -> None:  # after the releases, so the freed arenas go back to the OS
            off_the_hub(malloc_trim)  # a walk of every arena: under gevent, not in the hub
            log.info("memory pass released %d agents: anon %.0f MB (budget %.0f MB)",
                     released, anon / MB, budget / MB)

        self._errands.run(trimmed)
        return released

    def _apply(self, plan: EvictionPlan, reason: str) -> int:
        for key in plan.victims:
            self._evict(key, reason)
        return len(plan.victims)

    def _evict(self, session_key: str, reason: str) -> None:
        """Soft release: commit the transcript to memory, release clients, drop the agent."""
        slot = self._slots.pop(session_key)
        self._evictions[reason] += 1
        agent, load = slot.agent, self._load_transcript

        def release() -> None:
            commit = getattr(agent, "commit_memory", None)
            if callable(commit) and load is not None:
                call_agent("commit_memory", session_key,
                           lambda: commit(load(slot.session_id)))
            call_optional("release_clients", session_key, agent, "release_clients")

        self._errands.run(release)
        if log.isEnabledFor(logging.DEBUG):  # (one frame less than debug() when off)
            log.debug("evicted session_key=%s reason=%s", session_key, reason)

    def _retire(self, session_key: str, slot: _Slot) -> None:
        """Close an agent leaving the map at a boundary, or after its turn if it is out."""
        if slot.in_use:
            self._retired[id(slot.agent)] = _Retired(slot.agent, closed=False)
        else:
            self._close(session_key, slot.agent)

    def _close(self, session_key: str, agent: Any) -> None:
        self._closed += 1
        self._errands.run(lambda: call_optional("agent close", session_key, agent, "close"))


def wait_settled(cache: Any, timeout: float | None = None) -> None:
    """Wait, outside the cache's mailbox, until the releases and closes the cache (a proxy
    of :class:`AgentCacheActor`) decided so far have run: ``pykka.Timeout`` after
    ``timeout`` seconds at each of the two steps."""
    cache.settle().get(timeout=timeout).get(timeout=timeout)
