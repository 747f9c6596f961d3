"""``LeaseManager`` on the in-memory lease table and a fake clock: joining, rounds, handovers,
local deadlines, fencing, stopping; and a model-based run (hypothesis) of nodes starting,
ticking, crashing and leaving in any order with time jumping, where no shard ever has two
owners that both believe it theirs."""

from __future__ import annotations

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hermes_actors.cluster.events import ShardListener
from hermes_actors.cluster.membership import LeaseManager
from hermes_actors.cluster.records import LeaseRow
from hermes_actors.config import load_config
from hermes_actors.errors import ConfigError
from hermes_actors.testing import FakeClock
from hermes_actors.testing.leases import MemoryLeases

TTL = 10.0
HEARTBEAT = 2.0
BOT = "telegram:1"


class Recorder(ShardListener):
    """Every event, in order; handovers answered at once unless ``hold`` is set."""

    def __init__(self, hold: bool = False) -> None:
        self.events: list[tuple] = []
        self.hold = hold
        self.pending: dict[int, object] = {}

    def gained(self, shard, epoch):
        self.events.append(("gained", shard, epoch))

    def lost(self, shard, epoch, reason):
        self.events.append(("lost", shard, epoch, reason))

    def handover(self, shard, epoch, done):
        self.events.append(("handover", shard, epoch))
        if self.hold:
            self.pending[shard] = done
        else:
            done()

    def of(self, kind: str) -> list[tuple]:
        return [e for e in self.events if e[0] == kind]


def manager(store, clock, node="a", shards=8, listener=None, **kwargs) -> LeaseManager:
    m = LeaseManager(store, node, shards=shards, lease_ttl=TTL, heartbeat=HEARTBEAT,
                     listener=listener or Recorder(), monotonic=clock.monotonic, **kwargs)
    m.join()
    return m


class TestJoining:
    def test_the_first_node_creates_the_cluster_and_takes_every_shard(self, memory, clock):
        rec = Recorder()
        a = manager(memory, clock, listener=rec)
        assert memory.shards == 8 and set(memory.nodes) == {"a"}
        tick = a.tick()
        assert tick.gained == tuple(range(8)) and tick.error is None
        assert a.owned() == dict.fromkeys(range(8), 1)
        assert rec.of("gained") == [("gained", s, 1) for s in range(8)]

    def test_a_node_with_another_shard_count_refuses(self, memory, clock):
        manager(memory, clock, shards=8)
        with pytest.raises(ConfigError, match=r"'cluster.shards'.*configured with 16 shards"
                           r".*created with 8.*set cluster.shards: 8"):
            manager(memory, clock, node="b", shards=16)

    def test_from_config(self, memory, clock):
        config = load_config({"store": {"backend": "postgres", "dsn": "postgresql://h/db"},
                              "cluster": {"enabled": True, "shards": 4, "lease_ttl": 3,
                                          "heartbeat": 1}}, env={})
        m = LeaseManager.from_config(memory, "a", config.cluster, monotonic=clock.monotonic)
        assert (m.shards, m.lease_ttl, m.heartbeat) == (4, 3.0, 1.0)

    def test_rounds_need_a_join(self, memory, clock):
        m = LeaseManager(memory, "a", shards=4, lease_ttl=TTL, heartbeat=HEARTBEAT)
        with pytest.raises(RuntimeError, match="join"):
            m.tick()


class TestBalancing:
    def test_a_node_that_sees_another_takes_only_its_share(self, memory, clock):
        a, b = manager(memory, clock), manager(memory, clock, "b")
        assert a.tick().gained == (0, 1, 2, 3)
        assert b.tick().gained == (4, 5, 6, 7)

    def test_a_joining_node_gets_half_by_handover(self, memory, clock):
        ra, rb = Recorder(), Recorder()
        a = manager(memory, clock, listener=ra)
        a.tick()
        b = manager(memory, clock, "b", listener=rb)
        assert b.tick().gained == ()  # everything is held
        tick = a.tick()
        assert tick.released == (4, 5, 6, 7) and [e[1] for e in ra.of("handover")] == [4, 5, 6, 7]
        assert ("lost", 4, 1, "released") in ra.events
        assert b.tick().gained == (4, 5, 6, 7)
        assert b.owned() == dict.fromkeys((4, 5, 6, 7), 2)  # a new tenure: a new epoch
        assert a.owned() == dict.fromkeys(range(4), 1)
        assert a.tick().released == () and b.tick().gained == ()

    def test_a_handover_waits_for_done_and_renews_meanwhile(self, memory, clock):
        ra = Recorder(hold=True)
        a = manager(memory, clock, listener=ra)
        a.tick()
        b = manager(memory, clock, "b")
        b.tick()
        a.tick()
        assert sorted(ra.pending) == [4, 5, 6, 7] and a.owns(4)
        for _ in range(8):  # longer than lease_ttl: the shards being handed over stay ours
            clock.advance(HEARTBEAT)
            a.tick()
            b.tick()
        assert a.owns(4) and not b.owns(4)
        for done in ra.pending.values():
            done()  # type: ignore[operator]
        assert a.tick().released == (4, 5, 6, 7)
        assert b.tick().gained == (4, 5, 6, 7)

    def test_a_handover_timeout_releases_anyway(self, memory, clock):
        a = manager(memory, clock, listener=Recorder(hold=True), handover_timeout=3.0)
        a.tick()
        b = manager(memory, clock, "b")
        b.tick()
        a.tick()
        clock.advance(HEARTBEAT)
        assert a.tick().released == ()
        clock.advance(HEARTBEAT)
        assert a.tick().released == (4, 5, 6, 7)

    def test_a_leaving_node_is_not_counted(self, memory, clock):
        a, b = manager(memory, clock), manager(memory, clock, "b")
        a.tick()
        b.tick()
        a.tick()
        b.tick()
        assert a.stop() is True
        assert "a" not in memory.nodes and memory.owners()[0] is None
        assert b.tick().gained == (0, 1, 2, 3)


