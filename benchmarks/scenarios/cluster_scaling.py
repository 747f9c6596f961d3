"""``cluster-scaling``: total CPU per turn (every node process plus every PostgreSQL server
process) with two cluster nodes against a one-node cluster of the same configuration, at
one paced rate both sustain; and the most either configuration answers, side by side.

**Setup**, once per configuration, each on a fresh database: N stored webhook DM sessions
(the ``COPY`` fixture, so every measured turn is a repeat turn of a known session), then
``hermes-actors run`` node processes with ``cluster.enabled: true`` (64 shards,
``lease_ttl`` 10 s, ``heartbeat`` 2 s: the defaults) and the echo agent. "1 node" is a
one-node cluster with that configuration (it holds all 64 leases, renews them, listens
for its shards' inbox notices), not a gateway without a cluster, so the ratio is what a
second node costs. The run waits until the nodes split the shards and serve them.

**Paced**: messages to random chats at ``RATE`` a second for ``WINDOW`` seconds, each
``POST /v1/messages`` to a random node (so with two nodes half of them are accepted by a
node that does not own the session and reach the owner by ``NOTIFY``), from a pool of
keep-alive connections; then until the outbox holds a reply for every one. CPU time is
read (psutil: user + system) of every node process and of the server's processes
(:class:`benchmarks.pgserver.ServerCPU`: the postmaster, its live and its reaped
children) from the first POST to the last reply, and divided by the replies. The load
driver is this process; its CPU is not counted (it shares the two cores all the same).

**Max**: ``CLIENTS`` closed loops for ``MAX_WINDOW`` seconds, each on chats of its own:
POST to a random node, then a long poll of ``GET /v1/outbox`` on the chat's *owner* (its
outbox wakes its readers on its own appends; another node's reader would wait out its poll)
until the reply naming the message's event id is there. Turns answered per second, and the
CPU per turn at that load.
"""

from __future__ import annotations

import contextlib
import queue
import random
import time
import urllib.parse
from pathlib import Path
from typing import Any

from benchmarks import pgserver
from benchmarks.fixtures import dm_key
from benchmarks.nodes import HttpClient, NodeProcess, node_env, process_cpu, sql, until
from benchmarks.rawpg import build_fixture
from benchmarks.report import Target, figure
from benchmarks.util import Progress, Workers, scratch_dir

__all__ = ["run"]

#: ``(sessions, paced rate msg/s, paced window s, max-load window s)``.
FULL = (2_000, 100.0, 15.0, 10.0)
QUICK = (200, 20.0, 2.0, 2.0)
#: Windows of each kind per configuration, alternating (full mode; quick: 2).
ROUNDS = 3
SHARDS = 64
PLATFORM = "webhook"
#: Connections of the paced sender, closed loops of the max load.
SENDERS = 16
CLIENTS = 32


#: Messages answered: the event ids replies name (a "Queued for the next turn." notice
#: names its message too, and is not its answer).
_ANSWERED = ("SELECT count(*) FROM outbox, unnest(string_to_array(in_reply_to, ' ')) AS id"
             " WHERE kind = 'reply' AND id <> ''")


