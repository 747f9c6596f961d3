"""``fifo``: bursts of ``/queue`` during long turns, with the order verified in the run.

Each session starts a long turn (``hold <gate>`` of :class:`~hermes_actors.testing.ScriptedAgent`:
it ends only when the benchmark opens the gate). While every session's turn is held, a
burst of ``/queue item-<session>-<j>`` arrives for each session, interleaved across
sessions. Then all gates open and the queues drain. The invariant (§8): each ``/queue``
is exactly one complete turn, in FIFO order, never merged. The run checks it from the
agent's own log (what each session's turns received, in order) and from the replies each
chat got; any difference fails the run with the first mismatch.

Figures: drain throughput of the queued turns (gates open -> last reply), and the ``/queue``
acknowledgement time. Baseline, same run and gateway size: the same number of turns as
plain messages (closed loop, no queueing).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import Any

from benchmarks.fixtures import dm_source
from benchmarks.report import Target, figure
from benchmarks.util import (
    Progress,
    RecordingAdapter,
    closed_loop,
    make_gateway,
    percentile,
    scratch_dir,
)

__all__ = ["FifoBroken", "run"]

#: ``(sessions, /queue items per burst)``; a burst stays under the 32-item queue cap.
FULL = (200, 30)
QUICK = (40, 10)


class FifoBroken(AssertionError):
    """The queued turns did not run one per ``/queue``, in order."""


def _check_order(log: list, adapter: Any, sessions: int, burst: int,
                 session_ids: dict[str, int]) -> None:
    seen: dict[int, list[str]] = defaultdict(list)
    for record in log:
        seen[session_ids[record.session_id]].append(record.message)
    for n in range(sessions):
        want = [f"hold g{n}"] + [f"item-{n}-{j}" for j in range(burst)]
        if seen[n] != want:
            got = seen[n]
            first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                         min(len(got), len(want)))
            raise FifoBroken(
                f"session {n}: turn {first} received {got[first:first + 1]} where "
                f"{want[first:first + 1]} was due ({len(got)} turns for {len(want)} messages)"
            )
        replies = [t for t in adapter.texts(str(n)) if t.startswith("echo: ")]
        if replies != [f"echo: item-{n}-{j}" for j in range(burst)]:
            raise FifoBroken(f"session {n}: replies out of order or missing: {replies[:5]}...")


def _queued_run(home, sessions: int, burst: int, progress: Progress) -> dict[str, Any]:
    from hermes_actors import MessageEvent
    from hermes_actors.testing import Gates, ScriptedAgent

    gates, log = Gates(), []
    acks: list[float] = []
    asked: dict[str, deque[float]] = defaultdict(deque)
    total = sessions * burst
    replies = [0]
    drained = threading.Event()

    def on_sent(target, text, t) -> None:
        if text.startswith("Queued for the next turn"):
            pending = asked[target.chat_id]
            if pending:
                acks.append(t - pending.popleft())
        elif text.startswith("echo: item-"):
            replies[0] += 1
            if replies[0] == total:
                drained.set()

    adapter = RecordingAdapter("telegram", on_sent)
    gw = make_gateway(home, adapters=[adapter],
                      agent_factory=lambda _ctx: ScriptedAgent(gates=gates, log=log))
    sources = [dm_source(n) for n in range(sessions)]
    try:
        for n in range(sessions):
            gw.submit(MessageEvent(source=sources[n], text=f"hold g{n}"))
        for n in range(sessions):
            if not gates.wait_until_waiting(f"g{n}", timeout=30):
                raise RuntimeError(f"session {n}'s long turn did not start")
        progress.update(f"{sessions} turns held; bursts of {burst} /queue", force=True)
        for j in range(burst):
            for n in range(sessions):
                asked[str(n)].append(time.perf_counter())
                gw.submit(MessageEvent(source=sources[n], text=f"/queue item-{n}-{j}"))
        for n in range(sessions):
            depth = gw.queue_depth(f"agent:main:telegram:dm:{n}")
            if depth != burst:
                raise FifoBroken(f"session {n}: queue depth {depth} after {burst} /queue")
        opened = time.perf_counter()
        gates.open_all()
        while not drained.wait(0.5):
            progress.update(f"draining: {replies[0]:,}/{total:,} queued turns")
            if time.perf_counter() - opened > 300:
                raise RuntimeError(f"only {replies[0]} of {total} queued turns ran")
        elapsed = time.perf_counter() - opened
        gw.wait_idle(30)
        session_ids = {gw.store.get(f"agent:main:telegram:dm:{n}").session_id: n
                       for n in range(sessions)}
    finally:
        gates.open_all()
        gw.stop(drain_timeout=10)
    _check_order(log, adapter, sessions, burst, session_ids)
    return {"turns_per_s": total / elapsed, "acks": sorted(acks), "turns": total}


def _plain_run(home, sessions: int, messages: int, progress: Progress) -> float:
    from hermes_actors import EchoAgent

    adapter = RecordingAdapter("telegram")
    gw = make_gateway(home, adapters=[adapter], agent_factory=lambda _ctx: EchoAgent())
    try:
        elapsed, _ = closed_loop(gw, adapter, [dm_source(n) for n in range(sessions)],
                                 messages, progress=progress)
    finally:
        gw.stop(drain_timeout=10)
    return sessions * messages / elapsed


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Queued bursts with the order check, then the plain baseline."""
    sessions, burst = QUICK if quick else FULL
    with scratch_dir(workdir, "fifo") as base:
        queued = _queued_run(base / "queued", sessions, burst, progress)
        progress.update("baseline: the same turns as plain messages", force=True)
        plain = _plain_run(base / "plain", sessions, burst, progress)
    acks = queued["acks"]
    figures = [
        figure("order", f"FIFO violations, {sessions} sessions x {burst} /queue", 0.0,
               "turns", target=Target("==", 0)),
        figure("drain", "queued turns/s (gates open → last reply)", queued["turns_per_s"],
               "turns/s", baseline=plain, baseline_label="plain turns/s"),
        figure("ack_p99", "/queue acknowledgement p99", percentile(acks, 0.99) * 1000, "ms"),
    ]
    return {"figures": figures, "details": {"sessions": sessions, "burst": burst,
                                            "acks": len(acks), "plain_turns_per_s": plain}}
