"""The ``AgentCacheActor`` (§11): LRU cap, idle TTL, memory pass, boundaries."""

from __future__ import annotations

import logging
import threading

import pykka
import pytest

from hermes_actors.config import AgentCacheConfig
from hermes_actors.runtime.cache import (
    AgentCacheActor,
    CacheStatistics,
    Checkin,
    Checkout,
    wait_settled,
)
from hermes_actors.runtime.memory import MB
from hermes_actors.testing import FakeClock, FakeMemoryProbe


class FakeAgent:
    """An agent that records every lifecycle call, in order, in a shared list."""

    def __init__(self, name: str, calls: list) -> None:
        self.name = name
        self.calls = calls

    def commit_memory(self, messages: list[dict]) -> None:
        self.calls.append((self.name, "commit_memory", messages))

    def release_clients(self) -> None:
        self.calls.append((self.name, "release_clients"))

    def close(self) -> None:
        self.calls.append((self.name, "close"))

    def __repr__(self) -> str:
        return f"FakeAgent({self.name})"


class PlainAgent(FakeAgent):
    """An agent without the optional ``commit_memory``."""

    commit_memory = None  # type: ignore[assignment]


class BrokenAgent(FakeAgent):
    """An agent whose every lifecycle method raises."""

    def commit_memory(self, messages: list[dict]) -> None:
        raise RuntimeError("commit broke")

    def release_clients(self) -> None:
        raise RuntimeError("release broke")

    def close(self) -> None:
        raise RuntimeError("close broke")


def transcript(session_id: str) -> list[dict]:
    return [{"role": "user", "content": f"transcript of {session_id}"}]


class Cache:
    """A started cache actor with its fake clock, fake probe and the agents' call log."""

    def __init__(self, limit_mb: float | None = None, **settings) -> None:
        self.clock = FakeClock()
        self.probe = FakeMemoryProbe(anon_mb=0.0, limit_mb=limit_mb)
        self._calls: list = []
        #: The routing the cache consults: session key -> current session id (a key not
        #: here is unknown).
        self.current: dict[str, str] = {}
        settings.setdefault("memory_high_mb", None)
        self.ref = AgentCacheActor.start(
            AgentCacheConfig(**settings), self.clock, probe=self.probe,
            load_transcript=transcript, current_session_id=self.current.get,
        )
        self.proxy = self.ref.proxy()

    @property
    def calls(self) -> list:
        """The agents' lifecycle calls, once the cache's errands have run (the calls leave
        the cache's mailbox: it decides, its errand worker calls)."""
        wait_settled(self.proxy, timeout=10)
        return self._calls

    def agent(self, name: str, cls: type = FakeAgent) -> FakeAgent:
        return cls(name, self._calls)

    def put(self, key: str, agent: FakeAgent | None = None, *, sid: str | None = None,
            persisted: bool = True) -> FakeAgent:
        """A turn that started on a miss: check a fresh agent in under ``key``."""
        agent = agent or self.agent(key)
        self.proxy.checkin(key, sid or f"sid-{key}", agent, persisted=persisted).get()
        return agent

    def checkout(self, key: str, sid: str | None = None):
        return self.proxy.checkout(key, sid or f"sid-{key}").get()

    def use(self, key: str) -> None:
        """A whole turn on a cached agent: checkout then checkin."""
        agent = self.checkout(key)
        assert agent is not None
        self.put(key, agent)

    def stats(self) -> CacheStatistics:
        return self.proxy.statistics().get()


@pytest.fixture
def make_cache():
    made: list[Cache] = []

    def make(limit_mb: float | None = None, **settings) -> Cache:
        cache = Cache(limit_mb, **settings)
        made.append(cache)
        return cache

    yield make
    for cache in made:
        cache.ref.stop()


