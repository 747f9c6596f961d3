"""``throughput``: sessions x messages through the full runtime, durable, with the echo agent.

Every message is submitted through ``Gateway.submit`` (durable inbox first), runs one turn
(marker + user message + inbox consumption, agent, reply, ledger, marker clear) and is
delivered through an in-memory adapter. Sessions are closed loops: a session sends its next
message when the previous reply arrived, as a person would; 32 concurrent submitters play
the inbound connections. After the run the database is checked: every message and reply
persisted, every inbox row consumed, every obligation delivered; a shortfall fails the run.

Baselines, measured in the same run for the same sessions x messages: the raw ``sqlite3``
bound and the re-created reference pattern (:mod:`benchmarks.rawsql`). And one that is
Python-bound, as the gateway's own work is: raw pykka asks per second under the same
greenlets (:func:`benchmarks.rawpykka.ask_rate`). The raw sqlite3 bound is C; machines differ
in how fast they run Python against how fast they run C, so the share of that bound moves
between machines for the same code. The gateway's CPU per turn counted in raw asks (its
CPU per turn times the asks per second) moves much less: information for a target that
travels between machines, beside the one the issue sets.

The run also measures the CPU a turn costs, in the gateway process (its hub runs every
turn's Python, and the load driver's submitters run there too) and in its child processes
(the database writer), from the first submit until the gateway is idle, and from that the two
CPU bounds on throughput: one core for the gateway process, and all the machine's cores for
both. A target above the second cannot be met by overlapping work better, only by spending
less CPU per turn.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import psutil

from benchmarks.fixtures import dm_source
from benchmarks.rawpykka import ask_rate
from benchmarks.rawsql import raw_turn_bound, reference_turns
from benchmarks.report import Target, figure
from benchmarks.util import Progress, RecordingAdapter, closed_loop, make_gateway, scratch_dir

__all__ = ["run", "runtime_turns"]

#: ``(sessions, messages per session)``: the small and the large size.
FULL = ((1_000, 5), (10_000, 3))
QUICK = ((200, 3), (1_000, 2))


def runtime_turns(home, sessions: int, messages: int, progress: Progress, *,
                  store: dict[str, Any] | None = None,
                  server_cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    """``sessions`` x ``messages`` closed-loop turns through a gateway on ``home`` (with the
    ``store`` configuration, default SQLite), checked for durability afterwards; turns/s,
    the writer's grouping, and the CPU per turn of this process, its children and (with
    ``server_cpu``, a reading of a database server's CPU seconds) the server."""
    from hermes_actors import EchoAgent

    adapter = RecordingAdapter("telegram")
    config = {"store": store} if store else {}
    gw = make_gateway(home, adapters=[adapter], agent_factory=lambda _ctx: EchoAgent(),
                      **config)
    sources = [dm_source(n) for n in range(sessions)]
    try:
        cpu_before = _cpu_seconds()
        server_before = server_cpu() if server_cpu else 0.0
        elapsed, notices = closed_loop(gw, adapter, sources, messages, progress=progress)
        if not gw.wait_idle(60):
            raise RuntimeError("the gateway did not become idle after the last reply")
        # (after the deferred writes too: they are part of the turns' cost)
        own, children = (after - before
                         for after, before in zip(_cpu_seconds(), cpu_before, strict=True))
        server = server_cpu() - server_before if server_cpu else 0.0
        counts = gw.store.db.counts()
        pending = gw.store.pending_inbox()
        grouping = _grouping(gw.store.db.statistics())
    finally:
        gw.stop(drain_timeout=10)
    turns = sessions * messages
    if counts["messages"] != 2 * turns or counts["pending_deliveries"] or pending:
        raise RuntimeError(
            f"durability check failed: {counts['messages']} messages for {turns} turns, "
            f"{counts['pending_deliveries']} undelivered obligations, "
            f"{len(pending)} unconsumed inbox events"
        )
    cpu = {"gateway": own / turns * 1e6, "children": children / turns * 1e6}
    if server_cpu:
        cpu["server"] = server / turns * 1e6
    return {"turns": turns, "seconds": elapsed, "turns_per_s": turns / elapsed,
            "notices": notices, **grouping, "cpu_us_per_turn": cpu}


