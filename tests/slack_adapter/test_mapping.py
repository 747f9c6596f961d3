"""Slack events to messages, as pure functions (no server, no gateway)."""

from __future__ import annotations

import pytest

from hermes_actors.adapters.slack.mapping import MESSAGE_LIMIT, message_event, split_message
from hermes_actors.model.events import MessageType
from hermes_actors.model.keys import build_session_key

from .fake_slack_api import BOT_USER, TEAM, message


def _key(event) -> str:
    return build_session_key(event.source)


class TestPlaces:
    def test_a_dm(self):
        event = message_event(message("D1", "hi", channel_type="im", event_id="Ev1"),
                              bot_user_id=BOT_USER)
        source = event.source
        assert (source.platform, source.chat_type, source.chat_id) == ("slack", "dm", "D1")
        assert (source.user_id, source.scope_id, source.message_id) == ("U0ALICE", TEAM, "Ev1")
        assert source.thread_id is None and event.text == "hi"
        assert _key(event) == f"agent:main:slack:dm:{TEAM}:D1"

    def test_a_channel_is_a_group_of_members(self):
        event = message_event(message("C1", "hi all"))
        assert (event.source.chat_type, event.source.thread_id) == ("group", None)
        assert _key(event) == f"agent:main:slack:group:{TEAM}:C1:U0ALICE"

    def test_a_thread_is_shared_by_everyone_in_it(self):
        one = message_event(message("C1", "a", thread_ts="1700.1"))
        two = message_event(message("C1", "b", thread_ts="1700.1", user="U0BOB"))
        assert (one.source.chat_type, one.source.thread_id) == ("thread", "1700.1")
        assert _key(one) == _key(two) == f"agent:main:slack:thread:{TEAM}:C1:1700.1"

    def test_a_private_channel_and_a_group_dm_are_groups(self):
        for kind in ("group", "mpim"):
            assert message_event(message("G1", "x", channel_type=kind)).source.chat_type == \
                "group"

    def test_the_workspace_is_in_the_key(self):
        one = message_event(message("C1", "x", team="T1"))
        two = message_event(message("C1", "x", team="T2"))
        assert _key(one) != _key(two)

    def test_the_event_id_names_the_message(self):
        payload = message("C1", "x", event_id="Ev42")
        first, retry = message_event(payload), message_event(payload)
        assert first.ingress_key == retry.ingress_key and "Ev42" in first.ingress_key
        assert first.metadata["slack"]["event_id"] == "Ev42"


class TestIgnored:
    @pytest.mark.parametrize("fields", [
        {"bot_id": "B9"},
        {"subtype": "bot_message"},
        {"subtype": "message_changed"},
        {"subtype": "message_deleted"},
        {"subtype": "channel_join"},
    ])
    def test_bots_and_other_subtypes(self, fields):
        assert message_event(message("C1", "x", **fields), bot_user_id=BOT_USER) is None

    def test_the_bots_own_message(self):
        assert message_event(message("C1", "x", user=BOT_USER), bot_user_id=BOT_USER) is None

    def test_other_event_types_and_empty_texts(self):
        payload = message("C1", "x")
        payload["event"]["type"] = "app_mention"  # the same message again: not twice
        assert message_event(payload) is None
        assert message_event(message("C1", "  ")) is None
        assert message_event({"type": "event_callback", "event": "nonsense"}) is None

    def test_a_malformed_message(self):
        payload = message("C1", "x")
        del payload["event_id"]
        with pytest.raises(ValueError):
            message_event(payload)


class TestContent:
    def test_a_leading_mention_of_the_bot_is_dropped(self):
        text = message_event(message("C1", f"<@{BOT_USER}> /new"), bot_user_id=BOT_USER).text
        assert text == "/new"
        other = message_event(message("C1", "<@U0BOB> hi"), bot_user_id=BOT_USER).text
        assert other == "<@U0BOB> hi"

    def test_files(self):
        files = [{"url_private": "https://files.slack.com/a.png", "mimetype": "image/png"}]
        event = message_event(message("C1", "", subtype="file_share", files=files))
        assert event.message_type == MessageType.PHOTO
        assert event.media_urls == ("https://files.slack.com/a.png",)
        files.append({"url_private": "https://files.slack.com/b.pdf",
                      "mimetype": "application/pdf"})
        event = message_event(message("C1", "see", subtype="file_share", files=files))
        assert event.message_type == MessageType.DOCUMENT and len(event.media_urls) == 2


class TestSplit:
    def test_a_long_reply_in_order(self):
        text = "\n\n".join(f"paragraph {i} " + "x" * 1500 for i in range(7))
        parts = split_message(text)
        assert len(parts) > 1 and all(len(p) <= MESSAGE_LIMIT for p in parts)
        assert "\n\n".join(parts) == text

    def test_a_short_reply_is_one_message(self):
        assert split_message("hello") == ["hello"]