class TestDeadlines:
    def test_past_its_local_deadline_a_shard_is_not_ours_even_before_the_round(
            self, memory, clock):
        rec = Recorder()
        a = manager(memory, clock, listener=rec)
        a.tick()
        clock.advance(TTL)
        assert a.owned() == {} and not a.owns(0)
        tick = a.tick()  # lost, then taken back under a new epoch (nobody else wanted it)
        assert tick.lost == tuple(range(8)) and tick.gained == tuple(range(8))
        assert ("lost", 0, 1, "expired") in rec.events and a.owned()[0] == 2

    def test_an_unreachable_store_keeps_shards_until_their_deadline(self, memory, clock):
        rec = Recorder()
        a = manager(memory, clock, listener=rec)
        a.tick()
        memory.fail = True
        clock.advance(HEARTBEAT)
        tick = a.tick()
        assert tick.error and "cannot reach" in tick.error and len(a.owned()) == 8
        clock.advance(TTL - HEARTBEAT)
        assert a.tick().lost == tuple(range(8)) and a.owned() == {}
        memory.fail = False
        assert a.tick().gained == tuple(range(8))

    def test_a_renewal_refused_drops_the_shard_at_once(self, memory, clock):
        rec = Recorder()
        a = manager(memory, clock, listener=rec)
        a.tick()
        memory.leases[3] = LeaseRow(3, "intruder", 7, clock.time() + TTL)
        memory.leases[5] = LeaseRow(5, "a", 9, clock.time() + TTL)  # our id, not our epoch
        tick = a.tick()
        assert {3, 5} <= set(tick.lost) and 3 not in a.owned()
        assert ("lost", 3, 1, "fenced") in rec.events and ("lost", 5, 1, "fenced") in rec.events

    def test_the_host_drops_a_fenced_shard(self, memory, clock):
        rec = Recorder()
        a = manager(memory, clock, listener=rec)
        a.tick()
        assert a.drop(2, 1) is True and not a.owns(2)
        assert a.drop(2, 1) is False and a.drop(3, 99) is False
        assert rec.events[-1] == ("lost", 2, 1, "fenced")


class TestStopping:
    def test_a_halted_node_keeps_its_leases_until_they_expire(self, memory, clock):
        ra = Recorder()
        a = manager(memory, clock, listener=ra)
        a.tick()
        b = manager(memory, clock, "b")
        a.stop(release=False)
        assert ra.of("lost") == [("lost", s, 1, "halted") for s in range(8)]
        assert b.tick().gained == ()
        clock.advance(TTL + 0.5)
        assert b.tick().gained == tuple(range(8))
        assert b.owned() == dict.fromkeys(range(8), 2)
        assert a.tick().gained == ()  # a halted manager does nothing more

    def test_a_restarted_node_takes_its_own_leases_back_at_once(self, memory, clock):
        manager(memory, clock).tick()
        again = manager(memory, clock)  # the same node id, a new boot
        assert again.tick().gained == tuple(range(8)) and again.owned()[0] == 2

    def test_stop_runs_the_rounds_itself_when_no_loop_runs(self, memory, clock):
        rec = Recorder()
        a = manager(memory, clock, listener=rec)
        a.tick()
        assert a.stop(timeout=5) is True
        assert len(rec.of("lost")) == 8 and memory.nodes == {}

    def test_a_handover_that_never_ends_times_the_stop_out(self, memory, clock):
        a = manager(memory, clock, listener=Recorder(hold=True))
        a.tick()
        assert a.stop(timeout=0.05) is False
        assert a.owned() == {} and "a" in memory.nodes  # halted: the leases will expire


