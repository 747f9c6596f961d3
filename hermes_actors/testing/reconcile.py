"""Reconciliation of every accepted message against the outgoing messages, by event id:
what the soaks (``scripts/soak.py``, ``scripts/cluster_soak.py``) and the cluster's
process tests judge a run by.

**The contract.** Every accepted message — one ``Gateway.submit`` returned an id for, or
that HTTP answered 202, or 200 with ``"duplicate": true`` (the id returned is then the
first one's) — ends with exactly **one final** outgoing message whose ``in_reply_to`` (a
list of event ids; in the store a space-joined string) names it. A row is *final* when
``row.get("final", row.get("kind") != "ack")`` is truthy: acknowledgements ("Queued for
the next turn.", "⚡ Interrupting the current turn.") are not, replies, recovered replies
and notices (a command's answer, a failure, a suspension) are.

A client records each accepted message as an :class:`Accepted`, in the order it sent them
per chat (a duplicate POST records the first one's id again: it is one message);
afterwards the outgoing rows of every chat are read in cursor order (the HTTP outbox, the
event stream or the store's ``outbox``/``deliveries`` rows: ``kind``, ``text``,
``in_reply_to``, and ``final`` where present). :func:`reconcile` counts, by event id only:

* **lost** — an accepted event id no final message names;
* **duplicated** — an accepted event named by two or more final messages, or the same
  final answer twice (same chat, same text once the recovered prefix
  ``♻️ Recovered reply: `` is stripped, same ``in_reply_to`` set) even when it names
  nothing accepted;
* **unnamed** — a final message that names no accepted event (an empty ``in_reply_to``,
  or only ids the client never had accepted: internal events, continuations that lost the
  id of the message they continue). A scenario that knowingly sends messages it does not
  record says which rows are expected (``expected_unnamed``); by default every one counts.

The verdict line reads ``<n> accepted, <n> answered: 0 lost, 0 duplicated, 0 unnamed
(...)``; :attr:`Verdict.ok` holds when all three are zero, no chat's answers came out of
order and no answer went to another chat than its message.

Besides, for information: the answers per chat in the order of their messages
(``out_of_order``: the first final naming each message, by cursor, must follow the send
order of the chat), answers delivered in another chat (``misrouted``), answers carrying
the recovered prefix (``redelivered``), answers that continue an interrupted turn
(``continued``: the scripted agent's continuation begins ``resumed: ``; a label, never
evidence of an answer) and non-final rows naming an accepted event (``acks``).

**Suspended, not lost.** A session interrupted mid-turn across ``stuck_loop_threshold``
restarts in a row is suspended by the stuck-loop guard (§7 step 4) and its interrupted turn
is not continued (step 6); the gateway answers such a message with a final notice naming
it, so it is answered by id. Where no final names it (a runtime that does not send that
notice, or a notice not read), :func:`reconcile` takes the database's word as well
(:class:`Evidence`, built from stored rows by :func:`suspension_evidence`), and counts an
unnamed-by-any-final message ``suspended`` instead of lost only when all of this holds:

* its inbox row was consumed by a turn (reason ``turn``) of the session its key routed to,
  and that session was suspended: its ``sessions`` row ended with ``end_reason =
  'suspended'`` (the rotation at its next message), or its routing row is still flagged
  ``suspended`` (not rotated yet);
* it was consumed during that session's life (between its start and its end), so it was
  accepted before the suspension;
* the session's transcript holds its text as a user message *after the session's last
  answer* (the turns the guard gave up on: the interrupted turn and the continuations of it
  that were interrupted again; a note riding on it is allowed for, and so is a turn of
  merged follow-ups, whose texts it holds a line each).

Anything else no final names stays ``lost``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from hermes_actors.model.timeutil import epoch, parse_timestamp
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.store.ledger import is_final

__all__ = ["RESUMED", "Accepted", "Answer", "Consumed", "Evidence", "Suspended", "Verdict",
           "event_ids", "is_final", "names_some_event", "reconcile", "suspension_evidence"]

#: How the scripted agent's answer to an auto-continued turn begins (a label only).
RESUMED = "resumed: "

Row = Mapping[str, object]


@dataclass(frozen=True)
class Accepted:
    """One accepted message: the event id the gateway returned, its chat and text."""

    event_id: str
    chat: str
    text: str


@dataclass(frozen=True)
class Answer:
    """A final answer sent more than once (same chat, text without the recovered prefix,
    ``in_reply_to`` set)."""

    chat: str
    text: str
    in_reply_to: tuple[str, ...]
    count: int


@dataclass(frozen=True)
class Consumed:
    """How the inbox row of one acknowledged message was consumed."""

    session_key: str
    #: ``turn``, ``command``, ``failed``... (``None``: not consumed).
    reason: str | None
    #: Epoch seconds (``None``: not consumed).
    at: float | None


@dataclass(frozen=True)
class Suspended:
    """A session the stuck-loop guard suspended, as the database shows it."""

    session_key: str
    session_id: str
    #: Epoch seconds of the session's start.
    started_at: float
    #: Epoch seconds of its end (the rotation), ``None`` while it is not rotated yet.
    ended_at: float | None
    #: The user messages of its transcript after its last answer, in order: the turns
    #: the guard gave up on.
    abandoned: tuple[str, ...]


@dataclass(frozen=True)
class Evidence:
    """What the database says about unanswered messages (see the module docstring)."""

    #: event id -> how its inbox row was consumed.
    consumed: Mapping[str, Consumed] = field(default_factory=dict)
    #: The suspended sessions.
    suspended: tuple[Suspended, ...] = ()


@dataclass
class Verdict:
    """What :func:`reconcile` found, by event id."""

    #: Distinct accepted event ids (a duplicate POST's id counts once).
    accepted: int = 0
    #: Accepted ids named by exactly one final message.
    answered: int = 0
    #: Accepted ids no final message names (in send order).
    lost: list[str] = field(default_factory=list)
    #: Accepted ids named by two or more final messages (id -> how many).
    duplicated: dict[str, int] = field(default_factory=dict)
    #: Final answers sent twice or more (same chat, stripped text, ``in_reply_to`` set),
    #: whatever they name.
    repeated: list[Answer] = field(default_factory=list)
    #: Final messages naming no accepted event (the rows, in the order read).
    unnamed: list[Row] = field(default_factory=list)
    #: Chats whose first answers came in another order than their messages were sent.
    out_of_order: list[str] = field(default_factory=list)
    #: Accepted ids named by a final message in another chat than theirs.
    misrouted: list[str] = field(default_factory=list)
    #: Accepted ids named by a final carrying the recovered prefix.
    redelivered: list[str] = field(default_factory=list)
    #: Accepted ids named by a final continuing an interrupted turn (``resumed: ...``).
    continued: list[str] = field(default_factory=list)
    #: Accepted ids no final names whose session the stuck-loop guard suspended while
    #: they were its interrupted turn (the database's evidence; not counted as lost).
    suspended: list[str] = field(default_factory=list)
    #: Non-final rows (acknowledgements) naming an accepted event.
    acks: int = 0
    #: Accepted records repeating an id already recorded (duplicate POSTs).
    duplicate_posts: int = 0

    @property
    def duplicates(self) -> int:
        """How many duplications: accepted ids answered more than once, plus final answers
        repeated that name no accepted event (those naming one are counted by it)."""
        named = set(self.duplicated)
        return len(named) + sum(1 for answer in self.repeated
                                if not named.intersection(answer.in_reply_to))

    @property
    def ok(self) -> bool:
        """Nothing lost, duplicated or unnamed; every chat in order, no answer misrouted."""
        return not (self.lost or self.duplicates or self.unnamed or self.out_of_order
                    or self.misrouted)

    def line(self) -> str:
        """The verdict line: ``<n> accepted, <n> answered: <n> lost, <n> duplicated,
        <n> unnamed (...)``."""
        return (f"{self.accepted} accepted, {self.answered} answered: "
                f"{len(self.lost)} lost, {self.duplicates} duplicated, "
                f"{len(self.unnamed)} unnamed ({len(self.out_of_order)} out of order, "
                f"{len(self.misrouted)} misrouted, {len(self.suspended)} suspended, "
                f"{len(self.redelivered)} redelivered, {len(self.continued)} continued, "
                f"{self.acks} acks, {self.duplicate_posts} duplicate posts)")


def event_ids(row: Row) -> tuple[str, ...]:
    """The event ids a row names: its ``in_reply_to``, a list or a space-joined string."""
    value = row.get("in_reply_to")
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return ()


def names_some_event(row: Row) -> bool:
    """For ``expected_unnamed``: a row naming at least one event id (internal or unknown
    ones, in a scenario that sends messages it does not record)."""
    return bool(event_ids(row))


def reconcile(accepted: Iterable[Accepted],
              outbox: Mapping[str, Iterable[Row]],
              evidence: Evidence | None = None, *,
              expected_unnamed: Callable[[Row], bool] | None = None) -> Verdict:
    """Judge ``accepted`` (in send order per chat) against ``outbox`` (chat -> rows in
    cursor order, each with ``kind``, ``text``, ``in_reply_to`` and perhaps ``final``), by
    event id (see the module docstring). With ``evidence``, accepted ids no final names are
    told apart when their session was suspended; ``expected_unnamed`` says which final rows
    naming no accepted event the scenario expects (not counted as unnamed)."""
    verdict = Verdict()
    messages: dict[str, Accepted] = {}
    for message in accepted:
        if message.event_id in messages:
            verdict.duplicate_posts += 1
        else:
            messages[message.event_id] = message
    verdict.accepted = len(messages)
    finals: Counter[str] = Counter()
    first: dict[str, int] = {}  # id -> the position of its first final in its chat
    answers: Counter[tuple[str, str, tuple[str, ...]]] = Counter()
    for chat, rows in outbox.items():
        for position, row in enumerate(rows):
            ids = event_ids(row)
            named = [e for e in dict.fromkeys(ids) if e in messages]
            if not is_final(row):
                verdict.acks += bool(named)
                continue
            text = str(row.get("text") or "")
            recovered = text.startswith(RECOVERED_PREFIX)
            text = text.removeprefix(RECOVERED_PREFIX)
            answers[(chat, text, tuple(sorted(set(ids))))] += 1
            if not named:
                if expected_unnamed is None or not expected_unnamed(row):
                    verdict.unnamed.append(row)
                continue
            for event_id in named:
                finals[event_id] += 1
                if messages[event_id].chat != chat:
                    verdict.misrouted.append(event_id)
                else:
                    first.setdefault(event_id, position)
                if recovered:
                    verdict.redelivered.append(event_id)
                if text.startswith(RESUMED):
                    verdict.continued.append(event_id)
    verdict.repeated = [Answer(chat, text, ids, n)
                        for (chat, text, ids), n in answers.items() if n > 1]
    for event_id in messages:
        count = finals[event_id]
        if count == 0:
            verdict.lost.append(event_id)
        elif count > 1:
            verdict.duplicated[event_id] = count
        else:
            verdict.answered += 1
    by_chat: dict[str, list[int]] = {}
    for event_id, message in messages.items():
        if event_id in first:
            by_chat.setdefault(message.chat, []).append(first[event_id])
    verdict.out_of_order = [chat for chat, order in by_chat.items() if order != sorted(order)]
    if evidence is not None and verdict.lost:
        _set_apart_suspended(verdict, messages, evidence)
    return verdict


def _set_apart_suspended(verdict: Verdict, messages: Mapping[str, Accepted],
                         evidence: Evidence) -> None:
    """Move from ``lost`` to ``suspended`` the ids the evidence shows abandoned."""
    by_key: dict[str, list[Suspended]] = {}
    for session in evidence.suspended:
        by_key.setdefault(session.session_key, []).append(session)
    keep = []
    for event_id in verdict.lost:
        if _abandoned(messages[event_id].text, evidence.consumed.get(event_id), by_key):
            verdict.suspended.append(event_id)
        else:
            keep.append(event_id)
    verdict.lost = keep


def _abandoned(text: str, consumed: Consumed | None,
               suspended: Mapping[str, list[Suspended]]) -> bool:
    """Whether a message consumed as ``consumed`` was a turn a suspension gave up on."""
    if consumed is None or consumed.reason != "turn" or consumed.at is None:
        return False
    for session in suspended.get(consumed.session_key, ()):
        if consumed.at < session.started_at:
            continue
        if session.ended_at is not None and consumed.at > session.ended_at:
            continue
        if any(_holds(m, text) for m in session.abandoned):
            return True
    return False


#: How the recovery note of an auto-continued turn begins (§7 step 6).
_NOTE_START = "[System note:"


def _holds(message: str, text: str) -> bool:
    """Whether a user message of a transcript holds the message ``text``: it is that text,
    or a note rode on it, or it merged follow-ups (their texts a line each)."""
    if message == text or message.endswith("\n\n" + text):
        return True
    if message.startswith(_NOTE_START):
        message = message.partition("\n\n")[2]
    return text in message.split("\n")


def suspension_evidence(*, inbox: Iterable[Row], sessions: Iterable[Row],
                        routing: Iterable[Row], messages: Iterable[Row]) -> Evidence:
    """:class:`Evidence` from stored rows (``SessionStore.rows``/``Backend.rows`` shapes, or
    the same columns selected by hand): ``inbox`` (``event_id``, ``session_key``,
    ``consumed_at``, ``consumed_reason``), ``sessions`` (``id``, ``session_key``,
    ``started_at``, ``ended_at``, ``end_reason``), ``routing`` (``session_key``, ``entry``
    JSON, ``suspended``) and ``messages`` (``session_id``, ``role``, ``content``,
    ``is_reply``, in transcript order) — rows of other sessions are ignored."""
    consumed = {
        str(row["event_id"]): Consumed(str(row["session_key"]),
                                       _text(row.get("consumed_reason")),
                                       _number(row.get("consumed_at")))
        for row in inbox}
    found: dict[str, tuple[str, float | None, float | None]] = {}
    for row in sessions:
        if row.get("end_reason") == "suspended" and row.get("session_key"):
            found[str(row["id"])] = (str(row["session_key"]), _number(row.get("started_at")),
                                     _number(row.get("ended_at")))
    for row in routing:
        if not row.get("suspended"):
            continue
        try:
            entry = json.loads(str(row["entry"]))
        except ValueError:
            continue
        sid = entry.get("session_id") if isinstance(entry, dict) else None
        if isinstance(sid, str) and sid not in found:
            started = _number(entry.get("created_at"))
            found[sid] = (str(row["session_key"]), started, None)
    transcripts: dict[str, list[Row]] = {sid: [] for sid in found}
    for row in messages:
        sid = str(row.get("session_id"))
        if sid in transcripts:
            transcripts[sid].append(row)
    suspended = []
    for sid, (key, started, ended) in found.items():
        abandoned: list[str] = []
        for row in transcripts[sid]:
            if row.get("is_reply") or row.get("role") == "assistant":
                abandoned = []  # answered up to here
            elif row.get("role") == "user":
                abandoned.append(str(row.get("content") or ""))
        suspended.append(Suspended(key, sid, started if started is not None else 0.0, ended,
                                   tuple(abandoned)))
    return Evidence(consumed, tuple(suspended))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _number(value: object) -> float | None:
    """Epoch seconds of a stored time: a number, or an ISO 8601 text (an entry's times)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    moment = parse_timestamp(value)
    return None if moment is None else epoch(moment)
