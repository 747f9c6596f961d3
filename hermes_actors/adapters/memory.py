"""``InMemoryAdapter``: records sends in lists; for tests and embedding experiments."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from hermes_actors._green import new_rlock
from hermes_actors.adapters.base import Outgoing, SendResult
from hermes_actors.model.platform import normalize_platform
from hermes_actors.model.source import SessionSource

__all__ = ["InMemoryAdapter", "SentMessage"]


@dataclass(frozen=True)
class SentMessage:
    """One recorded send attempt."""

    chat_id: str | None
    thread_id: str | None
    text: str
    message_id: str | None = None
    error: str | None = None
    #: The ids of the inbound events the text answers (``event_id`` of ``submit``).
    in_reply_to: tuple[str, ...] = ()
    #: ``reply``, ``recovered``, ``notice`` or ``ack`` (``reply`` for a direct ``send``).
    kind: str = "reply"

    @property
    def final(self) -> bool:
        """Whether this is the final answer of every event it names (not an ``ack``)."""
        return self.kind != "ack"


class InMemoryAdapter:
    """An adapter that keeps successful sends in ``sent`` and failed attempts in ``failed``.

    ``connected`` and ``fail_sends`` are plain settable attributes (§17.3). ``wait_for(n)``
    blocks until ``n`` messages were sent, so tests synchronise without sleeping.
    """

    def __init__(self, platform: str = "local") -> None:
        #: The platform this adapter serves.
        self.platform = normalize_platform(platform)
        #: Whether sends can be attempted (a disconnected adapter fails them).
        self.connected = True
        #: Make every send fail (the attempt is recorded in ``failed``).
        self.fail_sends = False
        #: Successful sends, in order.
        self.sent: list[SentMessage] = []
        #: Failed attempts, in order.
        self.failed: list[SentMessage] = []
        self._ids = itertools.count(1)
        # gevent's re-entrant lock under gevent (threading's default there is its pure-Python
        # fallback, a few frames per use, and every send takes it)
        self._cond = threading.Condition(new_rlock())
        #: The record :meth:`deliver` is sending, per thread (greenlet under gevent).
        self._delivering = threading.local()

    def deliver(self, outgoing: Outgoing) -> SendResult:
        """What the gateway calls: :meth:`send`, which then records the kind and the events
        ``outgoing`` answers with the text (a test that wraps ``send`` still sees every
        send)."""
        self._delivering.outgoing = outgoing
        try:
            return self.send(outgoing.target, outgoing.text)
        finally:
            self._delivering.outgoing = None

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Record the send; fail when disconnected or told to fail."""
        outgoing = getattr(self._delivering, "outgoing", None)
        if outgoing is not None and outgoing.text == text:
            ids, kind = tuple(outgoing.in_reply_to), outgoing.kind
        else:
            ids, kind = (), "reply"
        error = None
        if not self.connected:
            error = "disconnected"
        elif self.fail_sends:
            error = "send failed (fail_sends is set)"
        with self._cond:
            if error is not None:
                self.failed.append(SentMessage(target.chat_id, target.thread_id, text, None,
                                               error, ids, kind))
                self._cond.notify_all()
                return SendResult(success=False, error=error)
            message_id = str(next(self._ids))
            self.sent.append(SentMessage(target.chat_id, target.thread_id, text, message_id,
                                         None, ids, kind))
            self._cond.notify_all()
        return SendResult(success=True, message_id=message_id)

    def texts(self, chat_id: str | None = None) -> list[str]:
        """The texts sent so far, optionally only those to ``chat_id``."""
        with self._cond:
            return [m.text for m in self.sent if chat_id is None or m.chat_id == chat_id]

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until at least ``count`` messages were sent successfully."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.sent) >= count, timeout=timeout)
