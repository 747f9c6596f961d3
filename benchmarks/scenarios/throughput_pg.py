"""``throughput-pg``: the ``throughput`` scenario on the PostgreSQL backend.

The same closed loops through the full runtime (durable inbox, marker, transcript, ledger,
delivery; every row checked afterwards), with ``store.backend: postgres`` on a fresh
database of the run's server (:mod:`benchmarks.pgserver`). Baseline, measured in the same
run for the same sessions x messages into a database of its own: the raw psycopg bound
(:mod:`benchmarks.rawpg`: the same rows in 1,000-turn pipelined ``executemany``
transactions).

The CPU a turn costs is measured in the gateway process (``time.process_time()``: every
actor, turn worker and the committer greenlet, plus the load driver's submitters) and in
the server's processes (psutil, summed over the postmaster and its children), from the
first submit until the gateway is idle, beside the same two figures of the raw bound
(psycopg's client side, and the server). From them, the CPU bounds on throughput: one core
for the gateway process, and all the machine's cores for the gateway and the server.
"""

from __future__ import annotations

import math
import os
from typing import Any

from benchmarks import pgserver
from benchmarks.rawpg import RawBound, raw_turn_bound
from benchmarks.report import Target, figure
from benchmarks.scenarios.throughput import runtime_turns
from benchmarks.util import Progress, scratch_dir

__all__ = ["run"]

#: ``(sessions, messages per session)``: the small and the large size.
FULL = ((1_000, 5), (10_000, 3))
QUICK = ((100, 2), (500, 2))


def _cpu_figures(size: str, rt: dict[str, Any], raw: RawBound) -> list[dict[str, Any]]:
    """CPU per turn of the gateway and of the server, and the throughput it allows."""
    cpu = rt["cpu_us_per_turn"]
    figures = [
        figure(f"{size}_cpu_gateway", "  CPU per turn: gateway process (+ load driver)",
               cpu["gateway"], "µs", baseline=raw.client_cpu_us,
               baseline_label="raw bound's psycopg client"),
    ]
    figures.append(figure(f"{size}_bound_core", "  CPU bound: one core for the gateway process",
                          1e6 / max(cpu["gateway"], 1e-9), "turns/s"))
    server = cpu.get("server", math.nan)
    if math.isfinite(server) and math.isfinite(raw.server_cpu_us):
        cores = len(os.sched_getaffinity(0))
        figures[1:1] = [figure(f"{size}_cpu_server", "  CPU per turn: PostgreSQL server",
                               server, "µs", baseline=raw.server_cpu_us,
                               baseline_label="raw bound's server")]
        figures.append(figure(f"{size}_bound_cores", f"  CPU bound: {cores} cores for both",
                              cores * 1e6 / max(cpu["gateway"] + server, 1e-9), "turns/s"))
    return figures


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Measure both sizes and their raw bounds; figures for the report."""
    figures, details = [], {}
    small, large = QUICK if quick else FULL
    for size, (sessions, messages) in (("small", small), ("large", large)):
        with scratch_dir(workdir, f"tppg{sessions}") as base:
            with pgserver.database() as dsn:
                progress.update(f"{sessions:,} sessions: runtime on PostgreSQL", force=True)
                server = pgserver.ServerCPU(dsn)
                rt = runtime_turns(base / "runtime", sessions, messages, progress,
                                   store={"backend": "postgres", "dsn": dsn},
                                   server_cpu=server.seconds if server.visible else None)
            with pgserver.database() as dsn:
                progress.update(f"{sessions:,} sessions: raw psycopg bound", force=True)
                raw = raw_turn_bound(dsn, sessions, messages)
        details[size] = {"sessions": sessions, "messages": messages, "runtime": rt,
                         "raw_bound": raw._asdict()}
        label = f"turns/s, {sessions:,} sessions x {messages}"
        target = Target(">=", 0.25, on="ratio") if size == "large" else None
        figures.append(figure(size, label, rt["turns_per_s"], "turns/s",
                              baseline=raw.turns_per_s, baseline_label="raw psycopg bound",
                              target=target))
        figures += _cpu_figures(size, rt, raw)
    return {"figures": figures, "details": details}
