"""``Outbox`` and ``OutboxAdapter``: replies to HTTP-served chats, kept for clients to read.

An HTTP client cannot be called back, so the adapters of the platforms the HTTP adapter
serves (``webhook``, ``api_server`` by default) "send" by appending to the store's durable
outbox (:mod:`hermes_actors.store.outbox`); clients read it by cursor with a long poll. The
outbox wakes the readers waiting on a chat after each append to that chat, with a condition
variable per chat that has waiters (all sharing one lock): a plain thread condition in
embedded use, a greenlet one once gevent has patched ``threading``, so a long poll never
blocks the gevent hub. An append wakes only its chat's readers, never every open stream
and long poll (1,000 open streams woke 1,000 greenlets per reply).

Each platform needs its own adapter object (the gateway maps one adapter per platform); they
share one :class:`Outbox`. The outbox reaches the store through a getter bound after the
``Gateway`` is built, because the gateway creates its store only in ``start()``, and
recovery may already deliver owed replies during that call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cachetools import LRUCache

from hermes_actors.adapters.base import Outgoing, SendResult
from hermes_actors.errors import HermesActorsError
from hermes_actors.model.platform import normalize_platform
from hermes_actors.model.source import SessionSource

__all__ = ["DEFAULT_RETENTION_DAYS", "Outbox", "OutboxAdapter"]

log = logging.getLogger("hermes_actors.outbox")

#: Outbox rows older than this are pruned.
DEFAULT_RETENTION_DAYS = 7.0
#: How many chats' append counts the outbox remembers for its waiters.
CHAT_VERSIONS = 100_000
#: The ``kind`` of a text sent without the delivery's record (a direct ``send``).
DEFAULT_KIND = "reply"


class Outbox:
    """The durable outbox of one gateway, with wake-ups for long-polling readers."""

    def __init__(self, store: Callable[[], Any] | None = None) -> None:
        self._get_store = store
        self._lock = threading.Lock()
        #: Set by :meth:`close` (for :meth:`wait_closed`).
        self._closed_event = threading.Event()
        #: The chats readers wait on: a condition on :attr:`_lock` and how many wait on it.
        self._waiting: dict[tuple[str, str | None], _Waiters] = {}
        #: Per chat, the number of its last change (an append here, or one another node
        #: told of), so a waiter sees a change since it read without a database read for
        #: every append to some other chat. Bounded (LRU): a chat forgotten here only wakes
        #: its waiters once for nothing (they read, find nothing new, wait again). The
        #: numbers are unique, so a chat forgotten and changed again never shows the value
        #: a waiter saw before (a count per chat would start over and could: that wake-up
        #: was lost).
        self._versions: LRUCache[tuple[str, str | None], int] = LRUCache(maxsize=CHAT_VERSIONS)
        self._changes = 0
        #: Bumped when changes may have been missed (:meth:`note_unknown`): every waiter
        #: reads again.
        self._rounds = 0
        self._high = 0
        self._closed = False
        #: Replies appended by this process.
        self.appended = 0

    def bind(self, store: Callable[[], Any]) -> None:
        """Give the outbox its store getter (``lambda: gateway.store``)."""
        self._get_store = store

    @property
    def store(self) -> Any:
        """The store the outbox lives in."""
        if self._get_store is None:
            raise HermesActorsError("the outbox is not bound to a store yet")
        return self._get_store()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (readers are released, appends refused)."""
        return self._closed

    @property
    def readers(self) -> int:
        """Readers waiting in :meth:`wait` now (long polls and streams)."""
        with self._lock:
            return sum(waiters.count for waiters in self._waiting.values())

    def append(self, target: SessionSource, text: str, kind: str = DEFAULT_KIND,
               in_reply_to: tuple[str, ...] = (), obligation_id: str | None = None,
               ) -> int | None:
        """Store a reply to ``target``'s chat (answering the events ``in_reply_to``) and wake
        its readers; returns the cursor. With ``obligation_id`` (a reply the delivery
        ledger owes, claimed by this gateway) the append and the ledger row's ``delivered``
        are one transaction; ``None`` when the claim is not this gateway's (any more):
        nothing was appended."""
        if self._closed:
            raise HermesActorsError("the outbox is closed")
        store = self.store
        cursor = store.outbox_append(
            session_key=store.session_key_for(target),
            platform=target.platform,
            chat_id=target.chat_id,
            thread_id=target.thread_id,
            text=text,
            kind=kind,
            floor=self._high,
            in_reply_to=in_reply_to,
            obligation_id=obligation_id,
        )
        if cursor is None:
            return None
        chat = (target.platform, target.chat_id)
        with self._lock:
            self._high = max(self._high, cursor)
            self.appended += 1
            self._changed(chat)
        return cursor

    def note_append(self, platform: str, chat_id: str | None) -> None:
        """Another process appended to this chat (a cluster node's notice): its waiters
        read again."""
        with self._lock:
            self._changed((platform, chat_id))

    def note_unknown(self) -> None:
        """Appends elsewhere may have gone unheard (the notices' connection is new): every
        waiter reads again."""
        with self._lock:
            self._rounds += 1
            self._wake_all()

    def _changed(self, chat: tuple[str, str | None]) -> None:
        self._changes += 1
        self._versions[chat] = self._changes
        waiters = self._waiting.get(chat)
        if waiters is not None:
            waiters.cond.notify_all()

    def _wake_all(self) -> None:
        for waiters in self._waiting.values():
            waiters.cond.notify_all()

    def read(self, platform: str, chat_id: str | None, after: int = 0,
             limit: int = 100) -> list[dict[str, Any]]:
        """Rows of one chat after cursor ``after``, oldest first (see ``outbox_read``)."""
        rows = self.store.outbox_read(platform, chat_id, after, limit)
        if rows:
            with self._lock:
                self._high = max(self._high, rows[-1]["cursor"])
        return rows

    def head(self) -> int:
        """The highest cursor so far: anything appended later has a greater one."""
        head = self.store.outbox_head()
        with self._lock:
            self._high = max(self._high, head)
            return max(self._high, head)

    def wait(self, platform: str, chat_id: str | None, after: int, timeout: float,
             limit: int = 100) -> list[dict[str, Any]]:
        """Like :meth:`read`, but when nothing is there yet, wait up to ``timeout`` seconds
        for a reply to arrive (returns ``[]`` on timeout or when the outbox closes)."""
        deadline = time.monotonic() + max(0.0, timeout)
        chat = (platform, chat_id)
        while True:
            with self._lock:
                seen = (self._versions.get(chat, 0), self._rounds)
                if self._closed:
                    return []  # the store may be closed already (the end of a stop)
            rows = self.read(platform, chat_id, after, limit)
            remaining = deadline - time.monotonic()
            if rows or remaining <= 0 or self._closed:
                return rows
            def changed(seen: tuple[int, int] = seen) -> bool:
                return (self._versions.get(chat, 0), self._rounds) != seen or self._closed

            with self._lock:
                waiters = self._waiting.get(chat)
                if waiters is None:
                    waiters = self._waiting[chat] = _Waiters(threading.Condition(self._lock))
                waiters.count += 1
                try:
                    waiters.cond.wait_for(changed, timeout=remaining)
                finally:
                    waiters.count -= 1
                    if waiters.count == 0:
                        del self._waiting[chat]

    def wait_closed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`close`; whether the outbox is closed."""
        return self._closed_event.wait(max(0.0, timeout))

    def prune(self, max_age_days: float = DEFAULT_RETENTION_DAYS) -> int:
        """Delete rows older than ``max_age_days``; returns the count."""
        return self.store.outbox_prune(max_age_days)

    def close(self) -> None:
        """Release every waiting reader and refuse later appends."""
        with self._lock:
            self._closed = True
            self._wake_all()
        self._closed_event.set()


class _Waiters:
    """The readers waiting on one chat: their condition (on the outbox's lock) and count."""

    __slots__ = ("cond", "count")

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.count = 0


class OutboxAdapter:
    """The :class:`~hermes_actors.adapters.base.PlatformAdapter` of one HTTP-served platform:
    ``send`` appends to the shared :class:`Outbox`."""

    def __init__(self, platform: str, outbox: Outbox) -> None:
        #: The platform this adapter serves.
        self.platform = normalize_platform(platform)
        #: The outbox replies go to.
        self.outbox = outbox

    @property
    def connected(self) -> bool:
        """True while the outbox accepts replies."""
        return not self.outbox.closed

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Append ``text`` for ``target``'s chat as a ``reply``; the cursor is the message
        id. (The gateway calls :meth:`deliver`, which keeps the kind and the event ids.)"""
        return self.deliver(Outgoing(target, text, DEFAULT_KIND))

    def deliver(self, outgoing: Outgoing) -> SendResult:
        """Append ``outgoing`` with its kind and the events it answers. A reply the ledger
        owes (``outgoing.obligation_id``) is appended with its ledger row's ``delivered``,
        in one transaction (exactly once): the result says the outcome is ``recorded``; an
        append refused because the claim is not this gateway's is a failure, recorded too
        (the row is left to the sender that holds it)."""
        oid = outgoing.obligation_id
        try:
            cursor = self.outbox.append(outgoing.target, outgoing.text, outgoing.kind,
                                        outgoing.in_reply_to, oid)
        except Exception as exc:  # noqa: BLE001 - a failed append is a failed attempt
            log.warning("outbox append failed platform=%s error=%s", self.platform, exc)
            return SendResult(success=False, error=f"{type(exc).__name__}: {exc}")
        if cursor is None:
            log.info("outbox append refused platform=%s obligation=%s reason=not_claimed",
                     self.platform, oid)
            return SendResult(success=False, error="the ledger row is not claimed by this "
                              "gateway", recorded=True)
        return SendResult(success=True, message_id=str(cursor), recorded=oid is not None)
