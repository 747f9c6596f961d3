"""Lease managers of three nodes in one process on one database of the test server: shares
converge as nodes join; a node that stops without releasing loses its shards to the others
once its leases expire, under higher epochs; a node that stops cleanly hands its shards
over at once. Rounds are driven by hand (``tick``), or by the managers' own loops with the
tests waiting on their callbacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from hermes_actors.cluster.events import ShardListener
from hermes_actors.cluster.membership import LeaseManager

from .test_pg_leases import expire

pytestmark = pytest.mark.postgres

SHARDS = 12


class Watcher(ShardListener):
    """Counts gains and losses of every node, and wakes whoever waits on a condition."""

    def __init__(self, changed: threading.Condition) -> None:
        self.changed = changed
        self.gains: list[tuple[int, int]] = []
        self.losses: list[tuple[int, int, str]] = []

    def gained(self, shard: int, epoch: int) -> None:
        with self.changed:
            self.gains.append((shard, epoch))
            self.changed.notify_all()

    def lost(self, shard: int, epoch: int, reason: str) -> None:
        with self.changed:
            self.losses.append((shard, epoch, reason))
            self.changed.notify_all()


@pytest.fixture
def nodes(pg_leases):
    """``nodes(name, **kwargs)`` joins a manager with its own connection; every one still
    running is halted after the test."""
    made: list[LeaseManager] = []
    changed = threading.Condition()

    def make(name: str, ttl: float = 10.0, heartbeat: float = 2.0) -> LeaseManager:
        m = LeaseManager(pg_leases(), name, shards=SHARDS, lease_ttl=ttl, heartbeat=heartbeat,
                         listener=Watcher(changed))
        made.append(m)
        return m

    make.changed = changed  # type: ignore[attr-defined]
    yield make
    for m in made:
        m.halt()


def wait_until(changed: threading.Condition, done: Callable[[], bool],
               timeout: float = 15.0) -> None:
    with changed:
        assert changed.wait_for(done, timeout), "the cluster did not get there in time"


def shares(*managers: LeaseManager) -> list[int]:
    return [len(m.owned()) for m in managers]


def rounds(*managers: LeaseManager, count: int = 2) -> None:
    for _ in range(count):
        for m in managers:
            assert m.tick().error is None


class TestDrivenRounds:
    def test_shares_converge_as_nodes_join(self, nodes):
        a = nodes("a")
        a.join()
        rounds(a)
        assert shares(a) == [12]
        b = nodes("b")
        b.join()
        rounds(a, b)
        assert shares(a, b) == [6, 6]
        c = nodes("c")
        c.join()
        rounds(a, b, c)
        assert shares(a, b, c) == [4, 4, 4]
        owned = [set(m.owned()) for m in (a, b, c)]
        assert set.union(*owned) == set(range(SHARDS)) and sum(map(len, owned)) == SHARDS
        snap = a.store.snapshot()
        assert {r.shard: (r.owner, r.epoch) for r in snap.leases} == {
            s: (m.node_id, e) for m in (a, b, c) for s, e in m.owned().items()}

    def test_a_node_stopped_without_release_loses_its_shards_after_expiry(
            self, nodes, postgres_dsn):
        a, b, c = nodes("a"), nodes("b"), nodes("c")
        for m in (a, b, c):
            m.join()
        rounds(a, b, c)
        before = b.owned()
        b.stop(release=False)
        rounds(a, c)
        assert shares(a, c) == [4, 4]  # b's leases have not expired: nobody takes them
        expire(postgres_dsn, "b")
        rounds(a, c)
        assert shares(a, c) == [6, 6]
        after = {**a.owned(), **c.owned()}
        assert all(after[s] == epoch + 1 for s, epoch in before.items())


class TestRunningLoops:
    def test_three_loops_converge_then_share_the_shards_of_a_dead_and_a_leaving_node(
            self, nodes):
        a, b, c = (nodes(name, ttl=1.0, heartbeat=0.1) for name in "abc")
        changed = nodes.changed  # type: ignore[attr-defined]
        for m in (a, b, c):
            m.start()
        wait_until(changed, lambda: shares(a, b, c) == [4, 4, 4])
        before = b.owned()
        started = time.monotonic()
        b.stop(release=False)  # as if killed: its leases run out after lease_ttl
        wait_until(changed, lambda: shares(a, c) == [6, 6])
        assert time.monotonic() - started >= 0.5  # not before b's leases expired
        after = {**a.owned(), **c.owned()}
        assert all(after[s] > epoch for s, epoch in before.items())
        assert c.stop(timeout=10) is True  # a clean stop hands over at once
        wait_until(changed, lambda: shares(a) == [12])
        assert {reason for _, _, reason in c.listener.losses} == {"released"}  # type: ignore[attr-defined]
