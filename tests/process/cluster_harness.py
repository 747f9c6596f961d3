"""The harness of the cluster's process tests and of ``scripts/cluster_soak.py``: real
``hermes-actors run`` nodes on one PostgreSQL database, a client that posts to random live
nodes and records what they acknowledged, and the reconciliation of that record against
the outbox by event id (:func:`hermes_actors.testing.reconcile.reconcile`). For the
platforms' cluster tests: nodes started with a ``config.yaml`` (:func:`configured_nodes`),
and the database's word on them (:func:`node_id`, :func:`shard_owners`,
:func:`adapter_lease`).

What it waits on is what the database says (turn markers, lease owners, the outbox), asked
every 50 ms until a deadline; nothing sleeps for a guessed time.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psycopg

from hermes_actors.cluster.shards import shard_of
from hermes_actors.testing.reconcile import (
    Accepted,
    Evidence,
    Verdict,
    reconcile,
    suspension_evidence,
)
from hermes_actors.testing.wait import wait_until

from .conftest import GatewayProcess

__all__ = ["CHATS", "HEARTBEAT", "LEASE_TTL", "SHARDS", "SLOW", "Cluster", "adapter_lease",
           "configured_nodes", "node_id", "shard_owners", "sql", "stop_all", "traffic",
           "until"]

SHARDS = 6
LEASE_TTL = 2.0
HEARTBEAT = 0.4
CHATS = [str(n) for n in range(1, 19)]
#: A turn that is still running when its node is killed or paused (the scripted agent).
SLOW = "sleep 1.5"


def _env(dsn: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**(extra or {}),
        "HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": dsn,
        "HERMES_CLUSTER_ENABLED": "true", "HERMES_CLUSTER_SHARDS": str(SHARDS),
        "HERMES_CLUSTER_LEASE_TTL": str(LEASE_TTL),
        "HERMES_CLUSTER_HEARTBEAT": str(HEARTBEAT),
        "HERMES_AGENT_KIND": "scripted", "HERMES_BUSY_INPUT_MODE": "queue",
    }


def sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    """The rows of one statement, on a connection of its own (autocommit)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait until ``check()`` holds (a question to the database, asked every 50 ms)."""
    wait_until(check, timeout, 0.05, what)


def node_id(node: GatewayProcess) -> str:
    """The node's id (written to its home at its first start)."""
    return (node.home / "node_id").read_text().strip()


def shard_owners(dsn: str) -> dict[int, str]:
    """shard -> owner, of the leases valid now (the database's clock)."""
    return dict(sql(dsn, "SELECT shard, owner FROM shard_leases WHERE owner IS NOT NULL"
                         " AND expires_at >= extract(epoch FROM now())"))


def adapter_lease(dsn: str, name: str) -> tuple[str | None, int] | None:
    """The adapter lease ``name``: (its owner while valid, else None; its epoch), or None
    before any node took it."""
    rows = sql(dsn, "SELECT CASE WHEN expires_at >= extract(epoch FROM now()) THEN owner"
                    " END, epoch FROM adapter_leases WHERE name = %s", (name,))
    return (rows[0][0], int(rows[0][1])) if rows else None


def configured_nodes(tmp_path: Path, dsn: str, config: dict, env: dict[str, str],
                     count: int = 2) -> list[GatewayProcess]:
    """``count`` ready nodes (homes ``node0``, ``node1``, ...) with the scripted agent and
    ``env``, each with a ``config.yaml`` of ``config`` and the cluster's settings on the
    database ``dsn``; stop them with :func:`stop_all` (done here if one fails to start)."""
    nodes: list[GatewayProcess] = []
    try:
        for n in range(count):
            home = tmp_path / f"node{n}"
            home.mkdir()
            (home / "config.yaml").write_text(json.dumps({
                **config,
                "store": {"backend": "postgres", "dsn": dsn},
                "cluster": {"enabled": True, "shards": SHARDS, "lease_ttl": LEASE_TTL,
                            "heartbeat": HEARTBEAT},
            }), encoding="utf-8")
            nodes.append(GatewayProcess(home, "--agent", "scripted", env=env))
    except BaseException:
        stop_all(nodes)
        raise
    return nodes


def stop_all(nodes: Iterable[GatewayProcess]) -> None:
    """Stop every node (up to 30 s each), killing one that does not stop."""
    for node in nodes:
        try:
            node.stop(timeout=30)
        except Exception:  # noqa: BLE001 - kill what does not stop
            node.kill()


def _key(chat: str) -> str:
    return f"agent:main:webhook:dm:{chat}"