class TestCheckoutCheckin:
    """A checked-in agent is handed back to its session's next turn, and only to it."""

    def test_miss_then_hit(self, make_cache):
        c = make_cache()
        assert c.checkout("a") is None
        a = c.put("a")
        assert c.checkout("a") is a
        assert c.stats().in_use == 1
        c.put("a", a)
        assert c.stats().in_use == 0
        assert c.calls == []

    def test_a_different_session_id_closes_the_old_agent(self, make_cache):
        c = make_cache()
        a = c.put("a", sid="s1")
        assert c.checkout("a", "s2") is None
        assert c.calls == [("a", "close")]
        assert c.stats().size == 0 and c.stats().closed == 1
        assert a not in (c.checkout("a", "s1"), c.checkout("a", "s2"))

    def test_a_new_agent_checked_in_replaces_and_closes_the_cached_one(self, make_cache):
        c = make_cache()
        c.put("a")
        b = c.put("a", c.agent("b"))
        assert c.calls == [("a", "close")]
        assert c.checkout("a") is b

    def test_checkout_of_an_agent_already_out_is_a_miss(self, make_cache):
        c = make_cache()
        a = c.put("a")
        assert c.checkout("a") is a
        assert c.checkout("a") is None


class TestTurnMessages:
    """The plain messages a turn sends do what the proxy methods do."""

    def test_checkout_and_checkin_messages(self, make_cache):
        c = make_cache()
        assert c.ref.ask(Checkout("a", "sid-a")) is None
        a = c.agent("a")
        done = threading.Event()
        c.ref.tell(Checkin("a", "sid-a", a, False, done.set))
        assert done.wait(5)
        assert c.ref.ask(Checkout("a", "sid-a")) is a
        stats = c.stats()
        assert (stats.size, stats.in_use) == (1, 1)
        c.ref.tell(Checkin("a", "sid-a", a, None))  # the loan of a turn that never began
        assert c.checkout("a") is a  # handed out again: the loan had ended

    def test_another_message_is_not_taken_for_one(self, make_cache):
        c = make_cache()
        c.put("a")
        assert c.ref.ask(("a", "sid-a")) is None  # a tuple with the same fields: ignored
        assert c.stats().in_use == 0


class TestLruCap:
    """Over the cap the least recently used evictable agent is soft-released and dropped."""

    def test_cap_honoured_in_lru_order_with_soft_release(self, make_cache):
        c = make_cache(max_size=2)
        a = c.put("a")
        c.put("b")
        c.use("a")  # a is now the most recently used
        c.put("c")
        assert c.calls == [("b", "commit_memory", transcript("sid-b")), ("b", "release_clients")]
        s = c.stats()
        assert s.size == 2 and s.evictions == {"lru": 1, "idle": 0, "memory": 0}
        assert s.closed == 0
        assert c.checkout("b") is None  # an evicted agent is never reused
        assert c.checkout("a") is a

    def test_an_agent_mid_turn_is_never_evicted(self, make_cache):
        c = make_cache(max_size=1)
        a = c.put("a")
        assert c.checkout("a") is a
        c.put("b")
        assert c.calls == [("b", "commit_memory", transcript("sid-b")), ("b", "release_clients")]
        c.put("a", a)
        assert c.checkout("a") is a

    def test_an_unpersisted_agent_is_never_evicted(self, make_cache):
        c = make_cache(max_size=1)
        a = c.put("a", persisted=False)
        c.put("b")
        assert [call[0] for call in c.calls] == ["b", "b"]
        assert c.checkout("a") is a

    def test_cap_waits_while_everything_is_busy(self, make_cache):
        c = make_cache(max_size=1)
        c.put("a", persisted=False)
        c.put("b", persisted=False)
        assert c.stats().size == 2 and c.calls == []


class TestIdleTtl:
    """Idle time counts from the last checkout or checkin, not from insertion."""

    def test_recently_used_agent_survives(self, make_cache):
        c = make_cache(idle_ttl_secs=100)
        c.put("a")
        b = c.put("b")
        c.clock.advance(60)
        c.use("b")
        c.clock.advance(50)
        assert c.proxy.sweep_idle().get() == 1
        assert c.calls == [("a", "commit_memory", transcript("sid-a")), ("a", "release_clients")]
        assert c.checkout("b") is b
        assert c.stats().evictions["idle"] == 1

    def test_a_long_turn_is_not_idle(self, make_cache):
        c = make_cache(idle_ttl_secs=100)
        a = c.put("a")
        c.checkout("a")
        c.clock.advance(1000)
        assert c.proxy.sweep_idle().get() == 0
        c.put("a", a)
        c.clock.advance(99)
        assert c.proxy.sweep_idle().get() == 0
        c.clock.advance(1)
        assert c.proxy.sweep_idle().get() == 1

    def test_unpersisted_agent_is_kept(self, make_cache):
        c = make_cache(idle_ttl_secs=10)
        c.put("a", persisted=False)
        c.clock.advance(100)
        assert c.proxy.sweep_idle().get() == 0

    def test_zero_ttl_disables(self, make_cache):
        c = make_cache(idle_ttl_secs=0)
        c.put("a")
        c.clock.advance(1e6)
        assert c.proxy.sweep_idle().get() == 0