def _grouping(stats: Any) -> dict[str, float]:
    """How the backend's writer grouped the turns' writes (the two backends' records)."""
    if hasattr(stats, "group_calls"):  # SQLite's writer
        return {"transactions": stats.group_calls,
                "lists_per_transaction": stats.grouped / max(1, stats.group_calls),
                "calls_per_handoff": stats.calls / max(1, stats.batches)}
    return {"transactions": stats.transactions,
            "lists_per_transaction": stats.lists / max(1, stats.transactions),
            "largest_group": stats.largest_group}


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process and by its live children."""
    children = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        children += times.user + times.system
    return time.process_time(), children


def _cpu_figures(size: str, rt: dict[str, Any], bound: float) -> list[dict[str, Any]]:
    """CPU per turn and the throughput it allows (information, no targets), the latter also
    as a share of the raw bound ``bound``: the most the target's ratio could be on this
    machine at this CPU per turn, however well the two processes overlapped."""
    cpu = rt["cpu_us_per_turn"]
    cores = len(os.sched_getaffinity(0))
    total = cpu["gateway"] + cpu["children"]
    return [
        figure(f"{size}_cpu_gateway", "  CPU per turn: gateway process (+ load driver)",
               cpu["gateway"], "µs"),
        figure(f"{size}_cpu_children", "  CPU per turn: its writer process", cpu["children"],
               "µs"),
        figure(f"{size}_bound_core", "  CPU bound: one core for the gateway process",
               1e6 / max(cpu["gateway"], 1e-9), "turns/s", baseline=bound,
               baseline_label="raw sqlite3 bound"),
        figure(f"{size}_bound_cores", f"  CPU bound: {cores} cores for both",
               cores * 1e6 / max(total, 1e-9), "turns/s", baseline=bound,
               baseline_label="raw sqlite3 bound"),
    ]


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Measure both sizes and their baselines; figures for the report."""
    figures, details = [], {}
    small, large = QUICK if quick else FULL
    for size, (sessions, messages) in (("small", small), ("large", large)):
        with scratch_dir(workdir, f"tp{sessions}") as base:
            progress.update(f"{sessions:,} sessions: runtime", force=True)
            rt = runtime_turns(base / "runtime", sessions, messages, progress)
            progress.update(f"{sessions:,} sessions: raw sqlite3 bound", force=True)
            bound = raw_turn_bound(base / "raw", sessions, messages)
            progress.update(f"{sessions:,} sessions: reference pattern", force=True)
            ref = reference_turns(base / "ref", sessions, budget_s=1.0 if quick else 4.0,
                                  max_turns=sessions * messages)
        details[size] = {"sessions": sessions, "messages": messages, "runtime": rt,
                         "raw_bound_turns_per_s": bound, "reference_turns_per_s": ref}
        label = f"turns/s, {sessions:,} sessions x {messages}"
        value = rt["turns_per_s"]
        if size == "large":
            # Absolute turns/s vary threefold between the machines this runs on; the share
            # of the raw bound measured in the same run is the target.
            figures.append(figure("large", label, value, "turns/s", baseline=bound,
                                  baseline_label="raw sqlite3 bound",
                                  target=Target(">=", 0.5, on="ratio")))
            figures.append(figure("large_vs_reference", "  vs the reference pattern", value,
                                  "turns/s", baseline=ref, baseline_label="reference",
                                  target=Target(">=", 50, on="ratio")))
        else:
            figures.append(figure("small", label, value, "turns/s", baseline=bound,
                                  baseline_label="raw sqlite3 bound"))
            figures.append(figure("small_vs_reference", "  vs the reference pattern", value,
                                  "turns/s", baseline=ref, baseline_label="reference"))
        figures += _cpu_figures(size, rt, bound)
    progress.update("raw pykka asks/s", force=True)
    asks = ask_rate(20_000 if quick else 100_000)
    details["raw_pykka_asks_per_s"] = asks
    gateway_us = details["large"]["runtime"]["cpu_us_per_turn"]["gateway"]
    figures.append(figure("raw_asks", "raw pykka asks/s, 32 askers (Python-bound baseline)",
                          asks, "asks/s"))
    figures.append(figure("large_in_asks", f"  gateway CPU per turn at {large[0]:,} sessions, "
                          "in raw asks", gateway_us * asks / 1e6, "asks"))
    return {"figures": figures, "details": details}