class Cluster:
    """Nodes on one database, and the client's record of what they acknowledged."""

    def __init__(self, dsn: str, tmp_path, count: int = 3,
                 env: dict[str, str] | None = None) -> None:
        self.dsn = dsn
        self._tmp = tmp_path
        #: More settings of every node (``HERMES_*``).
        self.env = dict(env or {})
        self.nodes: list[GatewayProcess] = []
        self.ids: list[str] = []
        #: The logs of node processes killed and started again (``restart``).
        self.retired_logs: list[str] = []
        for _ in range(count):
            self.add()
        self.accepted: list[Accepted] = []
        #: Answers 503 (the database away) the client got, and retried.
        self.refused = 0
        self.down: set[int] = set()
        self._n = 0
        self._lock = threading.Lock()

    def add(self) -> int:
        """Start one more node; its index."""
        node = GatewayProcess(self._tmp / f"node{len(self.nodes)}", env=_env(self.dsn, self.env))
        self.nodes.append(node)
        self.ids.append(node_id(node))
        return len(self.nodes) - 1

    def restart(self, i: int) -> None:
        """Start node ``i`` again on its home (after a kill), serving traffic again."""
        self.nodes[i].kill()
        self.retired_logs.append(self.nodes[i].stderr.text())
        self.nodes[i] = GatewayProcess(self.nodes[i].home, env=_env(self.dsn, self.env))
        self.down.discard(i)

    def log_lines(self, needle: str) -> list[str]:
        """Every line of every node process so far (restarted ones too) holding
        ``needle``."""
        texts = [*self.retired_logs, *(n.stderr.text() for n in self.nodes)]
        return [line for text in texts for line in text.splitlines() if needle in line]

    def owners(self) -> dict[int, str]:
        """shard -> owner, of the leases valid now (the database's clock)."""
        return shard_owners(self.dsn)

    def held_by_others(self, i: int) -> bool:
        """Every shard held (a valid lease), none by node ``i``."""
        owners = self.owners()
        return len(owners) == SHARDS and self.ids[i] not in owners.values()

    def balanced(self) -> bool:
        owners = self.owners()
        live = {self.ids[i] for i in range(len(self.nodes)) if i not in self.down}
        counts = [list(owners.values()).count(node) for node in live]
        return len(owners) == SHARDS and min(counts) >= SHARDS // len(live)

    def chats_of(self, i: int) -> list[str]:
        """The chats whose shard node ``i`` holds now."""
        owners = self.owners()
        return [c for c in CHATS if owners.get(shard_of(_key(c), SHARDS)) == self.ids[i]]

    def post(self, chat: str, text: str, patience: float | None = None) -> None:
        """Send one message to a random live node until one acknowledges it; the message id
        makes a retry after a lost answer a duplicate, never a second message. With
        ``patience``, refusals (503 while the database is away, 429) and lost answers are
        retried every 50 ms for that many seconds, as a client waiting out an outage
        would; ``refused`` counts the 503s."""
        with self._lock:
            self._n += 1
            message_id = f"m{self._n}"
        deadline = None if patience is None else time.monotonic() + patience
        tries = 0
        while deadline is not None and time.monotonic() < deadline or tries < 50:
            tries += 1
            live = [n for i, n in enumerate(self.nodes) if i not in self.down]
            node = random.choice(live)
            try:
                status, _, body = node.request("POST", "/v1/messages", {
                    "chat_id": chat, "text": text, "message_id": message_id}, timeout=10)
            except OSError:
                status, body = None, None  # that node is gone or paused: another one
            if status in (200, 202):
                with self._lock:
                    self.accepted.append(Accepted(body["event_id"], chat, text))
                return
            assert status in (None, 429, 503), (status, body)
            if status == 503:
                with self._lock:
                    self.refused += 1
            if deadline is not None:
                time.sleep(0.05)
        raise AssertionError(f"no node acknowledged {text!r} for chat {chat}")

    def marked(self, chats: list[str]) -> int:
        """How many of ``chats`` have a turn running (a durable marker)."""
        rows = sql(self.dsn, "SELECT count(*) FROM routing WHERE active_turn_token IS NOT"
                    " NULL AND session_key = ANY(%s)", ([_key(c) for c in chats],))
        return rows[0][0]

    def outbox(self, chat: str) -> list[dict]:
        """The chat's outbox, read from the database in cursor order (every column, so a
        ``final`` flag is there when the table has one; ``in_reply_to`` as a list)."""
        rows = self._rows("SELECT * FROM outbox WHERE chat_id = %s ORDER BY cursor", (chat,))
        return [{**row, "in_reply_to": (row.get("in_reply_to") or "").split()}
                for row in rows]

    def settled(self) -> bool:
        """Every acknowledged message named by a final message, or its session suspended by
        the stuck-loop guard while it was the interrupted turn (or the verdict will say why
        not)."""
        return not self.verdict().lost

    def verdict(self) -> Verdict:
        """The reconciliation of every acknowledged message by event id (lost, duplicated,
        unnamed), with the database's evidence on those no final message names
        (:func:`~hermes_actors.testing.reconcile.reconcile`)."""
        outbox = {c: self.outbox(c) for c in CHATS}
        verdict = reconcile(self.accepted, outbox)
        if not verdict.lost:
            return verdict
        return reconcile(self.accepted, outbox, self.evidence(verdict.lost))

    def evidence(self, event_ids: list[str]) -> Evidence:
        """What the database says of these (unanswered) messages and their sessions'
        suspensions."""
        inbox = self._rows("SELECT event_id, session_key, consumed_at, consumed_reason"
                           " FROM inbox WHERE event_id = ANY(%s)", (event_ids,))
        keys = sorted({str(row["session_key"]) for row in inbox})
        sessions = self._rows("SELECT id, session_key, started_at, ended_at, end_reason"
                              " FROM sessions WHERE end_reason = 'suspended'"
                              " AND session_key = ANY(%s)", (keys,))
        routing = self._rows("SELECT session_key, entry, suspended FROM routing"
                             " WHERE suspended AND session_key = ANY(%s)", (keys,))
        ids = [row["id"] for row in sessions]
        ids += [json.loads(row["entry"]).get("session_id") for row in routing]
        messages = self._rows("SELECT session_id, role, content, is_reply FROM messages"
                              " WHERE session_id = ANY(%s) ORDER BY id", (ids,))
        return suspension_evidence(inbox=inbox, sessions=sessions, routing=routing,
                                   messages=messages)

    def _rows(self, statement: str, params: tuple = ()) -> list[dict]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            names = [column.name for column in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def load(self, i: int) -> list[str]:
        """Once balanced: a message for every chat, then a slow turn for every chat of node
        ``i``'s shards (their chats, returned)."""
        until(self.balanced, f"the shards spread over the {len(self.nodes)} nodes")
        theirs = self.chats_of(i)
        assert theirs, f"node {i} holds no chat's shard"
        traffic(self, 1, lambda chat, n: f"hello {chat}")
        for chat in theirs:
            self.post(chat, SLOW)
        return theirs

    def wait_settled(self, timeout: float = 60) -> None:
        """Until a final message names every acknowledged message; else fail saying which
        are not, with the leases and the nodes' last log lines."""
        try:
            until(self.settled, "every acknowledged message answered (by id)",
                  timeout=timeout)
        except AssertionError:
            verdict = self.verdict()
            lost = [(m.chat, m.text, m.event_id) for m in self.accepted
                    if m.event_id in set(verdict.lost)]
            logs = {i: n.stderr.text().splitlines()[-15:] for i, n in enumerate(self.nodes)}
            raise AssertionError(f"unanswered: {lost}; leases: {self.owners()}; nodes: "
                                 f"{self.ids}; logs: {logs}") from None

    def judged(self) -> Verdict:
        """Once every acknowledged message is answered: the verdict, which must be ok
        (0 lost, 0 duplicated, 0 unnamed, in order per chat)."""
        self.wait_settled()
        verdict = self.verdict()
        print("verdict:", verdict.line())
        assert verdict.ok, (verdict, self._explain(verdict))
        return verdict

    def _explain(self, verdict: Verdict) -> dict[str, object]:
        """The messages and outbox rows of the chats a verdict complains about."""
        wrong = set(verdict.lost) | set(verdict.duplicated) | set(verdict.misrouted)
        chats = {m.chat for m in self.accepted if m.event_id in wrong}
        chats |= set(verdict.out_of_order) | {answer.chat for answer in verdict.repeated}
        chats |= {str(row.get("chat_id")) for row in verdict.unnamed if row.get("chat_id")}
        out: dict[str, object] = {
            chat: {"shard": shard_of(_key(chat), SHARDS),
                   "sent": [(m.event_id, m.text) for m in self.accepted if m.chat == chat],
                   "outbox": self.outbox(chat)} for chat in sorted(chats)}
        out["nodes"] = self.ids
        out["logs"] = {i: [line for line in n.stderr.text().splitlines()
                           if "event=cluster" in line or "turn" in line]
                       for i, n in enumerate(self.nodes)}
        return out

    def stop(self) -> None:
        for i, node in enumerate(self.nodes):
            if i in self.down:
                node.kill()
        stop_all(self.nodes)


def traffic(cluster: Cluster, rounds: int, text: Callable[[str, int], str]) -> None:
    for n in range(rounds):
        for chat in CHATS:
            cluster.post(chat, text(chat, n))