class TestMemoryPass:
    """Over budget, up to a batch of LRU agents commit, release, and the heap is trimmed."""

    def test_releases_a_batch_lru_first_committing_before_releasing(self, make_cache):
        c = make_cache(memory_high_mb=500, max_evictions_per_pass=2, protect_recent=0)
        for key in "abcde":
            c.put(key)
        c.probe.anon_mb = 800
        assert c.proxy.sweep_memory().get() == 2
        assert c.calls == [
            ("a", "commit_memory", transcript("sid-a")), ("a", "release_clients"),
            ("b", "commit_memory", transcript("sid-b")), ("b", "release_clients"),
        ]
        s = c.stats()
        assert s.size == 3 and s.evictions["memory"] == 2
        assert s.budget_bytes == 500 * MB and s.last_anon_bytes == 800 * MB

    def test_under_budget_releases_nothing(self, make_cache):
        c = make_cache(memory_high_mb=500)
        c.put("a")
        c.probe.anon_mb = 499
        assert c.proxy.sweep_memory().get() == 0
        assert c.stats().last_anon_bytes == 499 * MB

    def test_protects_the_most_recent_but_at_most_half(self, make_cache):
        c = make_cache(memory_high_mb=100, protect_recent=8)
        for key in "abcd":
            c.put(key)
        c.probe.anon_mb = 200
        assert c.proxy.sweep_memory().get() == 2
        assert c.checkout("c") is not None and c.checkout("d") is not None

    def test_in_use_and_unpersisted_skipped_without_using_the_batch(self, make_cache):
        c = make_cache(memory_high_mb=100, max_evictions_per_pass=1, protect_recent=0)
        c.put("a")
        c.put("b", persisted=False)
        c.put("c")
        c.put("d")
        c.checkout("a")
        c.probe.anon_mb = 200
        assert c.proxy.sweep_memory().get() == 1
        assert [call[0] for call in c.calls] == ["c", "c"]

    def test_agent_without_commit_memory_is_just_released(self, make_cache):
        c = make_cache(memory_high_mb=100, protect_recent=0)
        c.put("a", c.agent("a", PlainAgent))
        c.probe.anon_mb = 200
        assert c.proxy.sweep_memory().get() == 1
        assert c.calls == [("a", "release_clients")]

    def test_one_warning_when_nothing_can_be_released(self, make_cache, caplog):
        c = make_cache(memory_high_mb=100, protect_recent=8)
        c.put("a")
        c.put("b", persisted=False)
        c.checkout("a")
        c.put("c")
        c.put("d")  # LRU order: b (unpersisted), a (mid-turn), c, d (protected: half of 4)
        c.probe.anon_mb = 300
        with caplog.at_level(logging.WARNING, logger="hermes_actors.cache"):
            assert c.proxy.sweep_memory().get() == 0
            assert c.proxy.sweep_memory().get() == 0
            assert c.proxy.check_pressure().get() == 0
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert "nothing could be released" in message
        assert "1 mid-turn" in message and "1 not yet persisted" in message
        assert "2 protected" in message
        assert c.calls == []

    def test_warns_again_after_recovering(self, make_cache, caplog):
        c = make_cache(memory_high_mb=100)
        c.put("a")
        c.checkout("a")
        with caplog.at_level(logging.WARNING, logger="hermes_actors.cache"):
            c.probe.anon_mb = 300
            c.proxy.sweep_memory().get()
            c.probe.anon_mb = 50
            c.proxy.sweep_memory().get()
            c.probe.anon_mb = 300
            c.proxy.sweep_memory().get()
        assert sum(r.levelno == logging.WARNING for r in caplog.records) == 2

    def test_check_pressure_runs_the_pass(self, make_cache):
        c = make_cache(memory_high_mb=100, protect_recent=0)
        c.put("a")
        c.probe.anon_mb = 101
        assert c.proxy.check_pressure().get() == 1

    def test_disabled_pass_measures_nothing(self, make_cache):
        c = make_cache(memory_high_mb=None)
        c.put("a")
        c.probe.anon_mb = 1e6
        assert c.proxy.sweep_memory().get() == 0
        s = c.stats()
        assert s.budget_bytes is None and s.last_anon_bytes is None

    def test_auto_budget_is_resolved_once_from_the_probe_limit(self, make_cache):
        c = make_cache(memory_high_mb="auto", limit_mb=2048)
        assert c.stats().budget_bytes == int(2048 * MB * 0.65)
        c.probe.limit_mb = 100
        assert c.stats().budget_bytes == int(2048 * MB * 0.65)

    def test_auto_under_the_floor_disables_the_pass(self):
        ref = AgentCacheActor.start(AgentCacheConfig(memory_high_mb="auto"), FakeClock(),
                                    probe=FakeMemoryProbe(anon_mb=1e6, limit_mb=700))
        try:
            assert ref.proxy().statistics().get().budget_bytes is None
            assert ref.proxy().sweep_memory().get() == 0
        finally:
            ref.stop()


