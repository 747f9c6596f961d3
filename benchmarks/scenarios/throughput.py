"""``throughput``: sessions x messages through the full runtime, durable, with the echo agent.

Every message is submitted through ``Gateway.submit`` (durable inbox first), runs one turn
(marker + user message + inbox consumption, agent, reply, ledger, marker clear) and is
delivered through an in-memory adapter. Sessions are closed loops: a session sends its next
message when the previous reply arrived, as a person would; 32 concurrent submitters play
the inbound connections. After the run the database is checked: every message and reply
persisted, every inbox row consumed, every obligation delivered; a shortfall fails the run.

Baselines, measured in the same run for the same sessions x messages: the raw ``sqlite3``
bound and the re-created reference pattern (:mod:`benchmarks.rawsql`).
"""

from __future__ import annotations

from typing import Any

from benchmarks.fixtures import dm_source
from benchmarks.rawsql import raw_turn_bound, reference_turns
from benchmarks.report import Target, figure
from benchmarks.util import Progress, RecordingAdapter, closed_loop, make_gateway, scratch_dir

__all__ = ["run"]

#: ``(sessions, messages per session)``: the small and the large size.
FULL = ((1_000, 5), (10_000, 3))
QUICK = ((200, 3), (1_000, 2))


def _runtime(home, sessions: int, messages: int, progress: Progress) -> dict[str, Any]:
    from hermes_actors import EchoAgent

    adapter = RecordingAdapter("telegram")
    gw = make_gateway(home, adapters=[adapter], agent_factory=lambda _ctx: EchoAgent())
    sources = [dm_source(n) for n in range(sessions)]
    try:
        elapsed, notices = closed_loop(gw, adapter, sources, messages, progress=progress)
        if not gw.wait_idle(60):
            raise RuntimeError("the gateway did not become idle after the last reply")
        counts = gw.store.db.counts()
        pending = gw.store.pending_inbox()
        writer = gw.store.db.statistics()
    finally:
        gw.stop(drain_timeout=10)
    turns = sessions * messages
    if counts["messages"] != 2 * turns or counts["pending_deliveries"] or pending:
        raise RuntimeError(
            f"durability check failed: {counts['messages']} messages for {turns} turns, "
            f"{counts['pending_deliveries']} undelivered obligations, "
            f"{len(pending)} unconsumed inbox events"
        )
    return {"turns": turns, "seconds": elapsed, "turns_per_s": turns / elapsed,
            "notices": notices, "transactions": writer.group_calls,
            "lists_per_transaction": writer.grouped / max(1, writer.group_calls),
            "calls_per_handoff": writer.calls / max(1, writer.batches)}


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Measure both sizes and their baselines; figures for the report."""
    figures, details = [], {}
    small, large = QUICK if quick else FULL
    for size, (sessions, messages) in (("small", small), ("large", large)):
        with scratch_dir(workdir, f"tp{sessions}") as base:
            progress.update(f"{sessions:,} sessions: runtime", force=True)
            rt = _runtime(base / "runtime", sessions, messages, progress)
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
            figures.append(figure("large", label, value, "turns/s", baseline=bound,
                                  baseline_label="raw sqlite3 bound",
                                  target=Target(">=", 5000)))
            figures.append(figure("large_vs_raw", "  share of the raw sqlite3 bound", value,
                                  "turns/s", baseline=bound,
                                  baseline_label="raw sqlite3 bound",
                                  target=Target(">=", 0.25, on="ratio")))
            figures.append(figure("large_vs_reference", "  vs the reference pattern", value,
                                  "turns/s", baseline=ref, baseline_label="reference",
                                  target=Target(">=", 50, on="ratio")))
        else:
            figures.append(figure("small", label, value, "turns/s", baseline=bound,
                                  baseline_label="raw sqlite3 bound"))
            figures.append(figure("small_vs_reference", "  vs the reference pattern", value,
                                  "turns/s", baseline=ref, baseline_label="reference"))
    return {"figures": figures, "details": details}


