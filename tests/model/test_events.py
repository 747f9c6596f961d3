"""MessageEvent and command recognition (§2)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hermes_actors.model.events import Command, MessageEvent, MessageType, parse_command
from hermes_actors.model.source import SessionSource

SOURCE = SessionSource("telegram", chat_id="42", user_id="7")


class TestParseCommand:
    """Commands are recognised from text, case-insensitively, with their arguments."""

    @pytest.mark.parametrize(
        ("text", "name"),
        [("/new", "new"), ("/reset", "reset"), ("/stop", "stop"), ("/status", "status")],
    )
    def test_plain_commands(self, text, name):
        assert parse_command(text) == Command(name, "")

    @pytest.mark.parametrize("text", ["/NEW", "/New", "  /new  "])
    def test_command_words_are_case_insensitive_and_trimmed(self, text):
        assert parse_command(text) == Command("new", "")

    def test_queue_and_its_alias_carry_the_prompt(self):
        assert parse_command("/queue do the thing") == Command("queue", "do the thing")
        assert parse_command("/Q  do it ") == Command("queue", "do it")

    def test_queue_without_prompt_has_empty_args(self):
        assert parse_command("/queue") == Command("queue", "")
        assert parse_command("/q   ") == Command("queue", "")

    def test_prompt_on_the_next_line_is_kept(self):
        assert parse_command("/queue\nfirst line more") == Command("queue", "first line more")

    @pytest.mark.parametrize("space", ["\t", "\u00a0", "\r\n", "\u2003"])
    def test_any_whitespace_ends_the_command_word(self, space):
        assert parse_command(f"/queue{space}do it") == Command("queue", "do it")
        assert parse_command(f"/stop{space}") == Command("stop", "")

    def test_bot_mention_suffix_is_accepted(self):
        assert parse_command("/stop@my_bot") == Command("stop", "")

    @pytest.mark.parametrize("text", ["hello", "", "/unknown", "new", "please /stop", "/queued x"])
    def test_anything_else_is_not_a_command(self, text):
        assert parse_command(text) is None


class TestMessageEvent:
    """An event carries a generated id, an aware UTC receive time and its command."""

    def test_defaults(self):
        event = MessageEvent(source=SOURCE)
        assert event.text == ""
        assert event.message_type is MessageType.TEXT
        assert event.media_urls == ()
        assert event.internal is False
        assert event.metadata == {}
        assert len(event.event_id) == 32
        int(event.event_id, 16)
        assert event.received_at.utcoffset() == timedelta(0)

    def test_event_ids_are_unique(self):
        assert len({MessageEvent(source=SOURCE).event_id for _ in range(50)}) == 50

    def test_message_type_and_media_are_coerced(self):
        event = MessageEvent(source=SOURCE, message_type="photo", media_urls=["a", "b"])
        assert event.message_type is MessageType.PHOTO
        assert event.media_urls == ("a", "b")

    def test_empty_media_and_string_times_are_coerced_too(self):
        event = MessageEvent(source=SOURCE, media_urls=[], received_at="2024-01-01T12:00:00+02:00")
        assert event.media_urls == () and type(event.media_urls) is tuple
        assert event.received_at == datetime(2024, 1, 1, 10, tzinfo=timezone.utc)
        assert event.received_at.tzinfo is timezone.utc
        with pytest.raises(ValueError):
            MessageEvent(source=SOURCE, message_type="fax")

    def test_media_urls_given_as_one_string_are_refused(self):
        # a URL string became one "media URL" per character: ('h', 't', 't', 'p', ...)
        with pytest.raises(TypeError, match="media_urls"):
            MessageEvent(source=SOURCE, media_urls="https://example.org/a.jpg")

    def test_none_text_becomes_empty(self):
        assert MessageEvent(source=SOURCE, text=None).text == ""

    def test_none_metadata_becomes_empty_and_other_kinds_are_refused(self):
        # metadata=None was kept, and every turn of the message then failed with
        # "The agent failed to answer (AttributeError)"
        assert MessageEvent(source=SOURCE, text="x", metadata=None).metadata == {}
        with pytest.raises(TypeError, match="metadata"):
            MessageEvent(source=SOURCE, text="x", metadata=["a"])

    def test_source_must_be_a_session_source(self):
        with pytest.raises(TypeError):
            MessageEvent(source={"platform": "telegram"})

    def test_received_at_is_normalised_to_utc(self):
        plus_two = timezone(timedelta(hours=2))
        event = MessageEvent(source=SOURCE, received_at=datetime(2024, 1, 1, 12, tzinfo=plus_two))
        assert event.received_at == datetime(2024, 1, 1, 10, tzinfo=timezone.utc)
        assert event.received_at.tzinfo == timezone.utc

    def test_command_is_recognised_from_text(self):
        assert MessageEvent(source=SOURCE, text="/q later").command == Command("queue", "later")
        assert MessageEvent(source=SOURCE, text="hi").command is None

    def test_internal_events_are_never_commands(self):
        assert MessageEvent(source=SOURCE, text="/stop", internal=True).command is None

    def test_with_text_keeps_the_event_id(self):
        event = MessageEvent(source=SOURCE, text="a")
        changed = event.with_text("b", internal=True)
        assert (changed.text, changed.internal, changed.event_id) == ("b", True, event.event_id)

    def test_round_trip(self):
        event = MessageEvent(
            source=SessionSource("slack", chat_id="C1", chat_type="channel", scope_id="T1"),
            text="/queue x",
            message_type=MessageType.COMMAND,
            media_urls=("u",),
            internal=True,
            metadata={"k": [1, 2]},
        )
        assert MessageEvent.from_dict(event.to_dict()) == event

    def test_from_dict_fills_in_missing_fields(self):
        event = MessageEvent.from_dict({"source": {"platform": "telegram", "chat_id": "1"}})
        assert event.text == ""
        assert event.message_type is MessageType.TEXT
        assert len(event.event_id) == 32
        assert event.received_at.tzinfo is not None
