"""The balance rule (hypothesis): plans never take a held shard, rounds converge on fair
shares from any table, a balanced cluster stays put, and a join or a leave moves only the
shards it must.

Rounds are simulated with the pure :func:`plan` applied to the in-memory lease table (the
same rules as the PostgreSQL one), nodes acting one after another in a random order, the
store's clock moving ``HEARTBEAT`` seconds per round.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_actors.cluster.balance import assignment, fair_shares, live_nodes, plan
from hermes_actors.cluster.records import LeaseRow, NodeAnnouncement, NodeRow
from hermes_actors.testing import FakeClock
from hermes_actors.testing.leases import MemoryLeases

TTL = 10.0
HEARTBEAT = 2.0
NOW = 1_000.0


class Sim:
    """Nodes on one in-memory table, each remembering what it holds."""

    def __init__(self, shards: int, seed: int = 0) -> None:
        self.clock = FakeClock(NOW)
        self.store = MemoryLeases(self.clock)
        self.store.ensure_cluster(shards, "sim")
        self.shards = shards
        self.held: dict[str, dict[int, int]] = {}
        self.leaving: set[str] = set()
        self.random = random.Random(seed)

    def add(self, node: str) -> None:
        self.held.setdefault(node, {})
        self.store.heartbeat(NodeAnnouncement(node, "boot", TTL))

    def remove(self, node: str) -> None:
        """The node dies: it stops heartbeating and renewing."""
        self.held.pop(node)

    def act(self, node: str) -> int:
        """One round of ``node``; returns how many leases it took or freed."""
        leaving = node in self.leaving
        self.store.heartbeat(NodeAnnouncement(node, "boot", TTL, leaving=leaving))
        snap = self.store.snapshot()
        held = self.held[node]
        decided = plan(node, self.shards, held, snap.nodes, snap.leases, snap.now,
                       leaving=leaving)
        for shard in decided.lost:
            del held[shard]
        renewed = self.store.renew(node, decided.renew, TTL)
        assert set(renewed) == set(decided.renew)  # a plan renews only what is still ours
        self.store.release(node, {**decided.release, **decided.disown})
        for shard in decided.release:
            del held[shard]
        taken = self.store.acquire(node, decided.acquire, TTL)
        for lease in taken:
            held[lease.shard] = lease.epoch
        return len(taken) + len(decided.release) + len(decided.disown) + len(decided.lost)

    def round(self) -> int:
        nodes = sorted(self.held)
        self.random.shuffle(nodes)
        changes = sum(self.act(node) for node in nodes)
        self.clock.advance(HEARTBEAT)
        return changes

    def settle(self, rounds: int = 12) -> None:
        """Rounds until nothing changes (two quiet rounds in a row), at most ``rounds``."""
        quiet = 0
        for _ in range(rounds):
            quiet = quiet + 1 if self.round() == 0 else 0
            if quiet == 2:
                return
        raise AssertionError("the cluster did not settle")

    def owners(self) -> dict[int, str | None]:
        return self.store.owners()

    def counts(self) -> dict[str, int]:
        owners = self.owners()
        return {node: sum(1 for o in owners.values() if o == node) for node in self.held}


def assert_fair(sim: Sim) -> None:
    owners = sim.owners()
    live = sorted(n for n in sim.held if n not in sim.leaving)
    assert all(owner in live for owner in owners.values()), owners
    base = sim.shards // len(live)
    for node, count in sim.counts().items():
        if node in live:
            assert base <= count <= base + 1, (node, count, sim.counts())
    for node, held in sim.held.items():  # what each node remembers is what the table says
        assert {s for s, o in owners.items() if o == node} == set(held)
        assert all(sim.store.leases[s].epoch == e for s, e in held.items())


def node_names(count: int) -> list[str]:
    return [f"node-{i}" for i in range(count)]


shard_counts = st.integers(1, 96)
node_counts = st.integers(1, 5)


class TestFairShares:
    @given(shard_counts, st.lists(st.text("abcdef", min_size=1, max_size=4), min_size=1,
                                  max_size=8, unique=True), st.data())
    def test_shares_are_floor_or_ceil_and_add_up(self, shards, live, data):
        held = {n: data.draw(st.integers(0, shards)) for n in live}
        shares = fair_shares(shards, live, held)
        assert sum(shares.values()) == shards
        assert set(shares.values()) <= {shards // len(live), shards // len(live) + 1}

    def test_the_extra_shards_go_to_who_holds_most(self):
        assert fair_shares(10, ["a", "b", "c"], {"c": 4, "b": 4, "a": 2}) == {
            "a": 3, "b": 4, "c": 3}

    def test_no_live_node_no_shares(self):
        assert fair_shares(8, [], {}) == {}


class TestAssignment:
    @given(shard_counts, node_counts, st.data())
    def test_targets_are_fair_and_spare_dead_nodes_leases(self, shards, nodes, data):
        live = node_names(nodes)
        owners = st.sampled_from([None, "dead", *live])
        rows = [LeaseRow(s, data.draw(owners), 1,
                         data.draw(st.sampled_from([NOW - 1, NOW + 5])))
                for s in range(shards)]
        rows = [LeaseRow(r.shard, r.owner, r.epoch, r.expires_at if r.owner else None)
                for r in rows]
        target = assignment(shards, live, rows, NOW)
        limbo = {r.shard for r in rows if r.holder_at(NOW) == "dead"}
        assert {s for s, node in target.items() if node == "dead"} == limbo
        per = {n: sum(1 for node in target.values() if node == n) for n in live}
        assert sum(per.values()) == shards - len(limbo)
        assert max(per.values()) <= -(-shards // nodes)
        for row in rows:  # a live holder keeps its lease unless above its share
            if row.holder_at(NOW) in live and target[row.shard] != row.owner:
                assert per[row.owner] == fair_shares(
                    shards, live, {n: sum(1 for r in rows if r.holder_at(NOW) == n)
                                   for n in live})[row.owner]

    def test_live_nodes_exclude_the_silent_and_the_leaving(self):
        nodes = [NodeRow("a", "b", 0, NOW - 5, TTL), NodeRow("b", "b", 0, NOW - 11, TTL),
                 NodeRow("c", "b", 0, NOW, TTL, leaving=True), NodeRow("d", "b", 0, NOW, 1)]
        assert live_nodes(nodes, NOW) == ("a", "d")


class TestPlan:
    @given(shard_counts, node_counts, st.data())
    def test_a_plan_never_takes_what_another_holds(self, shards, nodes, data):
        names = node_names(nodes)
        me = names[0]
        rows = []
        for s in range(shards):
            owner = data.draw(st.sampled_from([None, "dead", *names]))
            expires = data.draw(st.sampled_from([NOW - 1, NOW, NOW + 5])) if owner else None
            rows.append(LeaseRow(s, owner, data.draw(st.integers(0, 3)), expires))
        mine = {r.shard: r.epoch for r in rows if r.holder_at(NOW) == me}
        held = {s: e + data.draw(st.sampled_from([0, 0, 1])) for s, e in mine.items()
                if data.draw(st.booleans())}
        node_rows = [NodeRow(n, "b", 0, NOW, TTL) for n in names]
        decided = plan(me, shards, held, node_rows, rows, NOW,
                       leaving=data.draw(st.booleans()))
        others = {r.shard for r in rows if r.holder_at(NOW) not in (None, me)}
        assert not decided.acquire & others
        assert not decided.acquire & set(decided.renew)
        assert set(decided.renew) | set(decided.release) | decided.lost == set(held)
        assert not set(decided.renew) & set(decided.release)
        assert not decided.lost & (set(decided.renew) | set(decided.release))
        assert all(mine.get(s) == e for s, e in {**decided.renew, **decided.release}.items())
        assert set(decided.disown) <= set(mine) - set(held)


ROUNDS = settings(max_examples=40, deadline=None)


class TestRounds:
    @ROUNDS
    @given(shard_counts, node_counts, st.integers(0, 3), st.randoms(use_true_random=False),
           st.data())
    def test_any_table_converges_on_fair_shares(self, shards, nodes, dead, rnd, data):
        sim = Sim(shards, rnd.randrange(1 << 30))
        names = node_names(nodes)
        for name in names:
            sim.add(name)
        owners = [None, *names, *(f"dead-{i}" for i in range(dead))]
        for s in range(shards):  # an arbitrary table: some leases expired, some not
            owner = rnd.choice(owners)
            expires = NOW + rnd.choice([-5.0, 3.0, 9.0]) if owner else None
            sim.store.leases[s] = LeaseRow(s, owner, rnd.randrange(5), expires)
            if owner in names and expires and expires >= NOW and rnd.random() < 0.7:
                sim.held[owner][s] = sim.store.leases[s].epoch  # others forgot (a restart)
        for _ in range(int(TTL / HEARTBEAT) + 1):  # the dead nodes' leases run out
            sim.round()
        sim.settle()
        assert_fair(sim)

    @ROUNDS
    @given(shard_counts, node_counts, st.integers(0, 1 << 30))
    def test_a_balanced_cluster_is_a_fixed_point(self, shards, nodes, seed):
        sim = Sim(shards, seed)
        for name in node_names(nodes):
            sim.add(name)
        sim.settle()
        before = sim.owners()
        snap = sim.store.snapshot()
        for node, held in sim.held.items():
            decided = plan(node, shards, held, snap.nodes, snap.leases, snap.now)
            assert dict(decided.renew) == held
            assert not (decided.acquire or decided.release or decided.disown or decided.lost)
        assert sim.round() == 0 and sim.owners() == before

    @ROUNDS
    @given(shard_counts, node_counts, st.integers(0, 1 << 30))
    def test_a_join_moves_only_the_newcomers_share(self, shards, nodes, seed):
        sim = Sim(shards, seed)
        for name in node_names(nodes):
            sim.add(name)
        sim.settle()
        before = sim.owners()
        sim.add("newcomer")
        sim.settle()
        assert_fair(sim)
        after = sim.owners()
        moved = {s for s in before if before[s] != after[s]}
        assert {after[s] for s in moved} <= {"newcomer"}
        assert len(moved) == sim.counts()["newcomer"]

    @ROUNDS
    @given(shard_counts, st.integers(2, 5), st.booleans(), st.integers(0, 1 << 30))
    def test_a_leave_moves_only_the_leavers_shards(self, shards, nodes, graceful, seed):
        sim = Sim(shards, seed)
        names = node_names(nodes)
        for name in names:
            sim.add(name)
        sim.settle()
        before = sim.owners()
        leaver = names[seed % nodes]
        if graceful:
            sim.leaving.add(leaver)
            sim.act(leaver)
            assert sim.held[leaver] == {}
        sim.remove(leaver)
        for _ in range(int(TTL / HEARTBEAT) + 1):  # its heartbeat and leases run out
            sim.round()
        sim.leaving.discard(leaver)
        sim.settle()
        assert_fair(sim)
        after = sim.owners()
        moved = {s for s in before if before[s] != after[s]}
        assert moved == {s for s, owner in before.items() if owner == leaver}
