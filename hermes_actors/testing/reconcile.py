"""Reconciliation of every acknowledged message against the outbox: what the cluster tests
and ``scripts/cluster_soak.py`` judge a run by.

A client records each message a node acknowledged (HTTP 202) as an :class:`Accepted`, in the
order it sent them per chat; afterwards the outbox of every chat is read in cursor order.
:func:`reconcile` says, from those two lists alone, which messages were never answered,
which were answered more than once, and which chats were answered out of order.

What answers a message:

* an answer row (kind ``reply``, or ``recovered``: an answer sent again after an uncertain
  attempt) whose ``in_reply_to`` names its event id;
* a reply that *continues* it after a crash: the agents used by the tests answer an
  auto-continued turn with a line ``resumed: <the interrupted message's text>`` (the
  scripted agent does), and that answers the earliest unanswered message of the chat with
  that text — an interrupted turn's message was consumed when the turn started, so the
  continuation is its only answer (§7). A turn of merged follow-ups holds their texts a
  line each: the lines after that one that are the texts of the next messages not answered
  yet answer those too;
* a continuation of a continuation: when an auto-continued turn is interrupted too, the
  next one answers ``resumed: <that turn's message>``, i.e. the recovery note, followed
  after a blank line by the messages it rode on. That answers those messages (by text) and
  the message the chain began with, which the outbox no longer names: the latest message
  after every one answered before and before those answered in or after that row, with no
  reply of its own (an unanswered message before it stays lost; with none, the chain
  continued an answered message, which is then answered twice).

A row carrying the recovered prefix (an uncertain send redelivered by recovery, §7) is
counted apart (``redelivered``): it is the documented at-least-once of a send whose outcome
was lost with its node, not a duplicate of a plain reply. Notices (acks, queue-full) answer
nothing.

**Suspended, not lost.** A session interrupted mid-turn across ``stuck_loop_threshold``
restarts in a row is suspended by the stuck-loop guard (§7 step 4) and its interrupted turn
is not continued (step 6): by design nothing answers that message. The outbox alone cannot
tell it from a loss, so :func:`reconcile` takes the database's word as well
(:class:`Evidence`, built from stored rows by :func:`suspension_evidence`), and counts an
unanswered message ``suspended`` only when all of this holds:

* its inbox row was consumed by a turn (reason ``turn``) of the session its key routed to,
  and that session was suspended: its ``sessions`` row ended with ``end_reason =
  'suspended'`` (the rotation at its next message), or its routing row is still flagged
  ``suspended`` (not rotated yet);
* it was consumed during that session's life (between its start and its end), so it was
  accepted before the suspension;
* the session's transcript holds its text as a user message *after the session's last
  answer* (the turns the guard gave up on: the interrupted turn and the continuations of it
  that were interrupted again; a note riding on it is allowed for, and so is a turn of
  merged follow-ups, whose texts it holds a line each);
* no failure notice names it (a failed turn was answered, not interrupted).

Anything else unanswered stays ``lost``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hermes_actors.model.timeutil import epoch, parse_timestamp
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.turn import FAILED_NOTICE
from hermes_actors.store.ledger import REPLY_KINDS

__all__ = ["RESUMED", "Accepted", "Consumed", "Evidence", "Suspended", "Verdict",
           "reconcile", "suspension_evidence"]

#: How a continued turn names the message it continues (the scripted agent's answer).
RESUMED = "resumed: "


@dataclass(frozen=True)
class Accepted:
    """One acknowledged message."""

    event_id: str
    chat: str
    text: str


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
    """What :func:`reconcile` found."""

    #: Acknowledged messages nothing answered (event ids).
    lost: list[str] = field(default_factory=list)
    #: Messages answered by more than one plain reply (event id -> how many).
    duplicated: dict[str, int] = field(default_factory=dict)
    #: Chats whose answers came in another order than their messages were sent.
    out_of_order: list[str] = field(default_factory=list)
    #: Messages answered by a continuation (``resumed: ...``) after an interrupted turn.
    continued: list[str] = field(default_factory=list)
    #: Messages answered again with the recovered prefix (uncertain sends).
    redelivered: list[str] = field(default_factory=list)
    #: Unanswered messages whose session the stuck-loop guard suspended while they were
    #: its interrupted turn (by design, §7; not counted as lost).
    suspended: list[str] = field(default_factory=list)
    #: Messages answered exactly once.
    answered: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing answered twice, every chat in order."""
        return not (self.lost or self.duplicated or self.out_of_order)

    def line(self) -> str:
        """The verdict line: ``<n> answered, <n> lost, <n> duplicated, ...``."""
        return (f"{self.answered} answered, {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated, {len(self.out_of_order)} out of order, "
                f"{len(self.continued)} continued, {len(self.redelivered)} redelivered, "
                f"{len(self.suspended)} suspended")