class _Config:
    """``count`` nodes on a fresh database of their own, split and serving; with
    ``cluster=False`` one single gateway (no cluster) instead."""

    def __init__(self, base: Path, dsn: str, count: int, sessions: int, *,
                 cluster: bool = True) -> None:
        self.dsn = dsn
        env = node_env(dsn, cluster=cluster, agent="echo", shards=SHARDS)
        self.nodes: list[NodeProcess] = []
        if not cluster:
            self.nodes.append(NodeProcess(base / "single", env))
            self.server = pgserver.ServerCPU(dsn)
            self.owner = dict.fromkeys(range(sessions), self.nodes[0].port)
            return
        for i in range(count):
            self.nodes.append(NodeProcess(base / f"node{i}", env))
            node = self.nodes[-1]
            node.wait_line(r"event=cluster_shards_serving", timeout=120)
        share = SHARDS // count
        until(lambda: all(self._held(n.node_id) == share for n in self.nodes),
              f"the shards split over {count} node(s)", timeout=120)
        for node in self.nodes:  # serving what it holds now (after any handover)
            until(lambda node=node: self._serving(node) == share, "serving its share",
                  timeout=120)
        self.server = pgserver.ServerCPU(dsn)
        owners = dict(sql(dsn, "SELECT shard, owner FROM shard_leases"))
        port = {n.node_id: n.port for n in self.nodes}
        from hermes_actors.cluster.shards import shard_of

        #: chat -> the port of the node serving its session
        self.owner = {n: port[owners[shard_of(dm_key(n, PLATFORM), SHARDS)]]
                      for n in range(sessions)}

    def _held(self, node_id: str) -> int:
        return int(sql(self.dsn, "SELECT count(*) FROM shard_leases WHERE owner = %s AND"
                       " expires_at >= extract(epoch FROM now())", (node_id,))[0][0])

    @staticmethod
    def _serving(node: NodeProcess) -> int:
        return _metric(node.port, "hermes_cluster_shards_owned")

    def cpu(self) -> tuple[float, float]:
        """(CPU seconds of every node process, of the server) so far."""
        return sum(process_cpu(n.pid) for n in self.nodes), self.server.seconds()

    def replies(self) -> int:
        """Messages answered so far: the event ids the outbox rows name (a reply may
        answer several messages of a chat that queued while its turn ran)."""
        return int(sql(self.dsn, _ANSWERED)[0][0])

    def duplicated(self) -> list[dict[str, Any]]:
        """The messages answered more than once (must be none), with their outbox rows."""
        ids = sql(self.dsn, "SELECT id FROM outbox, unnest(string_to_array(in_reply_to, ' '))"
                  " AS id WHERE kind = 'reply' AND id <> '' GROUP BY id HAVING count(*) > 1")
        return [{"event_id": eid, "outbox": [list(r) for r in sql(
                    self.dsn, "SELECT cursor, chat_id, kind, text, in_reply_to, created_at"
                    " FROM outbox WHERE in_reply_to LIKE %s ORDER BY cursor", (f"%{eid}%",))]}
                for (eid,) in ids]

    def close(self) -> None:
        for node in self.nodes:
            node.stop(timeout=60)


def _metric(port: int, name: str) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return int(float(line.rsplit(" ", 1)[1]))
    return -1


def _measure(config: _Config, load: Any, progress: Progress, label: str
             ) -> dict[str, float]:
    """Run ``load()`` (it returns how many turns it sent and when it stopped sending),
    then wait until each is answered; CPU per turn and rates."""
    before = config.replies()
    nodes0, server0 = config.cpu()
    wal0 = _wal(config.dsn)
    started = time.perf_counter()
    sent, sending_s = load()
    answered = until(lambda: _progress(config, before, sent, progress, label),
                     "every message answered", timeout=600, every=0.1)
    nodes1, server1 = config.cpu()
    wal1 = _wal(config.dsn)
    turns = config.replies() - before
    return {"turns": turns, "seconds": answered - started, "sent_per_s": sent / sending_s,
            "answered_per_s": turns / (answered - started),
            "cpu_nodes_us": (nodes1 - nodes0) / turns * 1e6,
            "cpu_server_us": (server1 - server0) / turns * 1e6,
            **{f"{k}_per_turn": (wal1[k] - wal0[k]) / turns for k in wal0}}


def _wal(dsn: str) -> dict[str, float]:
    """The server's WAL flushes (``pg_stat_io``), WAL records and committed transactions
    so far (whole server; its statistics lag up to a second behind)."""
    row = sql(dsn, "SELECT (SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io"
              " WHERE object = 'wal'), (SELECT wal_records FROM pg_stat_wal),"
              " (SELECT sum(xact_commit) FROM pg_stat_database)")[0]
    return {"wal_flushes": float(row[0]), "wal_records": float(row[1]),
            "commits": float(row[2])}


def _progress(config: _Config, before: int, sent: int, progress: Progress,
              label: str) -> bool:
    done = config.replies() - before
    progress.update(f"{label}: {done:,}/{sent:,} answered")
    return done >= sent


