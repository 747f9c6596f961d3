"""Cluster nodes as real ``hermes-actors run`` processes on loopback, sharing one PostgreSQL
database: traffic to random nodes for many chats, a node killed (SIGKILL) or paused
(SIGSTOP past ``lease_ttl``) while it runs turns, then every acknowledged message reconciled
against the outbox (:func:`hermes_actors.testing.reconcile.reconcile`).

What the tests wait on is what the processes say (``event=...`` lines) and what the
database says (turn markers, lease owners), never a guessed sleep; the only pause is the
SIGSTOP itself, which must outlast ``lease_ttl`` by construction.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from hermes_actors.cluster.shards import shard_of
from hermes_actors.testing.reconcile import Accepted, reconcile

from .conftest import GatewayProcess

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

SHARDS = 6
LEASE_TTL = 2.0
HEARTBEAT = 0.4
CHATS = [str(n) for n in range(1, 19)]
#: A turn that is still running when its node is killed or paused (the scripted agent).
SLOW = "sleep 1.5"


def _env(dsn: str) -> dict[str, str]:
    return {
        "HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": dsn,
        "HERMES_CLUSTER_ENABLED": "true", "HERMES_CLUSTER_SHARDS": str(SHARDS),
        "HERMES_CLUSTER_LEASE_TTL": str(LEASE_TTL),
        "HERMES_CLUSTER_HEARTBEAT": str(HEARTBEAT),
        "HERMES_AGENT_KIND": "scripted", "HERMES_BUSY_INPUT_MODE": "queue",
    }


def _sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait until ``check()`` holds (a question to the database, asked every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def _key(chat: str) -> str:
    return f"agent:main:webhook:dm:{chat}"


class Cluster:
    """Nodes on one database, and the client's record of what they acknowledged."""

    def __init__(self, dsn: str, tmp_path, count: int = 3) -> None:
        self.dsn = dsn
        self._tmp = tmp_path
        self.nodes: list[GatewayProcess] = []
        self.ids: list[str] = []
        for _ in range(count):
            self.add()
        self.accepted: list[Accepted] = []
        self.down: set[int] = set()
        self._n = 0
        self._lock = threading.Lock()

    def add(self) -> int:
        """Start one more node; its index."""
        node = GatewayProcess(self._tmp / f"node{len(self.nodes)}", env=_env(self.dsn))
        self.nodes.append(node)
        self.ids.append((node.home / "node_id").read_text().strip())
        return len(self.nodes) - 1

    def owners(self) -> dict[int, str]:
        """shard -> owner, of the leases valid now (the database's clock)."""
        rows = _sql(self.dsn, "SELECT shard, owner FROM shard_leases WHERE owner IS NOT NULL"
                    " AND expires_at >= extract(epoch FROM now())")
        return dict(rows)

    def balanced(self) -> bool:
        owners = self.owners()
        live = {self.ids[i] for i in range(len(self.nodes)) if i not in self.down}
        counts = [list(owners.values()).count(node) for node in live]
        return len(owners) == SHARDS and min(counts) >= SHARDS // len(live)

    def chats_of(self, i: int) -> list[str]:
        """The chats whose shard node ``i`` holds now."""
        owners = self.owners()
        return [c for c in CHATS if owners.get(shard_of(_key(c), SHARDS)) == self.ids[i]]

    def post(self, chat: str, text: str) -> None:
        """Send one message to a random live node until one acknowledges it; the message id
        makes a retry after a lost answer a duplicate, never a second message."""
        with self._lock:
            self._n += 1
            message_id = f"m{self._n}"
        for _ in range(50):
            live = [n for i, n in enumerate(self.nodes) if i not in self.down]
            node = random.choice(live)
            try:
                status, _, body = node.request("POST", "/v1/messages", {
                    "chat_id": chat, "text": text, "message_id": message_id}, timeout=10)
            except OSError:
                continue  # that node is gone or paused: another one takes it
            if status in (200, 202):
                with self._lock:
                    self.accepted.append(Accepted(body["event_id"], chat, text))
                return
            assert status in (429, 503), (status, body)
        raise AssertionError(f"no node acknowledged {text!r} for chat {chat}")

    def marked(self, chats: list[str]) -> int:
        """How many of ``chats`` have a turn running (a durable marker)."""
        rows = _sql(self.dsn, "SELECT count(*) FROM routing WHERE active_turn_token IS NOT"
                    " NULL AND session_key = ANY(%s)", ([_key(c) for c in chats],))
        return rows[0][0]

    def outbox(self, chat: str) -> list[dict]:
        """The chat's outbox, read from the database in cursor order."""
        rows = _sql(self.dsn, "SELECT kind, text, in_reply_to FROM outbox WHERE chat_id = %s"
                    " ORDER BY cursor", (chat,))
        return [{"kind": k, "text": t, "in_reply_to": (r or "").split()} for k, t, r in rows]

    def settled(self) -> bool:
        """Every acknowledged message answered (or the verdict will say why not)."""
        verdict = reconcile(self.accepted, {c: self.outbox(c) for c in CHATS})
        return not verdict.lost

    def verdict(self):
        return reconcile(self.accepted, {c: self.outbox(c) for c in CHATS})

    def load(self, i: int) -> list[str]:
        """Once balanced: a message for every chat, then a slow turn for every chat of node
        ``i``'s shards (their chats, returned)."""
        _until(self.balanced, f"the shards spread over the {len(self.nodes)} nodes")
        theirs = self.chats_of(i)
        assert theirs, f"node {i} holds no chat's shard"
        _traffic(self, 1, lambda chat, n: f"hello {chat}")
        for chat in theirs:
            self.post(chat, SLOW)
        return theirs

    def judged(self):
        """Once every acknowledged message is answered: the verdict, which must be ok."""
        _until(self.settled, "every acknowledged message answered", timeout=60)
        verdict = self.verdict()
        print("verdict:", verdict.line())
        assert verdict.ok, verdict
        return verdict

    def stop(self) -> None:
        for i, node in enumerate(self.nodes):
            if i in self.down:
                node.kill()
        for node in self.nodes:
            try:
                node.stop(timeout=30)
            except Exception:  # noqa: BLE001 - kill what does not stop
                node.kill()


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