class TestBoundaries:
    """``discard`` and ``close_all`` fully close agents, and a closed agent is never cached."""

    def test_discard_closes(self, make_cache):
        c = make_cache()
        c.put("a")
        assert c.proxy.discard("a").get() is True
        assert c.calls == [("a", "close")]
        assert c.proxy.discard("a").get() is False
        assert c.checkout("a") is None
        assert c.stats().closed == 1

    def test_checkin_sent_without_waiting_reports_done_after_its_evictions(self, make_cache):
        c = make_cache(max_size=1)
        c.put("a")
        done = threading.Event()
        seen: list = []

        def on_done() -> None:  # runs on the cache's errand worker: no settle() here
            seen.append(list(c._calls))
            done.set()

        c.proxy.checkin.defer("b", "sid-b", c.agent("b"), persisted=True, on_done=on_done)
        assert done.wait(5)
        assert [call[:2] for call in seen[0]] == [("a", "commit_memory"),
                                                  ("a", "release_clients")]

    def test_discard_while_in_use_then_checkin_does_not_resurrect(self, make_cache):
        c = make_cache()
        a = c.put("a")
        assert c.checkout("a") is a
        assert c.proxy.discard("a").get() is True
        assert c.stats().retired == 1 and c.stats().size == 0
        assert c.calls == []  # close waits for the turn: it is not a thread-safe call
        c.put("a", a)  # the interrupted turn ends
        assert c.calls == [("a", "close")]
        s = c.stats()
        assert s.size == 0 and s.retired == 0 and s.closed == 1
        assert c.checkout("a") is None

    def test_close_all_closes_cached_and_out_agents_once(self, make_cache):
        c = make_cache()
        c.put("a")
        b = c.put("b")
        c.checkout("b")
        r = c.put("r")
        c.checkout("r")
        c.proxy.discard("r").get()
        assert c.proxy.close_all().get() == 3
        assert sorted(c.calls) == [("a", "close"), ("b", "close"), ("r", "close")]
        c.put("b", b)  # late checkins after shutdown
        c.put("r", r)
        assert len(c.calls) == 3
        assert c.stats().size == 0

    def test_agent_the_cache_never_held_is_closed_at_a_checkin_after_close_all(
            self, make_cache):
        # a turn that outlived the shutdown's drain, on a fresh agent from the factory
        c = make_cache()
        c.put("a")
        assert c.proxy.close_all().get() == 1
        c.put("late")
        assert sorted(c.calls) == [("a", "close"), ("late", "close")]
        assert c.stats().size == 0

    def test_waiting_for_releases_leaves_the_mailbox_free(self, make_cache):
        # housekeeping waits for a pass's releases; meanwhile turns get their agents
        entered, gate = threading.Event(), threading.Event()

        class SlowCommit(FakeAgent):
            def commit_memory(self, messages: list[dict]) -> None:
                entered.set()
                assert gate.wait(10)
                super().commit_memory(messages)

        c = make_cache(idle_ttl_secs=100)
        c.put("old", c.agent("old", SlowCommit))
        c.clock.advance(200)
        hot = c.put("hot")
        assert c.proxy.sweep_idle().get() == 1
        assert entered.wait(5)
        settled = c.proxy.settle().get()  # asked while old's commit_memory runs
        try:
            assert c.ref.ask(Checkout("hot", "sid-hot"), timeout=5) is hot  # answered
            with pytest.raises(pykka.Timeout):  # (the gate is shut: it cannot be done)
                settled.get(timeout=0.05)
        finally:
            gate.set()
        settled.get(timeout=5)
        assert ("old", "commit_memory") in [call[:2] for call in c.calls]

    def test_agent_exceptions_are_logged_and_the_actor_lives_on(self, make_cache, caplog):
        c = make_cache(max_size=1, memory_high_mb=100, protect_recent=0)
        c.put("a", c.agent("a", BrokenAgent))
        with caplog.at_level(logging.ERROR, logger="hermes_actors.cache"):
            c.put("b", c.agent("b", BrokenAgent))  # a is evicted: commit and release raise
            c.proxy.discard("b").get()  # close raises
            wait_settled(c.proxy, timeout=10)  # the calls are the errand worker's
        messages = [r.getMessage() for r in caplog.records]
        assert any("commit_memory failed" in m for m in messages)
        assert any("release_clients failed" in m for m in messages)
        assert any("close failed" in m for m in messages)
        assert c.ref.is_alive()
        assert c.stats().evictions["lru"] == 1 and c.stats().closed == 1

    def test_runs_on_a_daemon_thread(self):
        assert AgentCacheActor.use_daemon_thread is True
        assert issubclass(AgentCacheActor, pykka.ThreadingActor)


