"""``DiscordAdapter``: the gateway's Discord platform (the Gateway in, REST out, "typing…").

Discord speaks to bots over a websocket (the Gateway) and takes their messages over REST;
hikari speaks both, on asyncio. It runs in a bridge process of its own
(:mod:`~hermes_actors.adapters.discord.bridge`, driven through
:class:`~hermes_actors.adapters.discord.client.BridgeClient`), not on a thread of this
gevent process: measured, and decided, in ``docs/architecture.md`` ("The Discord bridge").

In: the Gateway pushes ``MESSAGE_CREATE``; the bridge hands the events over one at a time,
and the next only once this side answered. Each message is mapped
(:func:`~.mapping.message_event`; a guild channel the adapter has not seen is looked up
first, to know whether it is a thread) and handed to ``submit`` (``Gateway.submit``), which
returns once it is in the durable inbox: only then is the event answered as taken. A
``MESSAGE_CREATE`` that comes twice (a resumed session replaying it, a test's fake) has the
first one's ingress key (``discord``, channel, thread, message id), so the gateway
recognises it and does not process it again. A store that cannot take the message now, or
a lookup that failed, is retried with a growing pause (1 s to 30 s) while the event waits
(and the ones after it, in order); a message the store refuses for what it carries is
logged and dropped. What Discord cannot do is send an event again to a *new* session: a
message that reached a process that died before it was durable, or that was sent while no
node held a connection, is not seen (see ``docs/spec.md``).

The Gateway is a pull adapter's kind of ingress: one connection per bot, so on a cluster it
runs only on the node holding the adapter lease ``discord:<bot id>``
(``runtime/pull_adapters``): ``start_polling`` opens it, ``stop_polling`` closes it and
waits for the messages it had received (up to ``wait`` seconds; then the bridge is killed,
which ends the connection for certain); past the lease's local deadline nothing is
submitted. Off a cluster the process opens it after ``Gateway.start()``.

Out: a plain :class:`~hermes_actors.adapters.base.PlatformAdapter` whose ``send`` the
delivery ledger calls: ``POST /channels/<id>/messages`` (a thread's reply goes to the
thread's channel), split at :data:`~.mapping.MESSAGE_LIMIT`, in order. A rate limit comes
back as ``SendResult.retry_after`` with the parts not sent yet (hikari is told to wait for
none itself), so the delivery waits it out within its attempts; a refusal for good (403
Missing Access or Permissions, 404 Unknown Channel, 400, a revoked token's 401) is
``SendResult.permanent``. "typing…" (``POST /channels/<id>/typing``) is renewed every
8 s while a turn runs (Discord shows it for about 10 s).

Lifecycle: ``connect()`` starts the bridge and asks ``GET /users/@me`` (a rejected token is a
:class:`~hermes_actors.errors.ConfigError`, exit 2 before anything starts; the bot's id is
learned, whose messages are ignored); ``close()`` at the end. A bridge that exits while the
gateway runs is started again (1 s to 30 s apart; sends wait as for a disconnected
platform), and its Gateway connection with it when this node was taking messages.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from cachetools import LRUCache

from hermes_actors._green import spawn
from hermes_actors.adapters.base import SendResult, Typing
from hermes_actors.adapters.discord.client import BridgeClient, BridgeError, DiscordError
from hermes_actors.adapters.discord.mapping import (
    Channel,
    ChannelDirectory,
    channel_of,
    message_event,
    split_message,
)
from hermes_actors.adapters.indicator import TypingIndicator
from hermes_actors.config import DiscordConfig
from hermes_actors.errors import ConfigError, HermesActorsError, StoreError, StoreRejectedError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource

__all__ = ["INTENTS", "DiscordAdapter", "check_token"]

log = logging.getLogger("hermes_actors.discord")

#: Gateway intents: GUILDS (channels and threads), GUILD_MESSAGES, DIRECT_MESSAGES and
#: MESSAGE_CONTENT (privileged: switched on in the Developer Portal, else guild messages
#: that do not mention the bot arrive without their text).
INTENTS = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
#: Seconds between two "typing" calls (Discord shows one for about 10 s).
TYPING_INTERVAL = 8.0
#: Pauses after consecutive failures to take a message, or to restart the bridge, in
#: seconds (the last repeats).
BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
#: Seconds ``stop_polling`` waits for the Gateway to close and hand over what it had, by
#: default.
STOP_WAIT = 10.0
#: Dropped channels remembered, so each is logged once.
DROPPED_CHANNELS = 10_000
#: Refusals no retry changes: the row is abandoned at once.
_PERMANENT_STATUS = frozenset({400, 401, 403, 404})
#: The Gateway's close codes that need the operator (as Discord documents them).
_CLOSE_HINTS = {
    4004: "Discord rejected the bot token: check DISCORD_BOT_TOKEN",
    4013: "invalid intents",
    4014: "Discord refused the intents: switch on the Message Content Intent (Developer "
          "Portal, your application, Bot, Privileged Gateway Intents)",
}


def check_token(token: str | None, variable: str) -> str:
    """The bot token from ``$variable``, or a :class:`ConfigError` saying what is wrong (the
    token itself is never shown)."""
    if token is None or not token.strip():
        raise ConfigError(
            f"platforms lists discord, but the environment variable {variable} (the "
            f"discord.token_env setting) is not set: put the bot's token there (Developer "
            f"Portal, your application, Bot, Reset Token)")
    token = token.strip()
    if token.startswith("Bot "):
        token = token[4:].strip()
    if any(c.isspace() for c in token) or token.count(".") != 2 or not all(token.split(".")):
        raise ConfigError(f"the Discord bot token in {variable} is malformed (expected three "
                          "parts separated by dots, as the Developer Portal gives it)")
    return token


def bot_id_of(token: str) -> str | None:
    """The bot's user id a token names (its first part is the id in base64), or ``None``."""
    head = token.split(".", 1)[0]
    try:
        text = base64.b64decode(head + "=" * (-len(head) % 4), validate=False).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return text if text.isdigit() else None