def reconcile(accepted: Iterable[Accepted],
              outbox: Mapping[str, Iterable[Mapping[str, object]]],
              evidence: Evidence | None = None) -> Verdict:
    """Judge ``accepted`` (in send order per chat) against ``outbox`` (chat -> rows in
    cursor order, each with ``kind``, ``text`` and ``in_reply_to``); with ``evidence``,
    unanswered messages of suspended sessions are told apart from lost ones."""
    verdict = Verdict()
    by_chat: dict[str, list[Accepted]] = {}
    for message in accepted:
        by_chat.setdefault(message.chat, []).append(message)
    failed: set[str] = set()
    for chat, messages in by_chat.items():
        rows = list(outbox.get(chat, ()))
        failed.update(e for row in rows if _is_failure(row) for e in _ids(row.get("in_reply_to")))
        _judge_chat(chat, messages, rows, verdict)
    if evidence is not None and verdict.lost:
        texts = {m.event_id: m.text for m in accepted}
        by_key: dict[str, list[Suspended]] = {}
        for session in evidence.suspended:
            by_key.setdefault(session.session_key, []).append(session)
        keep = []
        for event_id in verdict.lost:
            if event_id not in failed and _abandoned(texts[event_id],
                                                     evidence.consumed.get(event_id), by_key):
                verdict.suspended.append(event_id)
            else:
                keep.append(event_id)
        verdict.lost = keep
    return verdict


_FAILED = FAILED_NOTICE.split("{}")[0]


def _is_failure(row: Mapping[str, object]) -> bool:
    return row.get("kind") == "notice" and str(row.get("text") or "").startswith(_FAILED)


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


def _holds(message: str, text: str) -> bool:
    """Whether a user message of a transcript holds the message ``text``: it is that text,
    or a note rode on it, or it merged follow-ups (their texts a line each)."""
    if message == text or message.endswith("\n\n" + text):
        return True
    if message.startswith(_NOTE_START):
        message = message.partition("\n\n")[2]
    return text in message.split("\n")


def suspension_evidence(*, inbox: Iterable[Mapping[str, object]],
                        sessions: Iterable[Mapping[str, object]],
                        routing: Iterable[Mapping[str, object]],
                        messages: Iterable[Mapping[str, object]]) -> Evidence:
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
    transcripts: dict[str, list[Mapping[str, object]]] = {sid: [] for sid in found}
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


