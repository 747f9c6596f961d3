"""§10/§11 through the Gateway: cap, idle TTL, memory budget, protection, release vs close."""

from __future__ import annotations

import os
import threading

import pytest

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.agents.base import TurnResult
from hermes_actors.testing import FakeClock, FakeMemoryProbe, ScriptedAgent


def send(h, chat: str, text: str) -> None:
    h.gw.submit(MessageEvent(source=SessionSource("telegram", chat_id=chat), text=text))



class TestCap:
    """Over max_size the least recently used agent is soft-released and never reused."""

    def test_lru_released_and_history_rebuilt(self, make_harness):
        h = make_harness(agent={"agent_cache": {"max_size": 2}})
        for chat in ("1", "2", "3"):
            send(h, chat, f"hello {chat}")
            h.idle()
        first, second, third = h.agents
        assert (first.released, first.closed) == (1, False)
        assert (second.released, third.released) == (0, 0)
        assert h.gw.stats()["cache"]["size"] == 2
        send(h, "1", "again")
        h.idle()
        assert len(h.agents) == 4, "an evicted agent is never reused"
        assert h.log[-1].history_len == 2, "the fresh agent saw the full history"
        assert h.texts()[-1] == "echo: again"


class TestIdleTtl:
    """Agents unused for idle_ttl_secs are released by housekeeping; recent ones stay."""

    def test_ttl_since_last_use(self, make_harness):
        h = make_harness(agent={"agent_cache": {"idle_ttl_secs": 100,
                                                "memory_high_mb": "off"}})
        send(h, "1", "a")
        h.idle()
        h.clock.advance(50)
        send(h, "2", "b")
        h.idle()
        h.clock.advance(60)
        h.gw.housekeeping_tick()
        old, recent = h.agents
        assert old.released == 1 and recent.released == 0
        assert h.gw.stats()["cache"]["evictions"]["idle"] == 1


class TestMemoryBudget:
    """Over budget, idle agents are released LRU-first; a turn's agent never is."""

    def test_pressure_spares_running_turn(self, make_harness):
        h = make_harness(agent={"agent_cache": {"memory_high_mb": 200, "protect_recent": 0}})
        for chat in ("1", "2"):
            send(h, chat, "x")
        h.idle()
        send(h, "busy", "hold g")
        assert h.gates.wait_until_waiting("g")
        h.probe.anon_mb = 500
        h.gw.housekeeping_tick()
        one, two, busy = h.agents
        assert busy.released == 0 and not busy.closed
        assert one.released == 1 and two.released == 1
        assert one.committed and one.committed[0][-1]["content"] == "echo: x"
        h.gates.open("g")
        h.idle()

    @pytest.mark.skipif(os.environ.get("HERMES_TEST_BACKEND") != "gevent",
                        reason="only gevent has a hub to block")
    def test_the_trim_after_a_memory_pass_runs_off_the_hub(self, make_harness, monkeypatch):
        # malloc_trim walks every heap arena (tens of milliseconds at a few hundred MB, the
        # heaps a memory pass meets): run in the hub, it froze every actor meanwhile
        import gevent
        from gevent.monkey import get_original

        native_ident = get_original("_thread", "get_ident")
        trimmed_on: list[int] = []

        def trim() -> bool:  # records the native thread glibc's call would run on
            trimmed_on.append(native_ident())
            return True

        monkeypatch.setattr("hermes_actors.runtime.cache.malloc_trim", trim)
        h = make_harness(agent={"agent_cache": {"memory_high_mb": 200, "protect_recent": 0}})
        send(h, "1", "x")
        h.idle()
        h.probe.anon_mb = 500
        h.gw.housekeeping_tick()  # the pass waits for its releases and the trim
        assert h.agents[0].released == 1
        assert trimmed_on and gevent.get_hub().thread_ident not in trimmed_on

    def test_unpersisted_agent_never_released(self, make_harness, monkeypatch):
        h = make_harness(agent={"agent_cache": {"memory_high_mb": 200, "protect_recent": 0}})
        store = h.gw.store
        real_record = store.ledger_record

        def failing(**kw):  # the reply is persisted in the ledger's transaction
            if kw.get("reply") is not None:
                raise OSError("disk went away")
            return real_record(**kw)

        monkeypatch.setattr(store, "ledger_record", failing)
        send(h, "1", "x")
        h.idle()
        h.probe.anon_mb = 500
        h.gw.housekeeping_tick()
        assert h.agents[0].released == 0


    def test_a_turn_that_never_began_keeps_the_agent_unreleasable(self, make_harness,
                                                                  monkeypatch):
        """The agent lent to a turn whose start failed goes back as it was: still holding a
        transcript that is not fully persisted, so still never released."""
        h = make_harness(agent={"agent_cache": {"memory_high_mb": 200, "protect_recent": 0}})
        store = h.gw.store
        real_record, real_begin = store.ledger_record, store.begin_turn

        def failing_record(**kw):
            if kw.get("reply") is not None:
                raise OSError("disk went away")
            return real_record(**kw)

        def failing_begin(*args, **kw):
            raise OSError("disk went away")

        monkeypatch.setattr(store, "ledger_record", failing_record)
        send(h, "1", "x")
        h.idle()
        monkeypatch.setattr(store, "ledger_record", real_record)
        monkeypatch.setattr(store, "begin_turn", failing_begin)
        send(h, "1", "y")
        h.idle()
        monkeypatch.setattr(store, "begin_turn", real_begin)
        h.probe.anon_mb = 500
        h.gw.housekeeping_tick()
        assert len(h.agents) == 1 and h.agents[0].released == 0


