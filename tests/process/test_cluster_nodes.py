"""Cluster nodes as real ``hermes-actors run`` processes on loopback, sharing one PostgreSQL
database: traffic to random nodes for many chats, a node killed (SIGKILL), paused (SIGSTOP
past ``lease_ttl``), stopped (SIGTERM) while it runs turns, or joining under load, then
every acknowledged message reconciled against the outbox (``cluster_harness``).

What the tests wait on is what the processes say (``event=...`` lines) and what the
database says (turn markers, lease owners), never a guessed sleep; the only pause is the
SIGSTOP itself, which must outlast ``lease_ttl`` by construction.
"""

from __future__ import annotations

import signal
import threading

import pytest

from hermes_actors.testing.postgres import start_embedded_server

from .cluster_harness import CHATS, SLOW, Cluster, traffic, until

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def cluster(postgres_dsn, tmp_path):
    made = Cluster(postgres_dsn, tmp_path)
    yield made
    made.stop()


@pytest.fixture
def pair(postgres_dsn, tmp_path):
    made = Cluster(postgres_dsn, tmp_path, count=2)
    yield made
    made.stop()


class TestNodeKilled:
    """A node killed mid-turn: its chats are answered by the others once its leases
    expired, each acknowledged message exactly once, in order per chat, the interrupted
    turns continued."""

    def test_kill_mid_turn(self, cluster):
        victim = 1
        theirs = cluster.load(victim)
        until(lambda: cluster.marked(theirs) > 0, "a turn running on the victim")
        for chat in theirs:  # waiting behind the running turns, in the victim's queues
            cluster.post(chat, f"after {chat}")
        cluster.nodes[victim].kill()
        cluster.down.add(victim)
        traffic(cluster, 2, lambda chat, n: f"later {chat}.{n}")
        verdict = cluster.judged()
        assert verdict.continued, verdict  # the interrupted turns were auto-continued


class TestNodePaused:
    """A node paused past ``lease_ttl`` and resumed: its late writes are refused by the
    epoch (fenced), nothing is sent twice, and its chats were answered by the others."""

    def test_sigstop_past_lease_ttl(self, cluster):
        victim = 2
        theirs = cluster.load(victim)
        until(lambda: cluster.marked(theirs) > 0, "a turn running on the victim")
        paused = cluster.nodes[victim]
        paused.signal(signal.SIGSTOP)
        cluster.down.add(victim)
        try:
            # Its leases expire on the database's clock; the others take the shards.
            until(lambda: cluster.held_by_others(victim),
                  "the paused node's shards taken by the others", timeout=30)
            traffic(cluster, 1, lambda chat, n: f"meanwhile {chat}")
            cluster.wait_settled()
        finally:
            # Paused past lease_ttl, so past its sleeping turns too: they end on resuming.
            paused.signal(signal.SIGCONT)
        wanted = {"cluster_write_fenced", "cluster_shards_lost"}
        seen: set[str] = set()
        while seen != wanted:  # both, in whichever order, among the lines it logs
            line = paused.stderr.expect("event=(" + "|".join(wanted) + ")", timeout=30)
            seen.add(line.split("event=")[1].split()[0])
        cluster.down.discard(victim)
        traffic(cluster, 1, lambda chat, n: f"after {chat}")
        assert cluster.judged().continued


class TestNodeStopped:
    """A node stopped with SIGTERM under load hands its shards over (drained, released at
    once, not left to expire) and leaves; nothing accepted is lost or answered twice."""

    def test_sigterm_hands_over(self, cluster):
        leaving = 0
        cluster.load(leaving)
        cluster.down.add(leaving)
        node = cluster.nodes[leaving]
        node.signal(signal.SIGTERM)
        traffic(cluster, 1, lambda chat, n: f"meanwhile {chat}")
        assert node.proc.wait(timeout=60) == 0
        log = node.stderr.text()
        assert "event=cluster_handover " in log and "event=cluster_leave " in log
        assert "reason=released" in log
        assert cluster.ids[leaving] not in cluster.owners().values()
        traffic(cluster, 1, lambda chat, n: f"after {chat}")
        cluster.judged()


class TestNodeJoins:
    """A node that joins under load takes its share from the others by handover; nothing
    accepted is lost, answered twice or out of order meanwhile."""

    def test_join_under_load(self, pair):
        until(pair.balanced, "the shards spread over the two nodes")
        traffic(pair, 1, lambda chat, n: f"hello {chat}")
        for chat in CHATS[::3]:
            pair.post(chat, SLOW)
        joined = pair.add()
        traffic(pair, 1, lambda chat, n: f"meanwhile {chat}")
        until(pair.balanced, "the newcomer took its share")
        traffic(pair, 1, lambda chat, n: f"after {chat}")
        pair.judged()
        log = "\n".join(n.stderr.text() for n in pair.nodes[:joined])
        assert "event=cluster_handover " in log


@pytest.fixture
def own_server():
    """A server this test may stop (never the shared one)."""
    server = start_embedded_server()
    yield server
    server.stop()


class TestDatabaseRestarted:
    """The database server stopped under load and started again: every node goes into its
    outage (refusing messages with 503), is replaced by ``run`` once the server is back,
    rejoins and serves its shards again; nothing acknowledged is lost, answered twice or
    out of order."""

    def test_restart_under_load(self, own_server, tmp_path):
        with own_server.database() as dsn:
            cluster = Cluster(dsn, tmp_path)
            halt, failures = threading.Event(), []

            def send() -> None:  # round the chats, waiting out the outage like a client
                n = 0
                try:
                    while not halt.is_set():
                        chat = CHATS[n % len(CHATS)]
                        cluster.post(chat, SLOW if n % 10 == 3 else f"m{n} for {chat}",
                                     patience=120)
                        n += 1
                        halt.wait(0.05)
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    failures.append(exc)

            sender = threading.Thread(target=send, daemon=True)
            try:
                until(cluster.balanced, "the shards spread over the nodes", timeout=60)
                sender.start()
                until(lambda: len(cluster.accepted) >= 40, "messages before the stop", 60)
                own_server.pause()
                for node in cluster.nodes:
                    node.stderr.expect(r"event=store_outage", timeout=60)
                until(lambda: cluster.refused > 0, "a message refused (503)", timeout=60)
                for node in cluster.nodes:  # down past lease_ttl: the leases expire too
                    node.stderr.expect(r"event=store_waiting attempt=2", timeout=60)
                own_server.resume()
                for node in cluster.nodes:
                    node.stderr.expect(r"event=store_back", timeout=120)
                until(cluster.balanced, "every shard held again", timeout=60)
                before = len(cluster.accepted)
                until(lambda: len(cluster.accepted) >= before + 40, "served again", 60)
            finally:
                halt.set()
                sender.join(timeout=150)
            try:
                assert not failures, failures
                verdict = cluster.judged()
                assert not verdict.suspended, verdict
            finally:
                cluster.stop()
