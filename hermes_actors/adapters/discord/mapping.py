"""Discord to gateway and back, as pure functions: a Gateway ``MESSAGE_CREATE`` as a
:class:`MessageEvent`, the channels it may come from, and a long reply as messages Discord
accepts.

Kept apart from the I/O so every rule is tested on plain data (the JSON the Gateway sends):

* only a person's messages are messages for the agent: types ``DEFAULT`` (0) and
  ``REPLY`` (19); joins, pins, thread notices and the other system types are not;
* the bot's own messages (its user id, from ``GET /users/@me``), other bots' (``author.bot``:
  two bots answering each other would never stop) and webhooks' (``webhook_id``) are
  ignored;
* a message without ``guild_id`` is a DM: ``dm``, ``chat_id`` = the DM channel; a guild
  channel is a ``group``, one session per member (``group_sessions_per_user``); a thread
  (channel types 10, 11, 12) is a ``thread`` session shared by everyone in it:
  ``chat_id`` = its parent channel, ``thread_id`` = the thread, and the reply goes to the
  thread (a thread is a channel of its own on Discord). ``MESSAGE_CREATE`` does not say
  whether its channel is a thread: :class:`ChannelDirectory` learns it from the Gateway's
  channel and thread events (``GUILD_CREATE``, ``THREAD_CREATE``, ...), and the adapter
  asks ``GET /channels/<id>`` for a channel it has not seen;
* the message's ``id`` (a snowflake) is the ``message_id``, so a ``MESSAGE_CREATE``
  delivered twice has the first one's ingress key and the gateway's duplicate check
  applies;
* the text is ``content`` as sent: mentions stay raw (``<@123>``, ``<#456>``), which the
  agent needs to mention people back (and which the prompt never redacts on Discord);
  attachments become ``PHOTO`` (all images), ``VOICE`` (a voice message) or ``DOCUMENT``
  with their URLs as the media; a message with neither text nor attachments (a sticker, an
  embed, or content the bot may not read without the Message Content intent) is nothing;
* ``scope_id`` is the guild (informative: channel ids are unique across Discord, so the
  key does not need it).

:func:`split_message` cuts at :data:`MESSAGE_LIMIT` (2,000 characters, Discord's limit for
a message's ``content``), the same way as for Telegram and Slack.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from hermes_actors.adapters.split import split_message as _split
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.source import SessionSource

__all__ = ["MESSAGE_LIMIT", "THREAD_TYPES", "Channel", "ChannelDirectory", "channel_of",
           "message_event", "split_message"]

#: The most text one Discord message carries, in characters.
MESSAGE_LIMIT = 2000
#: Message types that are a person's message: ``DEFAULT``, ``REPLY``.
USER_MESSAGE_TYPES = frozenset({0, 19})
#: Channel types that are threads: announcement, public and private threads.
THREAD_TYPES = frozenset({10, 11, 12})
#: Channels remembered (a bot in many guilds learns many; forgetting one costs a lookup).
DIRECTORY_SIZE = 50_000
#: The message flag of a voice message.
_VOICE_MESSAGE_FLAG = 1 << 13


@dataclass(frozen=True)
class Channel:
    """What the adapter needs to know of a guild channel."""

    id: str
    type: int
    parent_id: str | None = None
    name: str | None = None

    @property
    def is_thread(self) -> bool:
        return self.type in THREAD_TYPES


def channel_of(data: Mapping[str, Any]) -> Channel | None:
    """The :class:`Channel` of a channel object (a Gateway event's or ``GET
    /channels/<id>``'s), or ``None`` when it has no id or type."""
    channel_id, kind = data.get("id"), data.get("type")
    if channel_id is None or not isinstance(kind, int) or isinstance(kind, bool):
        return None
    parent = data.get("parent_id")
    name = data.get("name")
    return Channel(str(channel_id), kind, str(parent) if parent else None,
                   str(name) if isinstance(name, str) and name else None)


class ChannelDirectory:
    """The guild channels seen so far (bounded): which are threads, and of which channel.

    :meth:`learn` takes the Gateway's events that describe channels: ``GUILD_CREATE`` (its
    ``channels`` and active ``threads``), ``CHANNEL_CREATE``/``UPDATE``,
    ``THREAD_CREATE``/``UPDATE``, ``THREAD_LIST_SYNC`` (its ``threads``), and the deletions.
    """

    def __init__(self, size: int = DIRECTORY_SIZE) -> None:
        self._channels: LRUCache[str, Channel] = LRUCache(maxsize=size)

    def __len__(self) -> int:
        return len(self._channels)

    def get(self, channel_id: str) -> Channel | None:
        return self._channels.get(channel_id)

    def add(self, channel: Channel) -> None:
        self._channels[channel.id] = channel

    def learn(self, name: str, data: Any) -> None:
        """Update from one Gateway event (others are ignored)."""
        if not isinstance(data, Mapping):
            return
        if name in ("CHANNEL_DELETE", "THREAD_DELETE"):
            self._channels.pop(str(data.get("id")), None)
            return
        if name in ("CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE", "THREAD_UPDATE"):
            self._add_all([data])
        elif name == "GUILD_CREATE":
            self._add_all(data.get("channels"))
            self._add_all(data.get("threads"))
        elif name == "THREAD_LIST_SYNC":
            self._add_all(data.get("threads"))

    def _add_all(self, items: Iterable[Any] | None) -> None:
        for item in items or ():
            if isinstance(item, Mapping) and (channel := channel_of(item)) is not None:
                self.add(channel)


def message_event(payload: Mapping[str, Any], *, bot_user_id: str | None = None,
                  channel: Channel | None = None) -> MessageEvent | None:
    """The :class:`MessageEvent` of one ``MESSAGE_CREATE`` payload, or ``None`` when it is
    nothing the agent answers (a system message, a bot's or this bot's own message, a
    webhook's, an empty message). ``channel`` is the message's guild channel when known (a
    thread makes a ``thread`` session). Raises ``TypeError``/``ValueError`` on a payload of
    the wrong shape."""
    if payload.get("type", 0) not in USER_MESSAGE_TYPES or payload.get("webhook_id"):
        return None
    author = payload.get("author")
    if not isinstance(author, Mapping):
        raise ValueError("a message without an author")
    user_id = str(author.get("id") or "")
    if not user_id or author.get("bot") or (bot_user_id and user_id == bot_user_id):
        return None
    message_id, channel_id = payload.get("id"), payload.get("channel_id")
    if not message_id or not channel_id:
        raise ValueError("a message without an id or a channel_id")
    message_id, channel_id = str(message_id), str(channel_id)
    guild_id = payload.get("guild_id")
    thread_id = chat_name = None
    chat_id = channel_id
    if not guild_id:
        chat_type = "dm"
    elif channel is not None and channel.is_thread and channel.parent_id:
        chat_type, chat_id, thread_id = "thread", channel.parent_id, channel_id
        chat_name = channel.name
    else:
        chat_type = "group"
        chat_name = channel.name if channel is not None else None
    text = payload.get("content") or ""
    if not isinstance(text, str):
        raise TypeError("a message whose content is not text")
    kind, media = _attachments(payload.get("attachments"), payload.get("flags"))
    if not text.strip() and not media:
        return None
    source = SessionSource(
        "discord",
        chat_id=chat_id,
        chat_type=chat_type,
        chat_name=chat_name,
        user_id=user_id,
        user_name=_display_name(author, payload.get("member")),
        thread_id=thread_id,
        scope_id=str(guild_id) if guild_id else None,
        message_id=message_id,
    )
    metadata = {"discord": {"message_id": message_id, "channel_id": channel_id,
                            "guild_id": str(guild_id) if guild_id else None}}
    return MessageEvent(source=source, text=text, message_type=kind, media_urls=media,
                        metadata=metadata)


def _display_name(author: Mapping[str, Any], member: Any) -> str | None:
    """The member's nickname in the guild, else the global display name, else the
    username."""
    nick = member.get("nick") if isinstance(member, Mapping) else None
    for name in (nick, author.get("global_name"), author.get("username")):
        if isinstance(name, str) and name.strip():
            return name
    return None


def _attachments(attachments: Any, flags: Any) -> tuple[MessageType, tuple[str, ...]]:
    if not isinstance(attachments, list):
        return MessageType.TEXT, ()
    found = [a for a in attachments if isinstance(a, Mapping) and a.get("url")]
    if not found:
        return MessageType.TEXT, ()
    urls = tuple(str(a["url"]) for a in found)
    if isinstance(flags, int) and flags & _VOICE_MESSAGE_FLAG:
        return MessageType.VOICE, urls
    if all(str(a.get("content_type") or "").startswith("image/") for a in found):
        return MessageType.PHOTO, urls
    return MessageType.DOCUMENT, urls


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` as messages of at most ``limit`` characters, in order, cut at a paragraph
    break, else a line break, else a space, else hard (as for Telegram and Slack)."""
    return _split(text, limit)