def _paced(config: _Config, sessions: int, rate: float, window: float) -> Any:
    def load() -> tuple[int, float]:
        ports = [n.port for n in config.nodes]
        todo: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()

        def sender(_index: int) -> None:
            conns = {p: HttpClient(p) for p in ports}
            try:
                while (item := todo.get()) is not None:
                    chat, port = item
                    conns[port].post(str(chat), f"paced {chat}")
            finally:
                for c in conns.values():
                    c.close()

        workers = Workers(sender, SENDERS)
        total = int(rate * window)
        rnd = random.Random(1)
        started = time.perf_counter()
        for i in range(total):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            todo.put((rnd.randrange(sessions), rnd.choice(ports)))
        for _ in range(SENDERS):
            todo.put(None)
        workers.join()
        return total, time.perf_counter() - started

    return load


def _warm_up(config: _Config, sessions: int) -> Any:
    """One message to each chat, through its owner, as fast as it takes them."""
    def load() -> tuple[int, float]:
        started = time.perf_counter()
        todo = list(range(sessions))

        def sender(_index: int) -> None:
            conns: dict[int, HttpClient] = {}
            try:
                while todo:
                    chat = todo.pop()
                    port = config.owner[chat]
                    conn = conns.setdefault(port, HttpClient(port))
                    conn.post(str(chat), f"warm-up {chat}")
            finally:
                for c in conns.values():
                    c.close()

        Workers(sender, SENDERS).join()
        return sessions, time.perf_counter() - started

    return load


def _closed(config: _Config, sessions: int, window: float) -> Any:
    def load() -> tuple[int, float]:
        ports = [n.port for n in config.nodes]
        stop_at = time.perf_counter() + window
        counts = [0] * CLIENTS

        def client(k: int) -> None:
            conns = {p: HttpClient(p) for p in ports}
            rnd = random.Random(k)
            mine = list(range(k, sessions, CLIENTS))
            cursors: dict[int, int] = {}
            try:
                while time.perf_counter() < stop_at:
                    chat = rnd.choice(mine)
                    event = conns[rnd.choice(ports)].post(str(chat), f"max {chat}")
                    owner, after = conns[config.owner[chat]], cursors.get(chat, 0)
                    while True:
                        query = urllib.parse.urlencode({"chat_id": str(chat), "after": after,
                                                        "wait": 30})
                        status, page = owner.request("GET", f"/v1/outbox?{query}")
                        if status != 200:
                            raise RuntimeError(f"GET /v1/outbox answered {status}: {page}")
                        after = page["cursor"]
                        if any(event in m["in_reply_to"] for m in page["messages"]):
                            break
                    cursors[chat] = after
                    counts[k] += 1
            finally:
                for c in conns.values():
                    c.close()

        started = time.perf_counter()
        Workers(client, CLIENTS).join()
        return sum(counts), time.perf_counter() - started

    return load


def _setup(stack: contextlib.ExitStack, base: Path, count: int, sessions: int,
           progress: Progress, *, cluster: bool = True) -> _Config:
    """A fresh database with the fixture, ``count`` nodes on it (``cluster=False``: a
    single gateway), every session warm."""
    what = f"{count} node(s)" if cluster else "single gateway"
    dsn = stack.enter_context(pgserver.database())
    progress.update(f"{what}: fixture of {sessions:,} sessions", force=True)
    build_fixture(dsn, sessions, markers=0, replied=0, now=time.time(),
                  numbers=list(range(sessions)), platform=PLATFORM)
    config = _Config(base / (f"n{count}" if cluster else "single"), dsn, count, sessions,
                     cluster=cluster)
    stack.callback(config.close)
    # every session's actor started and its agent cached: measured turns are turns of
    # live sessions, not their first turn in the process
    _measure(config, _warm_up(config, sessions), progress, f"{what}, warm-up")
    return config


def _sum(parts: list[dict[str, float]]) -> dict[str, float]:
    """Rounds of one configuration as one measurement (CPU and time summed)."""
    turns = sum(p["turns"] for p in parts)
    seconds = sum(p["seconds"] for p in parts)
    keys = [k for k in parts[0] if k.startswith("cpu_") or k.endswith("_per_turn")]
    return {"turns": turns, "seconds": seconds, "answered_per_s": turns / seconds,
            **{k: sum(p[k] * p["turns"] for p in parts) / turns for k in keys}}


