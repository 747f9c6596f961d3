"""``actors``: many live sessions: memory per idle session and the cost of starting one.

Three readings of anonymous memory (``RssAnon``, after a GC and ``malloc_trim``) in one
gevent child:

1. raw pykka: ``N`` bare ``ThreadingActor``s (the floor, :mod:`benchmarks.rawpykka`);
2. session actors: a started gateway's router brings ``N`` ``SessionActor``s live (what
   the first message to a session does before its turn), timed;
3. served sessions: each of those ``N`` sessions then gets one message and its turn (echo
   agent), so each holds what a live, idle session holds: its actor, its routing entry
   and mirror row, and its share of the caches.

Figures per session: actor start cost and actor memory against raw pykka, and the whole
footprint of an idle live session (reading 3 minus the gateway before any session), with
the target of at most 32 KB.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.fixtures import dm_key, dm_source
from benchmarks.rawpykka import idle_actors
from benchmarks.report import Target, figure
from benchmarks.util import (
    Progress,
    RecordingAdapter,
    anon_bytes,
    closed_loop,
    make_gateway,
    scratch_dir,
    settle_memory,
)

__all__ = ["run"]

FULL = 10_000
QUICK = 2_000
KB = 1024.0


def _reading() -> int:
    time.sleep(0.05)  # let every greenlet reach its idle wait
    settle_memory()
    return anon_bytes()


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """The three readings; per-session figures."""
    from hermes_actors import EchoAgent
    from hermes_actors.runtime.session_actor import GetStatistics, Kick

    count = QUICK if quick else FULL
    progress.update(f"raw pykka: {count:,} idle actors", force=True)
    raw = idle_actors(count)
    with scratch_dir(workdir, "actors") as base:
        adapter = RecordingAdapter("telegram")
        gw = make_gateway(base, adapters=[adapter], agent_factory=lambda _ctx: EchoAgent())
        try:
            empty = _reading()
            progress.update(f"starting {count:,} session actors", force=True)
            router = gw._router  # the runtime's own way to bring a session live
            started = time.perf_counter()
            for n in range(count):
                router.tell(dm_key(n), Kick())
            start_s = time.perf_counter() - started
            for n in range(count):
                if router.ask(dm_key(n), GetStatistics()) is None:
                    raise RuntimeError(f"session actor {n} is not live")
            actors = _reading()
            progress.update(f"one turn in each of {count:,} sessions", force=True)
            closed_loop(gw, adapter, [dm_source(n) for n in range(count)], 1,
                        progress=progress)
            gw.wait_idle(60)
            live = gw.stats()["live_sessions"]
            if live != count:
                raise RuntimeError(f"{live} live sessions, expected {count}")
            served = _reading()
        finally:
            gw.stop(drain_timeout=10)
    actor_kb = (actors - empty) / count / KB
    session_kb = (served - empty) / count / KB
    figures = [
        figure("start", f"session actor start, {count:,} actors", start_s / count * 1e6, "µs",
               baseline=raw.start_us, baseline_label="raw pykka actor"),
        figure("actor_kb", "  memory per idle session actor", actor_kb, "KB",
               baseline=raw.bytes_per_actor / KB, baseline_label="raw pykka actor"),
        figure("session_kb", f"memory per idle live session (after one turn), {count:,}",
               session_kb, "KB", baseline=raw.bytes_per_actor / KB,
               baseline_label="raw pykka actor", target=Target("<=", 32.0)),
    ]
    return {"figures": figures, "details": {
        "count": count, "gateway_empty_mb": empty / 2**20, "actors_mb": actors / 2**20,
        "served_mb": served / 2**20}}
