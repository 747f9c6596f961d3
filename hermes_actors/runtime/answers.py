"""``Answer`` and ``AnswerWaiters``: a caller waits for the final answer of its own event.

Every accepted message ends with exactly one final outgoing message naming its ``event_id``
in ``in_reply_to`` (a reply, or a final notice; acknowledgements are not final). The
delivery tells :class:`AnswerWaiters` of every text it sent; a caller of
``Gateway.ask`` waits on the one naming its event. With nobody waiting, a send costs one
dictionary test.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from hermes_actors._green import brief_lock
from hermes_actors.adapters.base import Outgoing

__all__ = ["Answer", "AnswerWaiters"]


class Answer(NamedTuple):
    """The final answer of an event, as it was sent."""

    #: The text sent (a recovered reply carries its prefix).
    text: str
    #: ``reply``, ``recovered`` or ``notice``.
    kind: str
    #: The events it answers (the asked one among them).
    in_reply_to: tuple[str, ...]
    #: Always ``True`` here: only final answers end a wait.
    final: bool = True


class _Waiter:
    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: Answer | None = None


class AnswerWaiters:
    """Callers waiting for the final answers of their events."""

    def __init__(self) -> None:
        self._lock = brief_lock()
        self._waiting: dict[str, list[_Waiter]] = {}

    def expect(self, event_id: str) -> _Waiter:
        """Register interest in ``event_id``'s final answer (before it can be sent)."""
        waiter = _Waiter()
        with self._lock:
            self._waiting.setdefault(event_id, []).append(waiter)
        return waiter

    def forget(self, event_id: str, waiter: _Waiter) -> None:
        """Withdraw a waiter (answered, or given up)."""
        with self._lock:
            waiters = self._waiting.get(event_id)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[event_id]

    def wait(self, event_id: str, waiter: _Waiter, timeout: float | None) -> Answer:
        """The answer ``waiter`` was given; ``TimeoutError`` when none came in time."""
        try:
            if not waiter.done.wait(timeout) or waiter.answer is None:
                raise TimeoutError(f"no final answer to event {event_id} within {timeout}s")
            return waiter.answer
        finally:
            self.forget(event_id, waiter)

    def resolve(self, outgoing: Outgoing) -> None:
        """``outgoing`` was sent: wake the waiters of the events it finally answers."""
        if not self._waiting or outgoing.kind == "ack":
            return
        answer = Answer(outgoing.text, outgoing.kind, tuple(outgoing.in_reply_to))
        with self._lock:
            woken = [w for e in answer.in_reply_to for w in self._waiting.pop(e, ())]
        for waiter in woken:
            waiter.answer = answer
            waiter.done.set()
