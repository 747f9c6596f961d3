"""Reconciliation of every acknowledged message against the outbox: what the cluster tests
and ``scripts/cluster_soak.py`` judge a run by.

A client records each message a node acknowledged (HTTP 202) as an :class:`Accepted`, in the
order it sent them per chat; afterwards the outbox of every chat is read in cursor order.
:func:`reconcile` says, from those two lists alone, which messages were never answered,
which were answered more than once, and which chats were answered out of order.

What answers a message:

* a ``reply`` row whose ``in_reply_to`` names its event id;
* a reply that *continues* it after a crash: the agents used by the tests answer an
  auto-continued turn with a line ``resumed: <the interrupted message's text>`` (the
  scripted agent does), and that answers the earliest unanswered message of the chat with
  that text — an interrupted turn's message was consumed when the turn started, so the
  continuation is its only answer (§7).

A row carrying the recovered prefix (an uncertain send redelivered by recovery, §7) is
counted apart (``redelivered``): it is the documented at-least-once of a send whose outcome
was lost with its node, not a duplicate of a plain reply. Notices (acks, queue-full) answer
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hermes_actors.runtime.delivery import RECOVERED_PREFIX

__all__ = ["RESUMED", "Accepted", "Verdict", "reconcile"]

#: How a continued turn names the message it continues (the scripted agent's answer).
RESUMED = "resumed: "


@dataclass(frozen=True)
class Accepted:
    """One acknowledged message."""

    event_id: str
    chat: str
    text: str


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
                f"{len(self.continued)} continued, {len(self.redelivered)} redelivered")


def reconcile(accepted: Iterable[Accepted],
              outbox: Mapping[str, Iterable[Mapping[str, object]]]) -> Verdict:
    """Judge ``accepted`` (in send order per chat) against ``outbox`` (chat -> rows in
    cursor order, each with ``kind``, ``text`` and ``in_reply_to``)."""
    verdict = Verdict()
    by_chat: dict[str, list[Accepted]] = {}
    for message in accepted:
        by_chat.setdefault(message.chat, []).append(message)
    for chat, messages in by_chat.items():
        _judge_chat(chat, messages, list(outbox.get(chat, ())), verdict)
    return verdict


def _judge_chat(chat: str, messages: list[Accepted], rows: list[Mapping[str, object]],
                verdict: Verdict) -> None:
    index = {m.event_id: i for i, m in enumerate(messages)}
    plain: dict[int, int] = {}      # message index -> plain answers
    first: dict[int, int] = {}      # message index -> position of its first answer
    position = 0
    for row in rows:
        if row.get("kind") != "reply":
            continue
        text = str(row.get("text") or "")
        recovered = text.startswith(RECOVERED_PREFIX)
        if recovered:
            text = text[len(RECOVERED_PREFIX):]
        hits = []  # a continuation goes before the answer of the message it rode on
        for line in text.splitlines():
            if line.startswith(RESUMED):
                hit = _continued(messages, line[len(RESUMED):], plain, first)
                if hit is not None:
                    hits.append(hit)
                    verdict.continued.append(messages[hit].event_id)
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
