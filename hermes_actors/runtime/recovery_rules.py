"""Pure decisions of crash recovery (§7): judged from data, no actors, no I/O.

The supervisor gathers durable facts (turn markers, persisted replies, counters, boot times)
and asks these functions what to do, so every rule is unit-tested without killing anything.
How one interrupted turn is judged is the store's rule (:mod:`hermes_actors.store.recovery`,
re-exported here); what the runtime then does about restarts, storms, auto-continue and the
startup dispatch is decided below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from hermes_actors.model.commands import spec
from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.timeutil import epoch
from hermes_actors.store.recovery import MarkerVerdict, judge_marker, marker_max_age

__all__ = [
    "AUTO_RESUME_REASONS",
    "MarkerVerdict",
    "auto_continue_candidates",
    "judge_marker",
    "latest_interrupted",
    "marker_max_age",
    "next_restart_counts",
    "plan_startup_dispatch",
    "record_boot",
    "redelivery_answers_resume",
    "resume_note",
]

#: Resume reasons that auto-continue after a restart.
AUTO_RESUME_REASONS = frozenset({"restart_timeout", "shutdown_timeout", "restart_interrupted"})

_NOTE = (
    "[System note: The previous turn was interrupted by a gateway {what}; the gateway is back "
    "online. Do not re-run restart or shutdown commands from the history. Continue the "
    "interrupted task.]"
)


def resume_note(reason: str | None) -> str:
    """The system note for an auto-continued turn (§7 step 6, §17.22)."""
    return _NOTE.format(what="shutdown" if reason == "shutdown_timeout" else "restart")


#: The most session keys ``SupervisorStatistics.interrupted`` lists: a cluster node
#: recovers shards again and again over its life, and the list must not grow with them.
MAX_INTERRUPTED = 1000


def latest_interrupted(keys: Iterable[str], more: Iterable[str],
                       limit: int = MAX_INTERRUPTED) -> tuple[str, ...]:
    """The keys interrupted so far (``keys``), then those of this recovery (``more``), each
    key once at its latest place, and of those the last ``limit``."""
    more = list(more)
    latest = set(more)
    merged = dict.fromkeys(key for key in keys if key not in latest)
    merged.update(dict.fromkeys(more))
    return tuple(merged)[-limit:] if limit else ()


def next_restart_counts(counts: Mapping[str, int], mid_turn: Iterable[str],
                        waiting: Iterable[str] = ()) -> dict[str, int]:
    """Consecutive restarts each session was mid-turn across; idle sessions drop out.

    A ``waiting`` session (its interrupted turn is flagged for resume and has not run again
    since, e.g. the boot that flagged it crashed during recovery) keeps its count: it was
    not idle, it never got the chance to run, and forgetting would let a turn that kills the
    process at every resume escape the stuck-loop suspension.
    """
    mid = set(mid_turn)
    kept = {key: int(counts[key]) for key in waiting if key in counts and key not in mid}
    kept.update((key, int(counts.get(key, 0)) + 1) for key in mid)
    return dict(sorted(kept.items()))


def redelivery_answers_resume(created_at: float, last_user_message_at: float | None) -> bool:
    """Whether a reply the ledger sweep redelivered answers the turn its session is flagged
    to resume (§7 step 3: then the resume is cleared, no double answer).

    ``created_at``: when the reply was recorded; ``last_user_message_at``: the timestamp of
    the last user message of the session's transcript (the interrupted turn's), epoch
    seconds, ``None`` when it has none. A reply recorded before that message is an earlier
    turn's answer that waited in the ledger: the interrupted turn still resumes.
    """
    return last_user_message_at is None or created_at >= last_user_message_at


def record_boot(boots: Iterable[float], now: float, window: float,
                max_restarts: int) -> tuple[list[float], bool]:
    """Add this boot, prune boots outside the window; True when it is a restart storm."""
    kept = [b for b in boots if isinstance(b, (int, float)) and now - b <= window]
    kept.append(now)
    return kept, len(kept) >= max_restarts


def auto_continue_candidates(
    entries: Iterable[SessionEntry],
    now: float,
    freshness: float,
    can_send: Callable[[str], bool],
) -> list[SessionEntry]:
    """Sessions to auto-continue: resumable reason, not suspended, reachable, fresh."""
    out = []
    for entry in entries:
        if not entry.resume_pending or entry.suspended or entry.expiry_finalized:
            continue
        if entry.resume_reason not in AUTO_RESUME_REASONS or entry.origin is None:
            continue
        if not can_send(entry.origin.platform):
            continue
        marked = entry.last_resume_marked_at
        if marked is None or now - epoch(marked) > freshness:
            continue
        out.append(entry)
    return out


def plan_startup_dispatch(
    candidates: Iterable[SessionEntry],
    pending: Iterable[tuple[str, MessageEvent]],
    held: Iterable[tuple[str, MessageEvent]] = (),
) -> tuple[list[tuple[str, MessageEvent]], list[str]]:
    """Order the startup dispatch: auto-continue wake-ups first, then the inbox replay, then
    the events ``held`` by the restore gate (submitted during recovery).

    A resumable session that already has a human message waiting (replayed or held) gets no
    empty wake-up: the note rides on its first waiting message instead (§17.21); one whose
    first waiting turn is behind a ``/new`` or ``/reset`` is not resumed (§6). Replayed
    events are flagged ``replayed`` so they queue behind a running turn instead of
    interrupting it; so are ``held`` ones (they were queued by the gate, §7 step 5: one
    does not cut the turn of the one before it, which may carry the note), which are still
    acknowledged as new messages. Returns the ordered events and the resumed session keys.
    """
    pending, held = list(pending), list(held)
    # The note rides only on a waiting message that becomes a turn: a human message that is
    # not a command, or a /queue with a prompt (a /status would swallow it). A /new or
    # /reset waiting before any such message is the user's cut (§6): that session is not
    # continued at all (its reset clears the flag).
    waiting: dict[str, bool] = {}  # key -> whether its first decisive event is a turn
    for key, event in pending + held:
        if key not in waiting:
            if _becomes_turn(event):
                waiting[key] = True
            elif _is_reset(event):
                waiting[key] = False
    notes: dict[str, str] = {}
    wakeups: list[tuple[str, MessageEvent]] = []
    resumed: list[str] = []
    for entry in candidates:
        assert entry.origin is not None  # auto_continue_candidates keeps only those
        if waiting.get(entry.session_key) is False:
            continue
        text = resume_note(entry.resume_reason)
        resumed.append(entry.session_key)
        if entry.session_key in waiting:
            notes[entry.session_key] = text
            continue
        wakeups.append((
            entry.session_key,
            MessageEvent(source=entry.origin, text="", internal=True,
                         metadata={"recovery_note": text, "auto_continue": True}),
        ))
    replay = []
    for key, event in pending:
        metadata = {**event.metadata, "replayed": True}
        note: str | None = notes.pop(key, None) if _becomes_turn(event) else None
        if note is not None:
            metadata["recovery_note"] = note
        replay.append((key, replace(event, metadata=metadata)))
    for key, event in held:
        metadata = {**event.metadata, "held": True}
        note = notes.pop(key, None) if _becomes_turn(event) else None
        if note is not None:
            metadata["recovery_note"] = note
        replay.append((key, replace(event, metadata=metadata)))
    return wakeups + replay, resumed


def _is_reset(event: MessageEvent) -> bool:
    command = None if event.internal else event.command
    return command is not None and command.name in ("new", "reset")


def _becomes_turn(event: MessageEvent) -> bool:
    if event.internal:
        return False
    command = event.command
    if command is None or command.becomes_turn:
        return True
    # a /queue with media and no prompt text is a turn too (only one with neither is not)
    return spec(command.name).turn and bool(event.media_urls)