def _judge_chat(chat: str, messages: list[Accepted], rows: list[Mapping[str, object]],
                verdict: Verdict) -> None:
    index = {m.event_id: i for i, m in enumerate(messages)}
    replies = [row for row in rows if row.get("kind") in REPLY_KINDS]
    # per reply row: the lowest message index it or a later reply names in in_reply_to
    # (a chain's first message was sent before those: see _chain_root)
    bounds: list[int] = []
    bound = len(messages)
    for row in reversed(replies):
        named = [index[e] for e in _ids(row.get("in_reply_to")) if e in index]
        bound = min([bound, *named])
        bounds.append(bound)
    bounds.reverse()
    named_anywhere = {index[e] for row in replies for e in _ids(row.get("in_reply_to"))
                      if e in index}
    plain: dict[int, int] = {}      # message index -> plain answers
    first: dict[int, int] = {}      # message index -> position of its first answer
    chains: dict[str, list[int]] = {}  # a chain's text -> what it answered (its resends)
    position = 0
    for row, later in zip(replies, bounds, strict=True):
        text = str(row.get("text") or "")
        recovered = text.startswith(RECOVERED_PREFIX)
        if recovered:
            text = text[len(RECOVERED_PREFIX):]
        hits = []  # a continuation goes before the answer of the message it rode on
        lines = text.splitlines()
        for n, line in enumerate(lines):
            if not line.startswith(RESUMED):
                continue
            body = "\n".join(lines[n:])[len(RESUMED):]
            if body in chains:  # the same chain sent again (a redelivery, a double send)
                found = chains[body]
            elif body.startswith(_NOTE_START):
                found = chains[body] = _chain(messages, body, plain, first, later,
                                              named_anywhere)
            else:
                hit = _continued(messages, line[len(RESUMED):], plain, first)
                found = [] if hit is None else [hit]
                if hit is not None:  # a merged turn: the other messages, a line each
                    found += _carried(messages, lines[n + 1:], plain, first, found)
            for hit in found:
                hits.append(hit)
                verdict.continued.append(messages[hit].event_id)
            break
        hits += [index[e] for e in _ids(row.get("in_reply_to")) if e in index]
        for hit in hits:
            position += 1
            first.setdefault(hit, position)
            if recovered and plain.get(hit):
                verdict.redelivered.append(messages[hit].event_id)
            else:
                plain[hit] = plain.get(hit, 0) + 1
    for i, message in enumerate(messages):
        count = plain.get(i, 0)
        if count == 0 and i not in first:
            verdict.lost.append(message.event_id)
        elif count > 1:
            verdict.duplicated[message.event_id] = count
        else:
            verdict.answered += 1
    answered = [i for i in range(len(messages)) if i in first]
    if [first[i] for i in answered] != sorted(first[i] for i in answered):
        verdict.out_of_order.append(chat)


#: How the recovery note of an auto-continued turn begins (§7 step 6).
_NOTE_START = "[System note:"


def _chain(messages: list[Accepted], body: str, plain: Mapping[int, int],
           first: Mapping[int, int], later: int, named: set[int]) -> list[int]:
    """What a continuation of a continuation answers: ``body`` (after ``resumed: ``) is the
    interrupted continuation's message — the note, then, after a blank line, the messages
    it rode on (one a line) — possibly followed by this turn's own answer lines.

    It answers the messages the note rode on (matched by text, in order, among those not
    answered yet) and the message the chain began with (:func:`_chain_root`)."""
    end = body.find("]")
    rest = body[end + 1:] if end >= 0 else ""
    riders: list[int] = []
    if rest.startswith("\n\n"):
        riders = _carried(messages, rest[2:].splitlines(), plain, first, [])
    root = _chain_root(first, min([later, *riders]), named | set(riders))
    return ([] if root is None else [root]) + riders


def _carried(messages: list[Accepted], lines: list[str], plain: Mapping[int, int],
             first: Mapping[int, int], before: list[int]) -> list[int]:
    """The messages one user message carried, a line each (a merged turn's texts are
    joined by newlines), after those ``before`` it: each line, in order, the earliest
    message with that text not answered yet and sent after the one before; the first line
    that is none ends it (what follows is the turn's own answer)."""
    carried: list[int] = []
    for line in lines:
        last = (before + carried)[-1] if before or carried else -1
        hit = next((i for i, m in enumerate(messages)
                    if i > last and m.text == line and i not in first and not plain.get(i)),
                   None)
        if hit is None:
            break
        carried.append(hit)
    return carried


def _chain_root(first: Mapping[int, int], below: int, named: set[int]) -> int | None:
    """The message a chain of continuations began with: the interrupted turn's, consumed
    after every message answered so far and before those answered in or after this row
    (index ``below``), answered by no reply of its own; the latest such (an unanswered
    message before it stays lost). With none, the chain continued a message already
    answered: the latest one answered so far (which is then answered twice)."""
    after = max(first, default=-1)
    candidates = [i for i in range(after + 1, below) if i not in named]
    if candidates:
        return candidates[-1]
    return after if after >= 0 else None


def _continued(messages: list[Accepted], text: str, plain: Mapping[int, int],
               first: Mapping[int, int]) -> int | None:
    """The earliest message of the chat with ``text`` not answered yet, else the earliest
    with ``text`` at all (continuing an answered message answers it twice)."""
    same = [i for i, message in enumerate(messages) if message.text == text]
    for i in same:
        if i not in first and not plain.get(i):
            return i
    return same[0] if same else None


def _ids(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []
