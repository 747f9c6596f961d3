"""Telegram to gateway and back, as pure functions: an update's message as a
:class:`MessageEvent`, and a long reply as messages Telegram accepts.

Kept apart from the I/O so every rule is tested on plain data (telebot's types built from
the JSON the Bot API sends):

* a private chat is a ``dm``; a group or supergroup is a ``group`` named by its title; a
  message in a forum topic (``is_topic_message`` with ``message_thread_id``) is a ``thread``
  with that ``thread_id``, shared by the topic's members (§3);
* the sender gives ``user_id``, ``user_name`` (full name, else ``@username``) and ``is_bot``;
  ``message_id`` makes the update's ingress key, so a redelivered update is recognised;
* photos (the largest size), voice notes and documents become ``PHOTO``, ``VOICE`` and
  ``DOCUMENT`` with their ``file_id`` as the media URL and the caption as the text; other
  content (stickers, service messages) is not a message for the agent;
* ``/new@ThisBot`` (how Telegram clients address a command in a group) is ``/new``, and
  ``/new@OtherBot`` is not a message for this bot (dropped: it would start a new session);
* a lone UTF-16 surrogate in a text, caption or name (a client that cut an emoji in half;
  JSON lets ``"\\ud83d"`` through) is U+FFFD, since no store can encode one.

:func:`split_message` cuts at Telegram's limit of 4,096 characters, counted as the Bot API
counts them (UTF-16 code units), preferring a paragraph break, then a line break, then a
space. telebot's ``util.smart_split`` was not used: it counts code points, never prefers a
paragraph over a line, and can leave a chunk of whitespace, which Telegram refuses.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from hermes_actors.adapters.split import split_message as _split
from hermes_actors.adapters.split import utf16_length
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.source import SessionSource

__all__ = ["MESSAGE_LIMIT", "message_event", "split_message", "utf16_length"]

#: The most text one Telegram message may carry, in UTF-16 code units.
MESSAGE_LIMIT = 4096
_Text = TypeVar("_Text", str, None)
#: A bot command addressed to a bot (``/cmd@name``, as Telegram's names are spelled), up to
#: the whitespace that ends the command word.
_ADDRESSED = re.compile(r"(/[A-Za-z0-9_]+)@([A-Za-z0-9_]+)(?=\s|$)")


def message_event(message: Any, *, update_id: int | None = None,
                  bot_username: str | None = None) -> MessageEvent | None:
    """The :class:`MessageEvent` of a ``telebot.types.Message``, or ``None`` when it is
    nothing the agent answers (a channel post, a sticker, a service message, a command
    addressed to another bot: ``/new@other_bot``)."""
    chat = message.chat
    thread_id = None
    if getattr(message, "is_topic_message", None) and message.message_thread_id:
        thread_id = str(message.message_thread_id)
    if chat.type == "private":
        chat_type, chat_name = "dm", None
    elif chat.type in ("group", "supergroup"):
        chat_type = "thread" if thread_id else "group"
        chat_name = _valid(chat.title)
    else:
        return None
    content = _content(message)
    if content is None:
        return None
    text, kind, media = content
    sender = message.from_user
    source = SessionSource(
        "telegram",
        chat_id=str(chat.id),
        chat_type=chat_type,
        chat_name=chat_name,
        user_id=str(sender.id) if sender is not None else None,
        user_name=_display_name(sender),
        thread_id=thread_id,
        message_id=str(message.message_id),
        is_bot=bool(getattr(sender, "is_bot", False)),
    )
    body = _strip_bot_mention(_valid(text), bot_username)
    if body is None:  # a command addressed to another bot of the group
        return None
    metadata = {"telegram": {"update_id": update_id}} if update_id is not None else {}
    return MessageEvent(source=source, text=body, message_type=kind, media_urls=media,
                        metadata=metadata)


def _content(message: Any) -> tuple[str, MessageType, tuple[str, ...]] | None:
    caption = message.caption or ""
    if message.photo:
        return caption, MessageType.PHOTO, (message.photo[-1].file_id,)
    if message.voice is not None:
        return caption, MessageType.VOICE, (message.voice.file_id,)
    if message.document is not None:
        return caption, MessageType.DOCUMENT, (message.document.file_id,)
    if message.text:
        return message.text, MessageType.TEXT, ()
    return None


def _display_name(user: Any) -> str | None:
    if user is None:
        return None
    name = " ".join(part for part in (user.first_name, user.last_name) if part).strip()
    if name:
        return _valid(name)
    return _valid(f"@{user.username}") if user.username else None


def _valid(text: _Text) -> _Text:
    """``text`` with each lone surrogate replaced by U+FFFD (a pair of them, its character)."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _strip_bot_mention(text: str, bot_username: str | None) -> str | None:
    """``/cmd@bot rest`` → ``/cmd rest`` when ``bot`` is this bot (case-insensitive);
    ``None`` when it is another bot (the command is not for this one). The command word
    ends at any whitespace, as the gateway's commands do."""
    match = _ADDRESSED.match(text)
    if not bot_username or match is None:
        return text
    if match.group(2).lower() != bot_username.lower():
        return None
    return match.group(1) + text[match.end():]


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` as messages of at most ``limit`` UTF-16 code units, in order
    (:func:`hermes_actors.adapters.split.split_message`)."""
    return _split(text, limit)
