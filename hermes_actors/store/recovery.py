"""How an interrupted turn is judged after a crash (§7 step 2): pure rules over stored facts.

A durable turn marker left by a crash means one of two things: the reply reached the
transcript but not the ledger (deliver it once, as recovered, without re-running the turn),
or no reply was persisted (mark the session to resume, once). :func:`judge_marker` decides
from the marker and the persisted reply alone (never from "recently active" heuristics);
the store's :meth:`~hermes_actors.store.turns.TurnRecords.judge_interrupted_turns` gathers
those facts and :meth:`~hermes_actors.store.turns.TurnRecords.settle_markers` applies the
verdicts. The supervisor and ``SessionStore.recover_interrupted_turns`` both go through here:
there is one implementation of the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.silence import SILENCE_NOTICE, is_silence_marker
from hermes_actors.model.timeutil import epoch

__all__ = ["RESTART_INTERRUPTED", "MarkerVerdict", "judge_marker", "marker_max_age"]

#: The resume reason recovery gives an interrupted turn.
RESTART_INTERRUPTED = "restart_interrupted"


def marker_max_age(agent_timeout: float) -> float:
    """Markers older than this are cleared without resume: ``max(3600, 2 × timeout)``."""
    return max(3600.0, 2.0 * agent_timeout)


@dataclass(frozen=True)
class MarkerVerdict:
    """What to do with one durable turn marker found after a crash."""

    #: ``expire`` (too old, or behind a boundary: clear only), ``deliver`` (owe ``content``
    #: as ``kind``), ``nothing`` (silence on an internal turn), ``resume`` (no reply: mark
    #: the session to resume).
    action: Literal["expire", "deliver", "nothing", "resume"]
    content: str | None = None
    kind: str | None = None


def judge_marker(entry: SessionEntry, reply: str | None, now: float,
                 max_age: float) -> MarkerVerdict:
    """Judge an interrupted turn from its marker and its persisted reply (if any).

    Times are compared as epoch seconds, so an offset or a host time-zone change between the
    two runs cannot make a fresh marker look old or an old one fresh; a marker from the
    future (a clock stepped back) counts as fresh. The reply is judged as live delivery
    would: a bare silence marker is owed nothing on an internal turn and the silence notice
    on a human one.
    """
    started = entry.active_turn_started_at
    if started is None or now - epoch(started) > max_age or entry.expiry_finalized:
        return MarkerVerdict("expire")  # a finalized boundary is never reopened
    if reply is not None and reply.strip():
        if is_silence_marker(reply):
            if entry.active_turn_internal:
                return MarkerVerdict("nothing")
            return MarkerVerdict("deliver", SILENCE_NOTICE, "notice")
        return MarkerVerdict("deliver", reply, "recovered")
    if entry.suspended:
        return MarkerVerdict("expire")  # its next message starts a fresh session anyway
    return MarkerVerdict("resume")