class _Stop(Exception):
    """The message cannot be taken here any more (stopped, past the lease's deadline)."""


class _Polling:
    """One period of taking messages (``start_polling`` to ``stop_polling``); what the
    cluster's :class:`~hermes_actors.runtime.pull_adapters.PullAdapters` sees as the
    adapter's ``poller``."""

    def __init__(self, submit: Callable[[MessageEvent], Any],
                 checkpoint: Callable[[str], None],
                 time_left: Callable[[], float] | None) -> None:
        self.submit = submit
        self.checkpoint = checkpoint
        self.time_left = time_left
        #: Set by ``stop_polling`` once the Gateway closed (or gave up): events are dropped.
        self.halted = threading.Event()
        #: Messages submitted so far.
        self.submitted = 0

    @property
    def stopped(self) -> bool:
        return self.halted.is_set()


class DiscordAdapter:
    """The ``discord`` platform of one bot."""

    def __init__(self, settings: DiscordConfig, token: str, *,
                 typing_interval: float = TYPING_INTERVAL,
                 bridge_factory: Callable[..., Any] | None = None,
                 log_level: str | None = None,
                 wait: Callable[[threading.Event, float], bool] | None = None) -> None:
        #: Always ``discord``.
        self.platform = "discord"
        #: True while the bridge runs (from a successful ``connect()`` until ``close()``).
        self.connected = False
        #: The bot's user id (``GET /users/@me``), whose messages are ignored.
        self.bot_user_id: str | None = bot_id_of(token)
        #: The name of this bot's lease on a cluster node (one node holds its Gateway).
        self.lease_name = "discord:" + (self.bot_user_id or
                                        hashlib.sha256(token.encode()).hexdigest()[:16])
        self._settings = settings
        self._variable = settings.token_env
        self._hello = {"token": token, "api_base_url": settings.api_base_url,
                       "gateway_url": settings.gateway_url, "intents": INTENTS,
                       "log_level": log_level or _log_level()}
        self._bridge_factory = bridge_factory or BridgeClient
        self._typing_interval = typing_interval
        self._wait = wait or (lambda event, seconds: event.wait(seconds))
        self._allowed = frozenset(settings.allowed_channels)
        self._directory = ChannelDirectory()
        self._dropped: LRUCache[str, bool] = LRUCache(maxsize=DROPPED_CHANNELS)
        self._bridge: Any = None
        self._polling: _Polling | None = None
        self._closed = threading.Event()
        self._empty_hint = False

    @property
    def poller(self) -> _Polling | None:
        """The current period of taking messages, once started."""
        return self._polling

    # -- lifecycle --------------------------------------------------------------------------

    def connect(self) -> dict[str, Any]:
        """Start the bridge and ask ``GET /users/@me``: check the token and learn the bot.
        A rejected token raises :class:`ConfigError`; a bridge that cannot start or an
        unreachable API :class:`DiscordError`."""
        bridge = self._new_bridge()
        try:
            me = bridge.request("me")
        except DiscordError as exc:
            bridge.close()
            if exc.status == 401:
                raise ConfigError(
                    f"Discord rejected the bot token in {self._variable} (401 Unauthorized): "
                    "check it in the Developer Portal (your application, Bot, Reset Token)"
                ) from None
            raise
        self._bridge = bridge
        self.bot_user_id = str(me["id"])
        self.lease_name = f"discord:{self.bot_user_id}"
        self.connected = True
        log.info("event=discord_connected bot=%s id=%s", me.get("username"), self.bot_user_id)
        return dict(me)

    def _new_bridge(self) -> Any:
        bridge = self._bridge_factory(self._hello, on_event=self._on_event,
                                      on_gateway=self._on_gateway, on_exit=self._on_exit)
        bridge.start()
        return bridge

    def start_polling(self, submit: Callable[[MessageEvent], Any], *,
                      checkpoint: Callable[[str], None] = lambda name: None,
                      time_left: Callable[[], float] | None = None) -> _Polling:
        """Open the Gateway and hand each message to ``submit`` (``Gateway.submit``);
        ``time_left``: the seconds it may still run (a cluster node's lease). Once stopped
        it may be started again (a node that gains the lease again)."""
        if self._polling is not None and not self._polling.stopped:
            raise RuntimeError("the Discord Gateway is already open")
        polling = self._polling = _Polling(submit, checkpoint, time_left)
        self._open()
        log.info("event=discord_polling allowed_channels=%s",
                 len(self._allowed) or "all")
        return polling

    def _open(self) -> None:
        try:
            self._bridge.request("open", timeout=30)
        except DiscordError as exc:  # the bridge is gone: it opens again once restarted
            log.warning("event=discord_gateway state=not_opened error=%s", exc)

    def stop_polling(self, wait: float | None = None) -> None:
        """Close the Gateway; the messages it had received are still taken, for up to
        ``wait`` seconds (default 10), after which the bridge is killed (its connection
        with it: certain) and started again without one."""
        polling = self._polling
        if polling is None or polling.stopped:
            return
        bridge = self._bridge
        timeout = STOP_WAIT if wait is None else wait
        try:
            if bridge is not None:
                counts = bridge.request("close", timeout=max(timeout, 0.1))
                log.info("event=discord_polling_stopped submitted=%d dropped=%s",
                         polling.submitted, (counts or {}).get("dropped", 0))
        except BridgeError:  # gone already, its connection with it
            log.info("event=discord_polling_stopped submitted=%d", polling.submitted)
        except DiscordError as exc:
            log.warning("event=discord_polling_stopped submitted=%d note=the bridge did not "
                        "close its Gateway in time (%s): ending it", polling.submitted, exc)
            polling.halted.set()
            if bridge is not None:
                bridge.kill()  # (restarted by _on_exit, without a Gateway)
        finally:
            polling.halted.set()

    def close(self) -> None:
        """Stop taking messages and sending; end the bridge."""
        self.stop_polling(wait=2.0)
        self._closed.set()
        self.connected = False
        bridge, self._bridge = self._bridge, None
        if bridge is not None:
            bridge.close()

    def _on_exit(self, code: int | None) -> None:
        """The bridge ended on its own: start another one (and its Gateway when taking)."""
        if self._closed.is_set():
            return
        self.connected = False
        log.warning("event=discord_bridge_exited code=%s note=starting it again", code)
        spawn(lambda: self._restart(quick=code == 3), "discord-bridge-restart")

    def _restart(self, *, quick: bool) -> None:
        failures = 0 if not quick else -1
        while not self._closed.is_set():
            if failures >= 0 and self._wait(self._closed,
                                            BACKOFF[min(failures, len(BACKOFF) - 1)]):
                return
            failures += 1
            try:
                bridge = self._new_bridge()
            except DiscordError as exc:
                log.warning("event=discord_bridge_restart_failed error=%s", exc)
                continue
            if self._closed.is_set():
                bridge.close()
                return
            self._bridge = bridge
            self.connected = True
            log.info("event=discord_bridge_restarted")
            polling = self._polling
            if polling is not None and not polling.stopped:
                self._open()
            return

    def _on_gateway(self, message: dict[str, Any]) -> None:
        state = message.get("state")
        if state == "ready":
            log.info("event=discord_gateway state=ready")
            return
        code = message.get("code")
        hint = _CLOSE_HINTS.get(int(code)) if isinstance(code, int) else None
        log.warning("event=discord_gateway state=%s code=%s error=%s retry_in=%s%s", state,
                    code, message.get("error"), message.get("retry_in"),
                    f" note={hint}" if hint else "")

    # -- ingress ----------------------------------------------------------------------------

    def _on_event(self, message: dict[str, Any]) -> None:
        """An event from the bridge (on its reader): taken on a worker of its own, so the
        reader goes on handing answers to senders meanwhile."""
        bridge = self._bridge
        spawn(lambda: self._take(message, bridge), "discord-take")

    def _take(self, message: dict[str, Any], bridge: Any) -> None:
        seq, name, data = message.get("e"), message.get("name"), message.get("d")
        kept = True
        try:
            if name != "MESSAGE_CREATE":
                self._directory.learn(str(name), data)
                return
            polling = self._polling
            if polling is None or polling.stopped:
                kept = False
                log.info("event=discord_dropped message_id=%s reason=not_taking_messages",
                         (data or {}).get("id"))
                return
            kept = self._take_message(data if isinstance(data, dict) else {}, polling)
        finally:
            if bridge is not None:
                bridge.taken(seq, dropped=not kept)

    def _take_message(self, data: dict[str, Any], polling: _Polling) -> bool:
        """Map and submit one ``MESSAGE_CREATE``, retrying what may pass later; whether it
        was kept (or was nothing to keep)."""
        failures = 0
        while True:
            try:
                return self._submit(data, polling)
            except _Stop:
                log.info("event=discord_dropped message_id=%s reason=stopped",
                         data.get("id"))
                return False
            except Exception as exc:  # noqa: BLE001 - the message waits, the loop retries
                pause = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                if isinstance(exc, (DiscordError, StoreError)):
                    log.warning("event=discord_take_failed message_id=%s error=%s "
                                "retry_in=%.0fs", data.get("id"), exc, pause)
                else:  # a bug: the message is not lost for it, it is tried again
                    log.exception("event=discord_take_failed message_id=%s retry_in=%.0fs",
                                  data.get("id"), pause)
                if self._wait(polling.halted, pause):
                    log.info("event=discord_dropped message_id=%s reason=stopped",
                             data.get("id"))
                    return False

    def _submit(self, data: dict[str, Any], polling: _Polling) -> bool:
        channel = None
        if data.get("guild_id") and data.get("channel_id"):
            channel = self._channel(str(data["channel_id"]))
        try:
            event = message_event(data, bot_user_id=self.bot_user_id, channel=channel)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            log.warning("event=discord_skipped message_id=%s error=%s", data.get("id"),
                        type(exc).__name__)
            return True
        if event is None:
            self._hint_if_empty(data)
            return True
        source = event.source
        if self._allowed and not ({source.chat_id, source.thread_id} & self._allowed):
            place = source.thread_id or source.chat_id or ""
            if place not in self._dropped:
                self._dropped[place] = True
                log.warning("event=discord_dropped channel_id=%s chat_type=%s "
                            "reason=not_in_allowed_channels", place, source.chat_type)
            return True
        polling.checkpoint("discord_message_received")
        if polling.stopped or (polling.time_left is not None and polling.time_left() <= 0):
            raise _Stop  # the lease may be another node's by now
        try:
            accepted = polling.submit(event)
        except StoreRejectedError as exc:  # every retry would be refused the same way
            log.error("event=discord_rejected message_id=%s channel_id=%s error=%s",
                      source.message_id, source.chat_id, exc)
            return True
        except StoreError:
            raise  # not durable: retried after a pause
        except HermesActorsError:
            raise _Stop from None  # the gateway stopped taking messages
        polling.submitted += 1
        if accepted != event.event_id:
            log.info("event=discord_duplicate message_id=%s", source.message_id)
        return True

    def _channel(self, channel_id: str) -> Channel | None:
        """A guild channel: from the directory, else ``GET /channels/<id>`` (remembered;
        one the bot may not read counts as a plain channel)."""
        known = self._directory.get(channel_id)
        if known is not None:
            return known
        try:
            found = channel_of(self._bridge.request("channel", channel=channel_id) or {})
        except DiscordError as exc:
            if exc.kind != "http" or exc.status not in (403, 404):
                raise
            found = None
        channel = found or Channel(channel_id, 0)
        self._directory.add(channel)
        return channel

    def _hint_if_empty(self, data: dict[str, Any]) -> None:
        if (not self._empty_hint and data.get("guild_id") and not data.get("content")
                and not data.get("attachments") and not data.get("embeds")
                and not data.get("sticker_items")):
            self._empty_hint = True
            log.warning("event=discord_empty_message message_id=%s note=guild messages arrive "
                        "without text unless the Message Content Intent is on (Developer "
                        "Portal, Bot, Privileged Gateway Intents)", data.get("id"))

    # -- delivery ---------------------------------------------------------------------------

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Send ``text`` to the channel (a thread's reply to the thread), split at
        Discord's limit, in order."""
        channel = target.thread_id or target.chat_id
        if channel is None:
            return SendResult(False, error="no channel to send to")
        bridge = self._bridge
        if bridge is None:
            return SendResult(False, error="the Discord bridge is not running")
        parts = split_message(text)
        last: Any = None
        for index, part in enumerate(parts):
            try:
                last = bridge.request("send", channel=channel, content=part)
            except DiscordError as exc:
                # The parts already sent stay sent: a retry sends only the rest.
                return SendResult(
                    False, error=str(exc), retry_after=exc.retry_after,
                    unsent="\n\n".join(parts[index:]) if index else None,
                    permanent=exc.kind == "http" and exc.status in _PERMANENT_STATUS)
        return SendResult(True, message_id=str((last or {}).get("id") or "") or None)

    def start_typing(self, target: SessionSource) -> Typing:
        """Show "typing…" in the channel (or thread) until the returned indicator stops."""
        return TypingIndicator(lambda: self._typing(target), self._typing_interval,
                               wait=self._wait, name="discord-typing").start()

    def _typing(self, target: SessionSource) -> bool:
        channel = target.thread_id or target.chat_id
        bridge = self._bridge
        if channel is None or bridge is None or not self.connected:
            return False
        try:
            bridge.request("typing", channel=channel, timeout=15)
        except DiscordError as exc:
            log.info("event=discord_typing_stopped channel_id=%s error=%s", channel, exc)
            return False
        return True


def _log_level() -> str:
    import os

    return (os.environ.get("HERMES_LOG_LEVEL") or "info").strip().lower()