def _traffic(cluster: Cluster, rounds: int, text: Callable[[str, int], str]) -> None:
    for n in range(rounds):
        for chat in CHATS:
            cluster.post(chat, text(chat, n))


class TestNodeKilled:
    """A node killed mid-turn: its chats are answered by the others once its leases
    expired, each acknowledged message exactly once, in order per chat, the interrupted
    turns continued."""

    def test_kill_mid_turn(self, cluster):
        victim = 1
        theirs = cluster.load(victim)
        _until(lambda: cluster.marked(theirs) > 0, "a turn running on the victim")
        for chat in theirs:  # waiting behind the running turns, in the victim's queues
            cluster.post(chat, f"after {chat}")
        cluster.nodes[victim].kill()
        cluster.down.add(victim)
        _traffic(cluster, 2, lambda chat, n: f"later {chat}.{n}")
        verdict = cluster.judged()
        assert verdict.continued, verdict  # the interrupted turns were auto-continued


class TestNodePaused:
    """A node paused past ``lease_ttl`` and resumed: its late writes are refused by the
    epoch (fenced), nothing is sent twice, and its chats were answered by the others."""

    def test_sigstop_past_lease_ttl(self, cluster):
        victim = 2
        theirs = cluster.load(victim)
        _until(lambda: cluster.marked(theirs) > 0, "a turn running on the victim")
        paused = cluster.nodes[victim]
        paused.signal(signal.SIGSTOP)
        cluster.down.add(victim)
        try:
            # Its leases expire on the database's clock; the others take the shards.
            _until(lambda: cluster.ids[victim] not in cluster.owners().values(),
                   "the paused node's leases taken over", timeout=30)
            _traffic(cluster, 1, lambda chat, n: f"meanwhile {chat}")
            _until(cluster.settled, "every acknowledged message answered", timeout=60)
        finally:
            # Paused past lease_ttl, so past its sleeping turns too: they end on resuming.
            paused.signal(signal.SIGCONT)
        seen = {paused.stderr.expect(r"event=cluster_write_fenced|event=cluster_shards_lost",
                                     timeout=30).split("event=")[1].split()[0]
                for _ in range(2)}
        assert seen == {"cluster_write_fenced", "cluster_shards_lost"}, seen
        cluster.down.discard(victim)
        _traffic(cluster, 1, lambda chat, n: f"after {chat}")
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
        _traffic(cluster, 1, lambda chat, n: f"meanwhile {chat}")
        assert node.proc.wait(timeout=60) == 0
        log = node.stderr.text()
        assert "event=cluster_handover " in log and "event=cluster_leave " in log
        assert "reason=released" in log
        assert cluster.ids[leaving] not in cluster.owners().values()
        _traffic(cluster, 1, lambda chat, n: f"after {chat}")
        cluster.judged()


class TestNodeJoins:
    """A node that joins under load takes its share from the others by handover; nothing
    accepted is lost, answered twice or out of order meanwhile."""

    def test_join_under_load(self, pair):
        _until(pair.balanced, "the shards spread over the two nodes")
        _traffic(pair, 1, lambda chat, n: f"hello {chat}")
        for chat in CHATS[::3]:
            pair.post(chat, SLOW)
        joined = pair.add()
        _traffic(pair, 1, lambda chat, n: f"meanwhile {chat}")
        _until(pair.balanced, "the newcomer took its share")
        _traffic(pair, 1, lambda chat, n: f"after {chat}")
        pair.judged()
        log = "\n".join(n.stderr.text() for n in pair.nodes[:joined])
        assert "event=cluster_handover " in log
