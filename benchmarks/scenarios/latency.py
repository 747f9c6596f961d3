"""``latency``: submit -> reply at a fixed offered load (open loop), p50 and p99.

Messages are offered at ``rate`` per second for ``duration`` seconds, round-robin over
``sessions`` sessions (so one session gets a message every ``sessions / rate`` seconds, far
apart from its previous turn: no busy follow-ups). A message's latency runs from its
*scheduled* submit time to the moment the adapter sends its reply, so a submitter that
falls behind cannot hide the queueing it caused (no coordinated omission). The first
message of each session creates the session, as in production; the figures include it.

Baseline, same run, same offered load and backend: raw pykka asks to one echo actor.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.fixtures import dm_source
from benchmarks.rawpykka import ask_latencies, offered_load
from benchmarks.report import Target, figure
from benchmarks.util import Progress, RecordingAdapter, make_gateway, percentile, scratch_dir

__all__ = ["gateway_latencies", "measure", "run"]

#: ``(messages per second, seconds, sessions)``.
FULL = (1000.0, 10.0, 1000)
QUICK = (300.0, 2.0, 200)


def gateway_latencies(home, rate: float, duration: float, sessions: int, progress: Progress,
                      store: dict[str, Any] | None = None, *,
                      senders: int = 16) -> tuple[list[float], float]:
    """Offer the load to a gateway on ``home`` (``store``: its store configuration, default
    SQLite) from ``senders`` concurrent senders; the sorted latencies (s) and the offered
    rate achieved."""
    from hermes_actors import EchoAgent, MessageEvent

    sources = [dm_source(n) for n in range(sessions)]
    count = int(rate * duration)
    latencies: list[float] = []
    scheduled: dict[str, float] = {}

    def on_sent(_target, text, t) -> None:
        at = scheduled.pop(text[len("echo: "):], None) if text.startswith("echo: ") else None
        if at is not None:
            latencies.append(t - at)

    adapter = RecordingAdapter("telegram", on_sent)
    config = {"store": store} if store else {}
    gw = make_gateway(home, adapters=[adapter], agent_factory=lambda _ctx: EchoAgent(),
                      **config)
    start = time.perf_counter() + 0.1

    def send(i: int) -> None:
        text = f"m{i}"
        scheduled[text] = start + i / rate
        gw.submit(MessageEvent(source=sources[i % sessions], text=text))
        if i % 500 == 0:
            progress.update(f"gateway: {i:,}/{count:,} offered, {len(latencies):,} answered")

    try:
        offered_load(rate, duration, send, start, senders=senders)
        offered_for = time.perf_counter() - start
        deadline = time.perf_counter() + 30
        while len(latencies) < count and time.perf_counter() < deadline:
            time.sleep(0.05)
        gw.wait_idle(30)
    finally:
        gw.stop(drain_timeout=10)
    if len(latencies) < count:
        raise RuntimeError(f"only {len(latencies)} of {count} offered messages were answered")
    return sorted(latencies), count / offered_for


def measure(*, quick: bool, progress: Progress, workdir: str | None,
            p99_target: float | None, store: dict[str, Any] | None = None,
            senders: int = 16, load: tuple[float, float, int] | None = None,
            prefix: str = "") -> dict[str, Any]:
    """Offer the load (``load``: ``(rate, seconds, sessions)``, default :data:`FULL` or
    :data:`QUICK`) to the gateway (with ``store``) from ``senders`` senders, then to a raw
    pykka actor from 16 (the baseline stays the same whatever the gateway needs); the
    percentiles, p99's ratio judged against ``p99_target`` (if any). ``prefix`` goes
    before every figure's key (and indents its label)."""
    rate, duration, sessions = load or (QUICK if quick else FULL)
    with scratch_dir(workdir, "latency") as base:
        progress.update(f"gateway at {rate:,.0f} msg/s for {duration:g} s", force=True)
        ours, achieved = gateway_latencies(base, rate, duration, sessions, progress, store,
                                           senders=senders)
    progress.update(f"raw pykka ask at {rate:,.0f} msg/s", force=True)
    raw = ask_latencies(rate, min(duration, 5.0))
    ms = 1000.0
    p50, p99 = percentile(ours, 0.50) * ms, percentile(ours, 0.99) * ms
    raw50, raw99 = percentile(raw, 0.50) * ms, percentile(raw, 0.99) * ms
    label = f"at {rate:,.0f} msg/s offered, {sessions:,} sessions"
    indent = "  " if prefix else ""
    target = None if p99_target is None else Target("<=", p99_target, on="ratio")
    figures = [
        figure(f"{prefix}p50", f"{indent}submit → reply p50, {label}", p50, "ms",
               baseline=raw50, baseline_label="raw pykka ask p50"),
        figure(f"{prefix}p99", f"{indent}submit → reply p99, {label}", p99, "ms",
               baseline=raw99, baseline_label="raw pykka ask p99", target=target),
        figure(f"{prefix}max", f"{indent}submit → reply max", ours[-1] * ms, "ms",
               baseline=raw[-1] * ms, baseline_label="raw pykka ask max"),
        figure(f"{prefix}achieved", f"{indent}offered load achieved", achieved, "msg/s",
               baseline=rate, baseline_label="asked"),
    ]
    return {"figures": figures, "details": {"rate": rate, "duration": duration,
                                            "sessions": sessions, "senders": senders,
                                            "answered": len(ours)}}


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """The load on the SQLite backend; p99 within 15 x the raw ask's."""
    return measure(quick=quick, progress=progress, workdir=workdir, p99_target=15.0)
