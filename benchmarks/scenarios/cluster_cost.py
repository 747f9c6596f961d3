"""``cluster-cost``: what a one-node cluster costs against a single gateway on the same
PostgreSQL server, driven the same way (issue 40, point 5).

**Setup**, each on a fresh database of the run's server with the same ``COPY`` fixture of
N webhook DM sessions, all warmed up (one message each): a one-node cluster (``hermes-actors
run`` with ``cluster.enabled: true``, the configuration of ``cluster-scaling``: 64 shards,
``lease_ttl`` 10 s, ``heartbeat`` 2 s, echo agent), then a single gateway (the same command
and settings without the cluster). Both stay up; one is measured while the other idles.

**Idle**: before the single gateway is started, the one-node cluster alone idles for
``SETTLE`` seconds (the statistics of the warm-up settle), then for the idle window: its
CPU and the server's per second, and the server's committed transactions and WAL flushes
per second (lease renewals, inbox polls, its ``LISTEN`` loop).
The same is then measured for the single gateway idling next to the idle cluster node
(the difference is the gateway's share).

**Max and paced**, alternating between the two configurations (``ROUNDS`` each): ``CLIENTS``
closed loops for ``MAX_WINDOW`` seconds (``POST /v1/messages``, then a long poll of ``GET
/v1/outbox`` for the reply naming it), and ``RATE`` messages a second for ``WINDOW``
seconds. Turns answered per second; CPU per turn of the gateway process(es) and of the
server (psutil); WAL flushes (``pg_stat_io``), WAL records and committed transactions per
turn (whole server). The load driver is this process; its CPU is not counted.

The targets of issue 40: the cluster's throughput at least 0.7 of the single gateway's,
its CPU per turn (gateway + server) at most 1.5 x, at most 2 WAL flushes a turn at full
load. ``throughput-pg`` measures the single gateway in process (``submit``, no HTTP); this
scenario measures both through HTTP, so the ratio is what the cluster adds.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from benchmarks.report import Target, figure
from benchmarks.scenarios.cluster_scaling import (
    CLIENTS,
    _closed,
    _Config,
    _measure,
    _paced,
    _setup,
    _sum,
    _wal,
)
from benchmarks.util import Progress, scratch_dir

__all__ = ["run"]

#: ``(sessions, paced rate msg/s, paced window s, max-load window s, idle window s)``.
FULL = (2_000, 100.0, 10.0, 10.0, 10.0)
QUICK = (200, 20.0, 2.0, 2.0, 2.0)
#: Seconds of idling before an idle window (full mode): a backend that went idle reports
#: its pending statistics (the warm-up's commits) up to 10 s later (``pg_stat_*``).
SETTLE = 11.0
#: Windows of each kind per configuration, alternating (quick: 1).
ROUNDS = 2

_CLUSTER, _SINGLE = "cluster", "single"


def _idle(config: _Config, seconds: float, settle: float) -> dict[str, float]:
    """CPU (ms/s) of the config's processes and of the server, and the server's commits
    and WAL flushes per second, over ``seconds`` without load (after ``settle`` s)."""
    time.sleep(settle)  # (module doc) the statistics settle; not a synchronisation
    nodes0, server0 = config.cpu()
    wal0 = _wal(config.dsn)
    started = time.perf_counter()
    time.sleep(seconds)  # the window measured, not a synchronisation
    nodes1, server1 = config.cpu()
    wal1 = _wal(config.dsn)
    took = time.perf_counter() - started
    return {"seconds": took, "cpu_nodes_ms_per_s": (nodes1 - nodes0) / took * 1e3,
            "cpu_server_ms_per_s": (server1 - server0) / took * 1e3,
            **{f"{k}_per_s": (wal1[k] - wal0[k]) / took for k in wal0}}


def _total(m: dict[str, float]) -> float:
    return m["cpu_nodes_us"] + m["cpu_server_us"]


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Both configurations up, measured in alternation; figures for the report."""
    sessions, rate, window, max_window, idle_s = QUICK if quick else FULL
    rounds = 1 if quick else ROUNDS
    settle = 0.0 if quick else SETTLE
    pids: list[int] = []
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"paced": [], "max": []} for name in (_CLUSTER, _SINGLE)}
    idle: dict[str, dict[str, float]] = {}
    duplicated: list[dict[str, Any]] = []
    with scratch_dir(workdir, "cluster-cost") as base, contextlib.ExitStack() as stack:
        configs = {_CLUSTER: _setup(stack, base, 1, sessions, progress)}
        progress.update(f"one-node cluster idle for {idle_s:g} s", force=True)
        idle[_CLUSTER] = _idle(configs[_CLUSTER], idle_s, settle)
        configs[_SINGLE] = _setup(stack, base, 1, sessions, progress, cluster=False)
        progress.update(f"single gateway idle for {idle_s:g} s", force=True)
        idle[_SINGLE] = _idle(configs[_SINGLE], idle_s, settle)
        for kind in ("max", "paced"):
            for r in range(rounds):
                for name, config in configs.items():
                    load = (_paced(config, sessions, rate, window) if kind == "paced"
                            else _closed(config, sessions, max_window))
                    runs[name][kind].append(_measure(
                        config, load, progress, f"{name}, {kind} {r + 1}/{rounds}"))
        for config in configs.values():
            duplicated += config.duplicated()
            pids += [n.pid for n in config.nodes]
    cl = {k: _sum(v) for k, v in runs[_CLUSTER].items()}
    sg = {k: _sum(v) for k, v in runs[_SINGLE].items()}
    base_label = "single gateway, same server and driver"
    mc, ms, pc, ps = cl["max"], sg["max"], cl["paced"], sg["paced"]
    ic = idle[_CLUSTER]
    figures = [
        figure("max", f"max throughput, {CLIENTS} closed loops, one-node cluster",
               mc["answered_per_s"], "turns/s", baseline=ms["answered_per_s"],
               baseline_label=base_label, target=Target(">=", 0.7, on="ratio")),
        figure("max_cpu", "  CPU per turn at max, node + server", _total(mc), "µs",
               baseline=_total(ms), baseline_label=base_label,
               target=Target("<=", 1.5, on="ratio")),
        figure("max_cpu_node", "  of which the node process", mc["cpu_nodes_us"], "µs",
               baseline=ms["cpu_nodes_us"], baseline_label=base_label),
        figure("max_cpu_server", "  of which the PostgreSQL server", mc["cpu_server_us"],
               "µs", baseline=ms["cpu_server_us"], baseline_label=base_label),
        figure("max_flushes", "  WAL flushes per turn at max", mc["wal_flushes_per_turn"],
               "flushes", baseline=ms["wal_flushes_per_turn"], baseline_label=base_label,
               target=Target("<=", 2.0)),
        figure("max_commits", "  transactions committed per turn at max (reads too)",
               mc["commits_per_turn"], "commits", baseline=ms["commits_per_turn"],
               baseline_label=base_label),
        figure("max_records", "  WAL records per turn at max", mc["wal_records_per_turn"],
               "records", baseline=ms["wal_records_per_turn"], baseline_label=base_label),
        figure("paced_cpu", f"CPU per turn, paced {rate:g} msg/s, node + server", _total(pc),
               "µs", baseline=_total(ps), baseline_label=base_label),
        figure("paced_flushes", "  WAL flushes per turn while paced",
               pc["wal_flushes_per_turn"], "flushes", baseline=ps["wal_flushes_per_turn"],
               baseline_label=base_label),
        figure("paced_commits", "  transactions committed per turn while paced",
               pc["commits_per_turn"], "commits", baseline=ps["commits_per_turn"],
               baseline_label=base_label),
        # (no ratio: an idle single gateway's CPU is often 0 in a window)
        figure("idle_cpu", "idle one-node cluster: CPU of the node",
               ic["cpu_nodes_ms_per_s"], "ms/s"),
        figure("idle_single_cpu", "  (an idle single gateway's CPU, beside it)",
               idle[_SINGLE]["cpu_nodes_ms_per_s"], "ms/s"),
        figure("idle_server", "  CPU of the server meanwhile", ic["cpu_server_ms_per_s"],
               "ms/s"),
        figure("idle_commits", "  transactions committed per second (leases, polls)",
               ic["commits_per_s"], "commits/s"),
        figure("idle_flushes", "  WAL flushes per second", ic["wal_flushes_per_s"],
               "flushes/s"),
        figure("duplicated", "messages answered twice (both configurations; must be 0)",
               len(duplicated), "messages", target=Target("==", 0)),
    ]
    return {"figures": figures,
            "details": {"sessions": sessions, "rate": rate, "window": window,
                        "max_window": max_window, "idle": idle, "rounds": runs,
                        "cluster": cl, "single": sg, "duplicated": duplicated,
                        "pids": pids}}
