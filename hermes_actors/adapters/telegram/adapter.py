"""``TelegramAdapter``: the gateway's Telegram platform (ingress, delivery, "typing…").

The adapter is a plain :class:`~hermes_actors.adapters.base.PlatformAdapter` whose ``send``
the delivery ledger calls like any other's: it splits the text at Telegram's limit and sends
the parts in order. Failures come back as data the ledger acts on, never as exceptions: a
``429`` carries ``retry_after`` (and the part not yet sent) so the delivery waits it out
within its attempts; a ``403`` (the user blocked the bot, the bot left the group) is a
refusal for good (``SendResult.permanent``: the row is abandoned, never sent again).
Ingress is an :class:`~hermes_actors.adapters.telegram.poller.UpdatePoller`
started after the gateway, so nothing is submitted before recovery opened it.

Lifecycle: ``connect()`` checks the token with ``getMe`` (a rejected one is a
:class:`~hermes_actors.errors.ConfigError`, so ``run`` exits 2 before it starts anything);
``start_polling(submit)`` after ``Gateway.start()``; ``stop_polling()`` when the process
stops accepting; ``close()`` after ``Gateway.stop()`` (replies of the drain still go out).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hermes_actors.adapters.base import SendResult, Typing
from hermes_actors.adapters.telegram.client import BotClient, TelegramError
from hermes_actors.adapters.telegram.indicator import TYPING_INTERVAL, TypingIndicator
from hermes_actors.adapters.telegram.mapping import split_message
from hermes_actors.adapters.telegram.poller import UpdatePoller
from hermes_actors.config import TelegramConfig
from hermes_actors.errors import ConfigError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource

__all__ = ["TelegramAdapter", "check_token"]

#: Telegram's answer when the bot may not write to the chat any more (blocked, removed).
FORBIDDEN = 403

log = logging.getLogger("hermes_actors.telegram")


def check_token(token: str | None, variable: str) -> str:
    """The token from ``$variable``, or a :class:`ConfigError` saying what is wrong (the
    token itself is never shown)."""
    if token is None or not token.strip():
        raise ConfigError(
            f"platforms lists telegram, but the environment variable {variable} (the "
            f"telegram.token_env setting) is not set: put the bot token from @BotFather there"
        )
    token = token.strip()
    bot_id, colon, secret = token.partition(":")
    if not (colon and bot_id.isdigit() and secret) or any(c.isspace() for c in token):
        raise ConfigError(f"the Telegram bot token in {variable} is malformed "
                          "(expected <bot id>:<secret>, as @BotFather gives it)")
    return token


class TelegramAdapter:
    """The ``telegram`` platform of one bot."""

    def __init__(self, settings: TelegramConfig, token: str, *,
                 client: BotClient | None = None,
                 typing_interval: float = TYPING_INTERVAL) -> None:
        #: Always ``telegram``.
        self.platform = "telegram"
        #: True from a successful ``connect()`` until ``close()``.
        self.connected = False
        #: The bot's own user (``getMe``), once connected.
        self.bot: Any = None
        self._settings = settings
        self._variable = settings.token_env
        self._client = client or BotClient(token, settings.api_base_url)
        self._typing_interval = typing_interval
        self._poller: UpdatePoller | None = None
        #: The name of this bot's lease on a cluster node (one node pulls its updates).
        self.lease_name = f"telegram:{token.partition(':')[0]}"

    @property
    def client(self) -> BotClient:
        """The Bot API client."""
        return self._client

    @property
    def poller(self) -> UpdatePoller | None:
        """The running poller, once started."""
        return self._poller

    def connect(self) -> Any:
        """``getMe``: check the token and learn the bot's name. A rejected token raises
        :class:`ConfigError`; an unreachable server :class:`TelegramError`."""
        try:
            self.bot = self._client.get_me()
        except TelegramError as exc:
            if exc.rejected_token:
                raise ConfigError(
                    f"Telegram rejected the bot token in {self._variable} "
                    f"({exc.status} {exc.description or 'Unauthorized'}): check it with "
                    "@BotFather"
                ) from None
            raise
        self.connected = True
        log.info("event=telegram_connected bot=@%s id=%s", self.bot.username, self.bot.id)
        return self.bot

    def start_polling(self, submit: Callable[[MessageEvent], Any], *,
                      checkpoint: Callable[[str], None] = lambda name: None,
                      time_left: Callable[[], float] | None = None) -> UpdatePoller:
        """Start the long poll, handing each message to ``submit`` (``Gateway.submit``);
        ``time_left``: the seconds it may still run (a cluster node's lease). Once stopped
        it may be started again (a node that gains the lease again)."""
        if self._poller is not None and not self._poller.stopped:
            raise RuntimeError("the Telegram poller is already running")
        self._poller = UpdatePoller(
            self._client, submit, poll_timeout=self._settings.poll_timeout,
            allowed_chats=self._settings.allowed_chats,
            bot_username=getattr(self.bot, "username", None), checkpoint=checkpoint,
            time_left=time_left,
        ).start()
        log.info("event=telegram_polling timeout=%ss allowed_chats=%s",
                 self._settings.poll_timeout, len(self._settings.allowed_chats) or "all")
        return self._poller

    def stop_polling(self, wait: float | None = None) -> None:
        """Stop taking updates (what was not acknowledged comes again next start); a
        poller on a thread is waited for up to ``wait`` seconds (under gevent a poll in
        progress is cut at once)."""
        if self._poller is not None:
            self._poller.stop(wait)

    def close(self) -> None:
        """Stop polling and sending."""
        self.stop_polling()
        self.connected = False
        self._client.close()

    # -- delivery -----------------------------------------------------------------------------

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Send ``text`` to the chat (and topic), split at Telegram's limit, in order."""
        if target.chat_id is None:
            return SendResult(False, error="no chat id to send to")
        parts = split_message(text)
        last = None
        for index, part in enumerate(parts):
            try:
                last = self._client.send_message(target.chat_id, part, target.thread_id)
            except TelegramError as exc:
                # The parts already sent stay sent: a retry sends only the rest.
                return SendResult(False, error=str(exc), retry_after=exc.retry_after,
                                  unsent="\n\n".join(parts[index:]) if index else None,
                                  permanent=exc.status == FORBIDDEN)
        return SendResult(True, message_id=str(getattr(last, "message_id", "")) or None)

    def start_typing(self, target: SessionSource) -> Typing:
        """Show "typing…" in the chat (and topic) until the returned indicator stops."""
        return TypingIndicator(lambda: self._chat_action(target), self._typing_interval,
                               name="telegram-typing").start()

    def _chat_action(self, target: SessionSource) -> bool:
        if target.chat_id is None or not self.connected:
            return False
        try:
            self._client.send_chat_action(target.chat_id, target.thread_id)
        except TelegramError as exc:
            log.info("event=telegram_typing_stopped chat_id=%s error=%s", target.chat_id, exc)
            return False
        return True