class TestRunning:
    def test_start_and_stop_the_loop(self, memory, clock):
        full = threading.Event()

        class Listener(Recorder):
            def gained(self, shard, epoch):
                super().gained(shard, epoch)
                if len(self.of("gained")) == 8:
                    full.set()

        rec = Listener()
        a = LeaseManager(memory, "a", shards=8, lease_ttl=5.0, heartbeat=0.01, listener=rec,
                         monotonic=clock.monotonic)
        a.start()
        assert full.wait(10)
        with pytest.raises(RuntimeError, match="already running"):
            a.start()
        assert a.stop(timeout=10) is True
        assert len(rec.of("lost")) == 8 and memory.nodes == {}

    def test_a_failing_listener_does_not_end_the_round(self, memory, clock):
        class Broken(ShardListener):
            def gained(self, shard, epoch):
                raise RuntimeError("host bug")

        a = manager(memory, clock, listener=Broken())
        assert a.tick().gained == tuple(range(8)) and len(a.owned()) == 8


NODES = ("n0", "n1", "n2", "n3")


class ClusterModel(RuleBasedStateMachine):
    """Nodes come, tick, crash and leave; time jumps. At every step each shard believed
    owned by a running node is that node's valid lease in the table, under its epoch (so
    never two believers), and every shard's acquisitions have strictly growing epochs. The
    same for the lease of a pull adapter that all nodes but the last have configured: at
    most one node believes it holds it, and after settling one does."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = MemoryLeases(self.clock)
        self.managers: dict[str, LeaseManager] = {}
        self.shards = 12

    def _start(self, node: str) -> None:
        m = LeaseManager(self.store, node, shards=self.shards, lease_ttl=TTL,
                         heartbeat=HEARTBEAT, monotonic=self.clock.monotonic,
                         adapters=[BOT] if node != NODES[-1] else [])
        m.join()
        self.managers[node] = m

    @rule(node=st.sampled_from(NODES))
    def start(self, node):
        if node not in self.managers and not self.store.fail:
            self._start(node)

    @rule(node=st.sampled_from(NODES))
    def tick(self, node):
        if node in self.managers:
            self.managers[node].tick()

    @rule(seconds=st.sampled_from([0.5, HEARTBEAT, 4.0, TTL - 1, TTL + 1]))
    def advance(self, seconds):
        self.clock.advance(seconds)

    @rule(node=st.sampled_from(NODES))
    def crash(self, node):
        m = self.managers.pop(node, None)
        if m is not None:
            m.halt()

    @rule(node=st.sampled_from(NODES))
    def leave(self, node):
        m = self.managers.pop(node, None)
        if m is not None:
            m.stop(timeout=0.01)

    @rule(down=st.booleans())
    def outage(self, down):
        self.store.fail = down

    @precondition(lambda self: self.managers)
    @rule()
    def settle(self):
        self.store.fail = False
        for _ in range(int(TTL / HEARTBEAT) + 6):
            for m in self.managers.values():
                m.tick()
            self.clock.advance(HEARTBEAT)
        for m in self.managers.values():
            m.tick()
        counts = [len(m.owned()) for m in self.managers.values()]
        base = self.shards // len(self.managers)
        assert sum(counts) == self.shards and set(counts) <= {base, base + 1}, counts
        pollers = [n for n, m in self.managers.items() if m.adapters_held()]
        configured = [n for n in self.managers if n != NODES[-1]]
        assert len(pollers) == (1 if configured else 0), pollers

    @invariant()
    def one_believer_per_shard(self):
        now = self.clock.time()
        for node, m in self.managers.items():
            for shard, epoch in m.owned().items():
                row = self.store.leases[shard]
                assert row.holder_at(now) == node and row.epoch == epoch, (node, shard, row)

    @invariant()
    def one_poller_per_adapter(self):
        now = self.clock.time()
        believers = [(node, m.adapters_held()[BOT]) for node, m in self.managers.items()
                     if BOT in m.adapters_held()]
        assert len(believers) <= 1, believers
        for node, epoch in believers:
            row = self.store.adapters[BOT]
            assert row.holder_at(now) == node and row.epoch == epoch, (node, row)

    @invariant()
    def epochs_grow(self):
        last: dict[int, int] = {}
        for shard, _owner, epoch in self.store.acquisitions:
            assert epoch > last.get(shard, 0)
            last[shard] = epoch


TestClusterModel = ClusterModel.TestCase
TestClusterModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_shard_ranges_for_log_lines():
    from hermes_actors.cluster.events import shard_ranges

    assert shard_ranges([7, 0, 1, 2, 3, 9, 10]) == "0-3,7,9-10"
    assert shard_ranges({5: 1}) == "5" and shard_ranges([]) == ""