class TestBoundaries:
    """/new and shutdown close agents; evictions only release them."""

    def test_new_closes_and_stop_closes(self, make_harness):
        h = make_harness()
        send(h, "1", "a")
        h.idle()  # agents are made in turn order only if the turns do not overlap
        send(h, "2", "b")
        h.idle()
        send(h, "1", "/new")
        h.idle()
        one, two = h.agents
        assert one.closed and one.released == 0
        assert not two.closed
        h.gw.stop(drain_timeout=5)
        assert two.closed and two.released == 0


class TestNewDuringTheFirstTurn:
    """The agent a session's first turn made is closed once when /new or /reset cuts that
    turn (it was never in the cache for the discard to find), and only that agent."""

    @pytest.mark.parametrize("command", ["/new", "/reset"])
    def test_first_turn_agent_is_closed_once(self, make_harness, command):
        h = make_harness(busy_input_mode="queue")
        h.send("wait g")
        assert h.gates.wait_until_waiting("g")
        h.send("one")
        h.send("two")
        h.send(command)
        h.idle()
        [first] = h.agents
        assert first.closes == 1 and first.released == 0
        h.send("after")
        h.idle()
        assert len(h.agents) == 2 and h.agents[1].closes == 0
        assert [s.message for s in h.log] == ["wait g", "after"]
        h.gw.stop(drain_timeout=5)
        assert [a.closes for a in h.agents] == [1, 1]

    def test_first_turn_that_finished_before_new(self, make_harness):
        h = make_harness()
        h.send("hello")
        h.idle()
        h.send("/new")
        h.idle()
        [first] = h.agents
        assert first.closes == 1


class _ToolAgent(ScriptedAgent):
    """``dump`` writes 2 MB of tool output through ``emit`` and answers ``ok``; its
    ``commit_memory`` waits for ``gate``."""

    def __init__(self, gate: threading.Event, committing: threading.Event) -> None:
        super().__init__()
        self.gate, self.committing = gate, committing

    def run_turn(self, request):
        if request.message == "dump":
            request.emit({"role": "tool", "content": "x" * (2 << 20)})
            return TurnResult(reply="ok")
        return super().run_turn(request)

    def commit_memory(self, messages):
        self.committing.set()
        assert self.gate.wait(10)
        super().commit_memory(messages)


@pytest.fixture
def tool_gateway(tmp_path):
    """``make(**agent_cache)`` → a started gateway on :class:`_ToolAgent`s, its adapter,
    probe and the agents' gate (open at teardown)."""
    gate, committing, made = threading.Event(), threading.Event(), []

    def make(**cache):
        probe = FakeMemoryProbe(anon_mb=100.0)
        adapter = InMemoryAdapter("telegram")
        gw = Gateway(tmp_path / f"home{len(made)}",
                     config=load_config({"agent": {"agent_cache": cache}}, env={}),
                     agent_factory=lambda _ctx: _ToolAgent(gate, committing),
                     adapters=[adapter], clock=FakeClock(), memory_probe=probe)
        gw.start()
        made.append(gw)
        return gw, adapter, probe

    make.gate, make.committing = gate, committing
    yield make
    gate.set()
    for gw in made:
        gw.stop(drain_timeout=5)


class TestOffTheMailbox:
    """A pass's slow releases never hold up the turns of other sessions, and tool output
    counts towards the growth that triggers the post-turn memory check."""

    def test_tool_output_triggers_the_pressure_check(self, tool_gateway):
        tool_gateway.gate.set()
        gw, _adapter, probe = tool_gateway(memory_high_mb=200, protect_recent=0)
        send_to(gw, "idle", "hello")
        assert gw.wait_idle(10)
        probe.anon_mb = 500
        send_to(gw, "big", "dump")  # a short reply, 2 MB of tool output
        assert gw.wait_idle(10)
        assert gw.stats()["cache"]["evictions"]["memory"] >= 1  # (none without the check)

    def test_turns_go_on_while_housekeeping_waits_for_a_release(self, tool_gateway):
        gw, adapter, _probe = tool_gateway(idle_ttl_secs=100, memory_high_mb="off")
        send_to(gw, "old", "a")
        assert gw.wait_idle(10)
        gw.clock.advance(200)
        send_to(gw, "live", "b")  # recent: not idle
        assert gw.wait_idle(10)
        tick = threading.Thread(target=gw.housekeeping_tick, daemon=True)
        tick.start()
        assert tool_gateway.committing.wait(5)  # old's commit_memory runs, and waits
        send_to(gw, "live", "c")  # live's cached agent is checked out meanwhile
        assert adapter.wait_for(3, timeout=10), adapter.texts()
        assert adapter.texts()[-1] == "echo: c"
        tool_gateway.gate.set()
        tick.join(10)
        assert not tick.is_alive()


def send_to(gw, chat: str, text: str) -> None:
    gw.submit(MessageEvent(source=SessionSource("telegram", chat_id=chat), text=text))
