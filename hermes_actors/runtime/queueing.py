"""The per-session queue of §8 as a pure data structure: one pending slot and an overflow FIFO.

It lives inside a ``SessionActor`` and is touched only from the actor's mailbox thread, so
it needs no lock; the actor decides *when* to call it, this module decides *what* happens.
Keeping it free of actors and I/O lets the FIFO rules be tested (and property-tested against
a model) without threads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Literal

from hermes_actors.model.events import MessageEvent, MessageType

__all__ = ["Queued", "SessionQueue"]

Kind = Literal["followup", "queued", "internal"]


@dataclass(frozen=True, slots=True)
class Queued:
    """A waiting unit of work: the event to run, what kind it is, the inbox ids it covers."""

    event: MessageEvent
    kind: Kind
    #: The durable inbox events this item consumes when its turn starts (a merged slot
    #: covers every message that was merged into it).
    event_ids: tuple[str, ...]
    #: The messages merged into this one, in order (empty when nothing was merged): in a
    #: shared session each keeps its own sender's name.
    parts: tuple[MessageEvent, ...] = ()

    @property
    def messages(self) -> tuple[MessageEvent, ...]:
        """The messages this item runs: the merged ones, or its one event."""
        return self.parts or (self.event,)

    @property
    def is_human(self) -> bool:
        """Whether a person sent it (follow-ups and ``/queue`` items)."""
        return self.kind != "internal"

    @classmethod
    def of(cls, event: MessageEvent, kind: Kind) -> Queued:
        """Wrap one event (its inbox row is consumed when its turn starts)."""
        return cls(event, kind, (event.event_id,))


def _merge(first: Queued, second: Queued) -> Queued:
    text = "\n".join(t for t in (first.event.text, second.event.text) if t)
    event = replace(
        first.event,
        text=text,
        media_urls=first.event.media_urls + second.event.media_urls,
        message_type=first.event.message_type
        if first.event.message_type == second.event.message_type
        else MessageType.TEXT,
    )
    return Queued(event, "followup", first.event_ids + second.event_ids,
                  first.messages + second.messages)


class SessionQueue:
    """``pending_slot`` plus ``overflow``; ``depth`` is ``len(overflow) + (slot occupied)``."""

    def __init__(self) -> None:
        #: The one-slot pending item, run next.
        self.pending_slot: Queued | None = None
        #: The FIFO behind the slot.
        self.overflow: deque[Queued] = deque()

    @property
    def depth(self) -> int:
        """``queue_depth`` of §8."""
        return len(self.overflow) + (1 if self.pending_slot is not None else 0)

    def __bool__(self) -> bool:
        return self.pending_slot is not None or bool(self.overflow)

    def items(self) -> list[Queued]:
        """Slot first, then the overflow in order."""
        head = [self.pending_slot] if self.pending_slot is not None else []
        return head + list(self.overflow)

    def enqueue_fifo(self, item: Queued) -> None:
        """``_enqueue_fifo``: the slot when free, else the overflow tail."""
        if self.pending_slot is None:
            self.pending_slot = item
        else:
            self.overflow.append(item)

    def merge_followup(self, item: Queued) -> None:
        """An interrupt-mode follow-up (or photo burst): collapse into the slot.

        It merges only into a slot holding earlier follow-ups; a ``/queue`` item or internal
        event in the slot is displaced to the head of the overflow (§17.43).
        """
        slot = self.pending_slot
        if slot is None:
            self.pending_slot = item
        elif slot.kind == "followup":
            self.pending_slot = _merge(slot, item)
        else:
            self.overflow.appendleft(slot)
            self.pending_slot = item

    def take_next(self) -> Queued | None:
        """Drain/promote after a turn: the slot, and the overflow head staged behind it."""
        item = self.pending_slot
        self.pending_slot = None
        if item is None:
            return self.overflow.popleft() if self.overflow else None
        if self.overflow:
            self.pending_slot = self.overflow.popleft()
        return item

    def put_back(self, item: Queued) -> None:
        """Return an item that could not start to the front (nothing is dropped)."""
        if self.pending_slot is not None:
            self.overflow.appendleft(self.pending_slot)
        self.pending_slot = item

    def discard_followup(self) -> Queued | None:
        """``/stop``: drop a human follow-up in the slot (not a ``/queue`` item).

        Returns the dropped item. When one was dropped, the first internal item waiting in
        the overflow is promoted into the slot so a wake-up is never stranded; with none,
        the overflow head is (the slot is never empty while the overflow is not, or the
        next ``enqueue_fifo`` would run ahead of everything waiting).
        """
        slot = self.pending_slot
        if slot is None or slot.kind != "followup":
            return None
        self.pending_slot = None
        self._promote_first_internal()
        return slot

    def clear_human(self) -> list[Queued]:
        """``/new``/``/reset``: drop every human item; internal wake-ups stay, in order."""
        dropped = [i for i in self.items() if i.is_human]
        kept = [i for i in self.items() if not i.is_human]
        self.pending_slot = kept[0] if kept else None
        self.overflow = deque(kept[1:])
        return dropped

    def _promote_first_internal(self) -> None:
        for index, item in enumerate(self.overflow):
            if item.kind == "internal":
                del self.overflow[index]
                self.pending_slot = item
                return
        if self.overflow:
            self.pending_slot = self.overflow.popleft()