class TestBoundaryInterleavings:
    """An agent whose conversation /new (or /reset) ended is closed exactly once, in every
    order of the turn's checkout and checkin, the routing change and the discard (issue 17.5:
    a first turn's agent is not in the cache when /new discards)."""

    def _new(self, c: Cache, key: str) -> bool:
        """What /new does: the routing moves to a new session id, then the cache discards."""
        c.current[key] = f"new-{key}"
        return c.proxy.discard(key).get()

    def test_first_turn_agent_checked_in_after_new(self, make_cache):
        c = make_cache()
        c.current["a"] = "sid-a"
        assert c.checkout("a") is None  # a first turn: the factory makes the agent
        assert self._new(c, "a") is False  # nothing cached to discard yet
        c.put("a", c.agent("a"))  # the interrupted first turn ends
        assert c.calls == [("a", "close")]
        assert c.stats().size == 0 and c.stats().closed == 1
        assert c.checkout("a", "new-a") is None  # the new session gets a fresh agent

    def test_routing_changed_but_checkin_came_before_the_discard(self, make_cache):
        c = make_cache()
        c.current["a"] = "sid-a"
        c.put("a", c.agent("a"))
        assert c.calls == []
        assert self._new(c, "a") is True
        assert c.calls == [("a", "close")]

    def test_checkin_between_routing_change_and_discard(self, make_cache):
        c = make_cache()
        c.current["a"] = "sid-a"
        agent = c.agent("a")
        c.current["a"] = "new-a"  # reset committed, discard not yet sent
        c.put("a", agent)
        assert c.proxy.discard("a").get() is False
        assert c.calls == [("a", "close")]

    def test_cached_agent_out_for_a_turn_when_new_comes(self, make_cache):
        c = make_cache()
        c.current["a"] = "sid-a"
        a = c.put("a")
        assert c.checkout("a") is a
        assert self._new(c, "a") is True  # retired: closed when its turn ends
        assert c.calls == []
        c.put("a", a)
        assert c.calls == [("a", "close")]
        assert c.stats().retired == 0 and c.stats().closed == 1

    def test_unused_loan_returned_after_new(self, make_cache):
        c = make_cache()
        c.current["a"] = "sid-a"
        a = c.put("a")
        assert c.checkout("a") is a
        c.current["a"] = "new-a"
        c.proxy.checkin("a", "sid-a", a, persisted=None).get()  # its turn never began
        assert c.proxy.discard("a").get() is False
        assert c.calls == [("a", "close")]

    def test_current_session_keeps_its_agent(self, make_cache):
        c = make_cache()
        c.current["a"] = "sid-a"
        a = c.put("a")
        assert c.checkout("a") is a and c.calls == []
        c.put("b")  # a key the routing does not know is cached as before
        assert c.stats().size == 2
