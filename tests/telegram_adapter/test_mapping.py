"""Updates to events and replies to messages: the pure rules of the Telegram adapter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from telebot import types

from hermes_actors import MessageType, build_session_key
from hermes_actors.adapters.telegram.mapping import (
    MESSAGE_LIMIT,
    message_event,
    split_message,
    utf16_length,
)

ALICE = {"id": 7, "is_bot": False, "first_name": "Alice", "last_name": "Liddell",
         "username": "alice"}


def _message(chat: dict, text: str | None = "hi", **fields) -> types.Message:
    data = {"message_id": 55, "date": 1700000000, "chat": chat, "from": ALICE, **fields}
    if text is not None:
        data["text"] = text
    return types.Message.de_json(data)


class TestSources:
    """Each kind of chat becomes the session source of §2, keyed as §3 says."""

    def test_a_private_chat_is_a_dm(self):
        event = message_event(_message({"id": 42, "type": "private"}), update_id=9)
        source = event.source
        assert (source.platform, source.chat_type, source.chat_id) == ("telegram", "dm", "42")
        assert (source.user_id, source.user_name, source.message_id) == ("7", "Alice Liddell",
                                                                          "55")
        assert source.chat_name is None and source.thread_id is None and not source.is_bot
        assert event.metadata == {"telegram": {"update_id": 9}}
        assert build_session_key(source) == "agent:main:telegram:dm:42"

    @pytest.mark.parametrize("kind", ["group", "supergroup"])
    def test_a_group_is_named_by_its_title(self, kind):
        chat = {"id": -100123, "type": kind, "title": "Ops room"}
        source = message_event(_message(chat)).source
        assert (source.chat_type, source.chat_id, source.chat_name) == ("group", "-100123",
                                                                         "Ops room")
        assert build_session_key(source) == "agent:main:telegram:group:-100123:7"

    def test_a_forum_topic_is_a_shared_thread(self):
        chat = {"id": -100123, "type": "supergroup", "title": "Ops", "is_forum": True}
        source = message_event(_message(chat, message_thread_id=12,
                                        is_topic_message=True)).source
        assert (source.chat_type, source.thread_id) == ("thread", "12")
        assert build_session_key(source) == "agent:main:telegram:thread:-100123:12"

    def test_a_reply_thread_outside_a_forum_is_not_a_topic(self):
        chat = {"id": -100123, "type": "supergroup", "title": "Ops"}
        source = message_event(_message(chat, message_thread_id=12)).source
        assert source.chat_type == "group" and source.thread_id is None

    def test_a_sender_without_a_name_is_its_username_and_bots_are_flagged(self):
        bot = {"id": 99, "is_bot": True, "first_name": "", "username": "helper_bot"}
        source = message_event(_message({"id": 1, "type": "private"}, **{"from": bot})).source
        assert (source.user_name, source.is_bot) == ("@helper_bot", True)

    def test_channel_posts_and_contentless_messages_are_not_events(self):
        assert message_event(_message({"id": -1, "type": "channel", "title": "c"})) is None
        assert message_event(_message({"id": 1, "type": "private"}, text=None)) is None


class TestContent:
    """Photos, voice notes and documents carry their file ids; captions are the text."""

    def test_photo_takes_the_largest_size_and_the_caption(self):
        sizes = [{"file_id": f"p{n}", "file_unique_id": f"u{n}", "width": n, "height": n}
                 for n in (90, 320, 1280)]
        event = message_event(_message({"id": 1, "type": "private"}, text=None, photo=sizes,
                                       caption="look"))
        assert (event.message_type, event.media_urls, event.text) == (
            MessageType.PHOTO, ("p1280",), "look")

    def test_voice_and_document(self):
        voice = message_event(_message({"id": 1, "type": "private"}, text=None, voice={
            "file_id": "v1", "file_unique_id": "uv", "duration": 3}))
        assert (voice.message_type, voice.media_urls, voice.text) == (MessageType.VOICE,
                                                                      ("v1",), "")
        doc = message_event(_message({"id": 1, "type": "private"}, text=None, document={
            "file_id": "d1", "file_unique_id": "ud", "file_name": "a.pdf"}))
        assert (doc.message_type, doc.media_urls) == (MessageType.DOCUMENT, ("d1",))

    def test_a_command_addressed_to_this_bot_loses_the_mention(self):
        chat = {"id": -5, "type": "group", "title": "g"}
        own = message_event(_message(chat, "/new@Hermes_Bot now"), bot_username="hermes_bot")
        assert own.text == "/new now" and own.command is not None

    def test_a_command_addressed_to_another_bot_is_not_for_this_one(self):
        # In a group with two bots, "/new@other_bot" must not reset this bot's session.
        chat = {"id": -5, "type": "group", "title": "g"}
        for text in ("/new@other_bot", "/stop@Other_Bot please", "/reset@other_bot\nnow"):
            assert message_event(_message(chat, text), bot_username="hermes_bot") is None
        own = message_event(_message(chat, "/queue@hermes_bot\nthen this"),
                            bot_username="hermes_bot")
        assert own.text == "/queue\nthen this" and own.command is not None
        path = message_event(_message(chat, "/home/me@host is full"), bot_username="hermes_bot")
        assert path.text == "/home/me@host is full"


class TestLoneSurrogates:
    """A half of an emoji (JSON's ``"\\ud83d"`` alone) is U+FFFD: no store can encode it."""

    def test_in_a_text(self):
        event = message_event(_message({"id": 1, "type": "private"}, "broken \ud83d"))
        assert event.text == "broken \ufffd"
        event.text.encode("utf-8")  # what the store does with it

    def test_in_a_caption_the_sender_and_the_group(self):
        chat = {"id": -5, "type": "group", "title": "ops \udc00"}
        sender = {"id": 7, "is_bot": False, "first_name": "Al\ud83dice"}
        sizes = [{"file_id": "p", "file_unique_id": "u", "width": 9, "height": 9}]
        event = message_event(_message(chat, text=None, photo=sizes, caption="\ude00 look",
                                       **{"from": sender}))
        assert event.text == "\ufffd look"
        assert event.source.user_name == "Al\ufffdice"
        assert event.source.chat_name == "ops \ufffd"

    def test_a_pair_is_its_character_and_other_text_is_unchanged(self):
        chat = {"id": 1, "type": "private"}
        assert message_event(_message(chat, "\ud83d\ude00 ok")).text == "\U0001f600 ok"
        assert message_event(_message(chat, "ok \U0001f600 é")).text == "ok \U0001f600 é"


class TestSplit:
    """Long replies are cut at Telegram's limit, on paragraph, then line, then word bounds."""

    def test_a_text_that_fits_is_one_message(self):
        text = "x" * MESSAGE_LIMIT
        assert split_message(text) == [text]

    def test_paragraph_breaks_are_preferred_to_line_breaks(self):
        first, second = "a" * 3000, "b\n" * 600
        chunks = split_message(first + "\n\n" + second)
        assert chunks[0] == first
        assert all(utf16_length(c) <= MESSAGE_LIMIT for c in chunks)

    def test_lines_then_words_then_a_hard_cut(self):
        lines = split_message("l" * 10 + "\n" + "m" * 10, limit=15)
        assert lines == ["l" * 10, "m" * 10]
        words = split_message("aaaa bbbb cccc", limit=10)
        assert words == ["aaaa bbbb", "cccc"]
        assert split_message("z" * 25, limit=10) == ["z" * 10, "z" * 10, "z" * 5]

    def test_the_limit_counts_utf16_units(self):
        emoji = "😀" * 3000  # two units each: 6000 units
        chunks = split_message(emoji)
        assert [utf16_length(c) for c in chunks] == [4096, 1904]

    @given(st.text(alphabet=st.sampled_from(["a", "é", "😀", " ", "\n"]), max_size=400),
           st.integers(min_value=2, max_value=60))
    def test_nothing_but_whitespace_at_cuts_is_lost(self, text, limit):
        chunks = split_message(text, limit)
        assert all(utf16_length(c) <= limit for c in chunks)
        assert "".join(text.split()) == "".join("".join(c.split()) for c in chunks)
        if len(chunks) > 1:
            assert all(c.strip() for c in chunks)
