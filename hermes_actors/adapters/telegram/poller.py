"""``UpdatePoller``: ``getUpdates`` long polling with acknowledgement after durability.

Telegram forgets an update once ``getUpdates`` is called with an offset above its
``update_id``. The poller therefore advances its offset past an update only after
``submit(event)`` has returned, and ``Gateway.submit`` returns once the message is in the
durable inbox; the next poll carries that offset and so acknowledges exactly what is safe.
A ``kill -9`` anywhere loses nothing: an update not yet acknowledged comes again after the
restart, and one the inbox already holds is recognised by its ingress key (platform, chat,
topic and ``message_id``) and not answered twice. The offset itself need not be stored:
after a restart the first poll (no offset) returns every unacknowledged update.

Updates that are not messages for the agent, and chats outside ``allowed_chats``, are
acknowledged and dropped; a dropped chat is logged once (a bounded memory of chats, so a
public bot's strangers cannot grow it). A failed poll, a store that cannot take the
message, or any other failure is retried with a growing pause (1 s to 30 s) without
acknowledging anything; a gateway that stopped accepting ends the loop. A message the store
refuses for what it carries (:class:`StoreRejectedError`) would be refused at every retry
and hold up every later update: it is logged with its ``update_id`` and acknowledged.

On a cluster node the poller runs only while the node holds the adapter's lease
(``runtime/pull_adapters``) and is given ``time_left``, the seconds until the lease's local
deadline: each long poll is shortened to end half a second before it at least (with less
than 1.5 s left, it waits for a renewal instead of polling), nothing is submitted once the
deadline has passed, and the loop ends there; under gevent the host also cuts a poll in
progress at the deadline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from cachetools import LRUCache

from hermes_actors._green import gevent_threading_patched
from hermes_actors.adapters.backoff import pause_after
from hermes_actors.adapters.telegram.client import BotClient, TelegramError
from hermes_actors.adapters.telegram.mapping import message_event
from hermes_actors.errors import HermesActorsError, StoreError, StoreRejectedError
from hermes_actors.model.events import MessageEvent

__all__ = ["UpdatePoller"]

log = logging.getLogger("hermes_actors.telegram")

#: Seconds a long poll ends before the lease's deadline, at least (its round trip).
DEADLINE_MARGIN = 0.5
#: Dropped chats remembered, so each is logged once.
DROPPED_CHATS = 10_000


class _Stop(Exception):
    """The gateway no longer accepts messages: polling ends."""


class UpdatePoller:
    """Polls one bot's updates and submits its messages.

    ``submit(event)`` must return only once the event is durable (``Gateway.submit``).
    ``checkpoint(name)`` is called at named points (the process passes its crash points:
    ``telegram_update_received`` once a poll returned updates, before any is submitted).
    ``wait(stopped, seconds) -> bool`` pauses after a failure (tests step it).
    ``time_left()``, when given, is how many seconds the poller may still run (the local
    deadline of the adapter's lease on a cluster node); at 0 the loop ends.
    """

    def __init__(self, client: BotClient, submit: Callable[[MessageEvent], Any], *,
                 poll_timeout: int = 30, allowed_chats: Iterable[str] = (),
                 bot_username: str | None = None,
                 checkpoint: Callable[[str], None] = lambda name: None,
                 wait: Callable[[threading.Event, float], bool] | None = None,
                 time_left: Callable[[], float] | None = None) -> None:
        self._client = client
        self._submit = submit
        self._timeout = poll_timeout
        self._allowed = frozenset(str(c) for c in allowed_chats)
        self._bot_username = bot_username
        self._checkpoint = checkpoint
        self._wait = wait or (lambda stopped, seconds: stopped.wait(seconds))
        self._time_left = time_left
        self._stopped = threading.Event()
        self._dropped: LRUCache[str, bool] = LRUCache(maxsize=DROPPED_CHATS)
        self._greenlet: Any = None
        self._in_poll = False
        #: The offset the next poll sends: every update below it is acknowledged.
        self.offset: int | None = None
        #: Messages submitted so far.
        self.submitted = 0
        #: Set once the loop has ended.
        self.finished = threading.Event()

    def start(self) -> UpdatePoller:
        """Run :meth:`run` in a greenlet (under gevent) or a daemon thread; returns ``self``."""
        if gevent_threading_patched():
            import gevent

            self._greenlet = gevent.spawn(self.run)
        else:
            threading.Thread(target=self.run, name="telegram-poller", daemon=True).start()
        return self

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called or the loop ended."""
        return self._stopped.is_set() or self.finished.is_set()

    def stop(self, wait: float | None = None) -> None:
        """End polling. Under gevent a poll in progress is cut at once (nothing it would
        return is acknowledged), and a submit in progress finishes first; a thread ends
        after its poll returns (waited for up to ``wait`` seconds, when given)."""
        self._stopped.set()
        if self._greenlet is None:
            if wait is not None:
                self.finished.wait(wait)
            return
        # Greenlets do not preempt each other: the poller is either waiting for Telegram
        # (cut it) or inside a submit (it checks the flag once that returns).
        if self._in_poll:
            self._greenlet.kill(block=True, timeout=10)
        else:
            self.finished.wait(10)

    def run(self) -> None:
        """Poll until stopped or until the gateway stops accepting messages."""
        failures = 0
        try:
            while not self._stopped.is_set():
                try:
                    self.poll_once()
                    failures = 0
                except _Stop:
                    return
                except Exception as exc:  # noqa: BLE001 - the loop must outlive any failure
                    pause = pause_after(failures)
                    failures += 1
                    if isinstance(exc, (TelegramError, StoreError)):
                        log.warning("event=telegram_poll_failed error=%s retry_in=%.0fs",
                                    exc, pause)
                    else:  # a bug: nothing was acknowledged, the update comes again
                        log.exception("event=telegram_poll_failed retry_in=%.0fs", pause)
                    if self._wait(self._stopped, pause):
                        return
        finally:
            self.finished.set()

    def poll_once(self) -> int:
        """One ``getUpdates``; submits its messages in order and advances the offset past
        each once it is durable. Returns how many updates came."""
        if self._stopped.is_set():
            raise _Stop
        timeout = self._timeout
        if self._time_left is not None:
            left = self._time_left()
            if left <= 0:
                log.info("event=telegram_polling_stopped reason=lease_deadline")
                raise _Stop
            # a long poll (whole seconds) ends half a second before the deadline at least
            timeout = min(timeout, int(left - DEADLINE_MARGIN))
            if timeout < 1:  # renewals are late: wait for one, or for the deadline
                self._stopped.wait(min(DEADLINE_MARGIN, left))
                return 0
        self._in_poll = True
        try:
            updates = self._client.get_updates(self.offset, timeout)
        finally:
            self._in_poll = False
        if updates:
            self._checkpoint("telegram_update_received")
        for update in updates:
            if self._stopped.is_set():
                raise _Stop
            if self._time_left is not None and self._time_left() <= 0:
                # the lease may be another node's by now: it takes these updates again
                log.info("event=telegram_polling_stopped reason=lease_deadline")
                raise _Stop
            self._take(update)
            self.offset = update.update_id + 1
        return len(updates)

    def _take(self, update: Any) -> None:
        message = update.message
        event = None
        if message is not None:
            try:
                event = message_event(message, update_id=update.update_id,
                                      bot_username=self._bot_username)
            except (TypeError, ValueError, AttributeError) as exc:  # a message we cannot read
                log.warning("event=telegram_skipped update_id=%s error=%s", update.update_id,
                            type(exc).__name__)
                return
        if event is None:
            log.debug("event=telegram_skipped update_id=%s", update.update_id)
            return
        chat_id = event.source.chat_id or ""
        if self._allowed and chat_id not in self._allowed:
            if chat_id not in self._dropped:
                self._dropped[chat_id] = True
                log.warning("event=telegram_dropped chat_id=%s chat_type=%s "
                            "reason=not_in_allowed_chats", chat_id, event.source.chat_type)
            return
        try:
            self._submit(event)
        except StoreRejectedError as exc:  # every retry would be refused the same way
            log.error("event=telegram_rejected update_id=%s chat_id=%s error=%s",
                      update.update_id, chat_id, exc)
            return
        except StoreError:
            raise  # not durable: not acknowledged, retried after a pause
        except HermesActorsError:
            raise _Stop from None  # the gateway stopped: leave the update to the next run
        self.submitted += 1