def _total(m: dict[str, float]) -> float:
    return m["cpu_nodes_us"] + m["cpu_server_us"]


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Both configurations up at once (each on its database), measured in alternation:
    ``ROUNDS`` paced windows each, then ``ROUNDS`` max windows each, one configuration
    at a time (the other idles: 0.5-1 % of a core, measured), so that a slow spell of the
    shared machine hits both alike. Figures for the report."""
    sessions, rate, window, max_window = QUICK if quick else FULL
    rounds = 2 if quick else ROUNDS
    runs: dict[int, dict[str, list[dict[str, float]]]] = {1: {"paced": [], "max": []},
                                                         2: {"paced": [], "max": []}}
    duplicated: list[dict[str, Any]] = []
    pids: list[int] = []
    with scratch_dir(workdir, "cluster-scaling") as base, contextlib.ExitStack() as stack:
        configs = {count: _setup(stack, base, count, sessions, progress) for count in (1, 2)}
        for config in configs.values():
            pids += [n.pid for n in config.nodes]
        for kind in ("paced", "max"):
            for r in range(rounds):
                for count, config in configs.items():
                    load = (_paced(config, sessions, rate, window) if kind == "paced"
                            else _closed(config, sessions, max_window))
                    runs[count][kind].append(_measure(
                        config, load, progress, f"{count} node(s), {kind} {r + 1}/{rounds}"))
        for config in configs.values():
            duplicated += config.duplicated()
    one = {k: _sum(v) for k, v in runs[1].items()}
    two = {k: _sum(v) for k, v in runs[2].items()}
    round_ratios = [_total(b) / _total(a) for a, b in zip(runs[1]["paced"], runs[2]["paced"],
                                                          strict=True)]
    p1, p2 = one["paced"], two["paced"]
    total1 = p1["cpu_nodes_us"] + p1["cpu_server_us"]
    total2 = p2["cpu_nodes_us"] + p2["cpu_server_us"]
    m1, m2 = one["max"], two["max"]
    baseline = "one-node cluster"
    figures = [
        figure("cpu_per_turn", f"CPU per turn, 2 nodes + server, paced {rate:g} msg/s",
               total2, "µs", baseline=total1, baseline_label=baseline,
               target=Target("<=", 1.25, on="ratio")),
        figure("cpu_nodes", "  of which the node processes", p2["cpu_nodes_us"], "µs",
               baseline=p1["cpu_nodes_us"], baseline_label=baseline),
        figure("cpu_server", "  of which the PostgreSQL server", p2["cpu_server_us"], "µs",
               baseline=p1["cpu_server_us"], baseline_label=baseline),
        figure("paced_rate", "  answered while paced", p2["answered_per_s"], "turns/s",
               baseline=p1["answered_per_s"], baseline_label=baseline),
        figure("flushes", "  WAL flushes per turn while paced (the commit rate's share)",
               p2["wal_flushes_per_turn"], "flushes", baseline=p1["wal_flushes_per_turn"],
               baseline_label=baseline),
        figure("commits", "  transactions committed per turn while paced (reads too)",
               p2["commits_per_turn"], "commits", baseline=p1["commits_per_turn"],
               baseline_label=baseline),
        figure("max", f"max throughput, {CLIENTS} closed loops, 2 nodes", m2["answered_per_s"],
               "turns/s", baseline=m1["answered_per_s"], baseline_label=baseline),
        figure("max_cpu", "  CPU per turn at max, nodes + server",
               m2["cpu_nodes_us"] + m2["cpu_server_us"], "µs",
               baseline=m1["cpu_nodes_us"] + m1["cpu_server_us"], baseline_label=baseline),
        figure("duplicated", "messages answered twice (both configurations; must be 0)",
               len(duplicated), "messages", target=Target("==", 0)),
    ]
    return {"figures": figures,
            "details": {"sessions": sessions, "rate": rate, "window": window,
                        "max_window": max_window, "rounds": runs,
                        "paced_round_ratios": round_ratios, "one": one, "two": two,
                        "duplicated": duplicated, "pids": pids}}
