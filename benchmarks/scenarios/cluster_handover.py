"""``cluster-handover``: a cluster node holding N sessions (K of them mid-turn) is killed;
the time until another node serves every one of its chats again, against ``lease_ttl`` +
the time a single gateway takes to recover the same sessions after a kill -9.

**The data.** N stored webhook DM sessions (:func:`benchmarks.fixtures.fixture_rows`,
written with ``COPY``: :func:`benchmarks.rawpg.build_fixture`) whose keys all fall in the
shards ``0 .. S/2 - 1`` of the cluster's ``S`` shards. A node started first takes every
shard; a second node then takes its fair half, and the balance rule gives it the *upper*
half (a node keeps its lowest-numbered shards: ``cluster/balance.py``), so node A holds
every one of the N sessions while node B is live beside it, serving shards with no
sessions. K of the sessions are then made mid-turn for real: ``POST /v1/messages`` of
``sleep 600`` (the scripted agent) to A, until the database shows K turn markers.

**The kill.** SIGKILL of A. Right after it, one *probe* message per chat (all N) is
written into the shared inbox with ``COPY`` (the rows ``AcceptEvent`` writes: what any
node would have accepted for those chats while their owner was dead; written the same way
in the baseline, so ingress is not part of either figure).

**Served again** (both sides, the same test, asked of the outbox table every 50 ms): every
one of the N probes answered (its ``echo: probe <chat>`` in the outbox) and every one of
the K interrupted turns continued (the scripted agent's ``resumed: sleep 600``, the note
riding on the waiting probe or alone). Parts of the cluster's figure, by the database and
B's log: *lease wait* (kill → B holds every lease), *shard recovery* (→ B's
``event=cluster_shards_serving`` for A's shards: markers judged, ledger swept, inbox read,
auto-continue dispatched), *dispatch* (→ every chat answered).

**Baseline, same run, a database of its own, the same fixture and the same steps**: a
single gateway (``cluster.enabled: false``) on the sessions, K turns made mid-turn the same
way, SIGKILL, the same probes written, then the gateway started again on its home: spawn
→ ``event=ready`` (process start, whole-store recovery) → every chat answered. The target
compares the cluster's kill → served with ``lease_ttl`` + that time: a dead node costs its
lease and a recovery, and the cluster should add little to either (≤ 1.5).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import pgserver
from benchmarks.fixtures import dm_key
from benchmarks.nodes import HttpClient, NodeProcess, node_env, sql, until
from benchmarks.rawpg import build_fixture
from benchmarks.report import Target, figure
from benchmarks.util import Progress, Workers, scratch_dir

__all__ = ["run"]

#: ``(sessions, mid-turn sessions, lease_ttl, heartbeat)``.
FULL = (10_000, 1_000, 10.0, 2.0)
QUICK = (300, 30, 2.0, 0.4)
SHARDS = 64
PLATFORM = "webhook"
#: The mid-turn turns: far longer than any run.
SLOW = "sleep 600"
#: Concurrent HTTP clients posting the slow turns.
CLIENTS = 8


def half_chats(sessions: int, shards: int = SHARDS) -> list[int]:
    """The first ``sessions`` chat numbers whose session key is in the lower half of the
    shards (those the first node keeps when a second joins)."""
    from hermes_actors.cluster.shards import shard_of

    picked = (n for n in itertools.count()
              if shard_of(dm_key(n, PLATFORM), shards) < shards // 2)
    return list(itertools.islice(picked, sessions))


def _post_slow(port: int, chats: list[int]) -> None:
    """``sleep 600`` to each chat, from ``CLIENTS`` keep-alive connections."""
    todo = list(chats)
    lock = threading.Lock()

    def client(_index: int) -> None:
        conn = HttpClient(port)
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    n = todo.pop()
                conn.post(str(n), SLOW)
        finally:
            conn.close()

    Workers(client, CLIENTS).join()


def _marked(dsn: str) -> int:
    return int(sql(dsn, "SELECT count(*) FROM routing WHERE active_turn_token IS NOT NULL")
               [0][0])


def _make_midturn(dsn: str, port: int, chats: list[int], progress: Progress) -> None:
    progress.update(f"{len(chats):,} turns started (sleep 600)", force=True)
    _post_slow(port, chats)
    until(lambda: _marked(dsn) >= len(chats), f"{len(chats)} turn markers", timeout=120)


def _write_probes(dsn: str, chats: list[int]) -> None:
    """One probe message per chat, written into the inbox as ``AcceptEvent`` writes it."""
    import psycopg

    from hermes_actors import MessageEvent, SessionSource

    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            cur = conn.cursor()
            columns = "event_id, session_key, payload, internal, received_at"
            with cur.copy(f"COPY inbox ({columns}) FROM STDIN") as copy:
                for n in chats:
                    event = MessageEvent(source=SessionSource(PLATFORM, chat_id=str(n)),
                                         text=f"probe {n}")
                    copy.write_row((event.event_id, dm_key(n, PLATFORM),
                                    json.dumps(event.to_dict()), False, time.time()))


def _answered(dsn: str) -> tuple[int, int]:
    """(probes answered, interrupted turns continued), from the outbox."""
    row = sql(dsn, "SELECT count(*) FILTER (WHERE text LIKE '%%echo: probe %%'),"
              " count(*) FILTER (WHERE text LIKE %s) FROM outbox", (f"resumed: {SLOW}%",))[0]
    return int(row[0]), int(row[1])


def _wait_served(dsn: str, sessions: int, midturn: int, progress: Progress,
                 label: str) -> float:
    def served() -> bool:
        probes, resumed = _answered(dsn)
        progress.update(f"{label}: {probes:,}/{sessions:,} probes, {resumed:,}/{midturn:,}"
                        " continued")
        return probes >= sessions and resumed >= midturn

    return until(served, "every chat answered", timeout=600, every=0.05)


def _held(dsn: str, node_id: str) -> int:
    return int(sql(dsn, "SELECT count(*) FROM shard_leases WHERE owner = %s"
                   " AND expires_at >= extract(epoch FROM now())", (node_id,))[0][0])


def _fixture(dsn: str, chats: list[int]) -> None:
    build_fixture(dsn, len(chats), markers=0, replied=0, now=time.time(), numbers=chats,
                  platform=PLATFORM)


def _single(base: Path, chats: list[int], midturn: int, progress: Progress,
            pids: list[int]) -> dict[str, float]:
    """The baseline: a single gateway killed and started again on the same sessions."""
    with pgserver.database() as dsn:
        progress.update(f"single gateway: fixture of {len(chats):,} sessions", force=True)
        _fixture(dsn, chats)
        env = node_env(dsn, cluster=False, agent="scripted")
        home = base / "single"
        first = NodeProcess(home, env)
        pids.append(first.pid)
        try:
            _make_midturn(dsn, first.port, chats[:midturn], progress)
        finally:
            first.kill()
        _write_probes(dsn, chats)
        progress.update("single gateway: restarted", force=True)
        again = NodeProcess(home, env)
        pids.append(again.pid)
        try:
            served = _wait_served(dsn, len(chats), midturn, progress, "single gateway")
        finally:
            again.kill()
        return {"ready": again.ready_at - again.started, "dispatch": served - again.ready_at,
                "total": served - again.started}


def _cluster(base: Path, chats: list[int], midturn: int, lease_ttl: float, heartbeat: float,
             progress: Progress, pids: list[int]) -> dict[str, float]:
    """Node A holding every session, node B live; A killed; until B serves them all."""
    with pgserver.database() as dsn:
        progress.update(f"cluster: fixture of {len(chats):,} sessions", force=True)
        _fixture(dsn, chats)
        env = node_env(dsn, cluster=True, agent="scripted", shards=SHARDS,
                       lease_ttl=lease_ttl, heartbeat=heartbeat)
        nodes: list[NodeProcess] = []
        try:
            a = NodeProcess(base / "a", env)
            nodes.append(a)
            pids.append(a.pid)
            until(lambda: _held(dsn, a.node_id) == SHARDS, "node A holds every shard",
                  timeout=60)
            a.wait_line(r"event=cluster_shards_serving", timeout=120)
            b = NodeProcess(base / "b", env)
            nodes.append(b)
            pids.append(b.pid)
            half = SHARDS // 2
            until(lambda: _held(dsn, b.node_id) == half and _held(dsn, a.node_id) == half,
                  "the shards split between A and B", timeout=120)
            b.wait_line(r"event=cluster_shards_serving", timeout=60)
            _make_midturn(dsn, a.port, chats[:midturn], progress)
            progress.update("cluster: node A killed", force=True)
            killed = time.perf_counter()
            a.kill()
            _write_probes(dsn, chats)
            acquired = until(lambda: _held(dsn, b.node_id) == SHARDS,
                             "node B holds every shard", timeout=lease_ttl * 4 + 60)
            serving, _ = b.wait_line(r"event=cluster_shards_serving shards=0-",
                                     after=killed, timeout=600)
            served = _wait_served(dsn, len(chats), midturn, progress, "cluster")
        finally:
            for node in nodes:
                node.kill()
        return {"lease_wait": acquired - killed, "recovery": max(serving - acquired, 0.0),
                "dispatch": served - max(serving, acquired), "total": served - killed}


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """The baseline (a single gateway restarted), then the cluster's handover."""
    sessions, midturn, lease_ttl, heartbeat = QUICK if quick else FULL
    chats = half_chats(sessions)
    pids: list[int] = []
    with scratch_dir(workdir, "cluster-handover") as base:
        single = _single(base, chats, midturn, progress, pids)
        cluster = _cluster(base, chats, midturn, lease_ttl, heartbeat, progress, pids)
    label = f"{sessions:,} sessions, {midturn:,} mid-turn"
    baseline = lease_ttl + single["total"]
    figures = [
        figure("handover", f"node killed → every chat served again, {label}",
               cluster["total"], "s", baseline=baseline,
               baseline_label=f"lease_ttl {lease_ttl:g} s + single-node recovery",
               target=Target("<=", 1.5, on="ratio")),
        figure("lease_wait", "  lease wait: kill → survivor holds every lease",
               cluster["lease_wait"], "s", baseline=lease_ttl, baseline_label="lease_ttl"),
        figure("recovery", "  shard recovery: leases → serving", cluster["recovery"], "s",
               baseline=single["ready"], baseline_label="single: spawn → ready"),
        figure("dispatch", "  dispatch: serving → every chat answered", cluster["dispatch"],
               "s", baseline=single["dispatch"], baseline_label="single: ready → answered"),
        figure("single", "single gateway restarted: spawn → every chat answered",
               single["total"], "s"),
    ]
    return {"figures": figures,
            "details": {"sessions": sessions, "midturn": midturn, "shards": SHARDS,
                        "lease_ttl": lease_ttl, "heartbeat": heartbeat,
                        "single": single, "cluster": cluster, "pids": pids}}
