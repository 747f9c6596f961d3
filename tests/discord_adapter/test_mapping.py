"""Discord's Gateway payloads to messages, the thread directory and the reply split: pure
functions on the JSON the Gateway sends."""

from __future__ import annotations

import io
import logging

import pytest

from hermes_actors.adapters.discord.adapter import bot_id_of, check_token
from hermes_actors.adapters.discord.bridge import _Masking, reduce_event
from hermes_actors.adapters.discord.mapping import (
    MESSAGE_LIMIT,
    Channel,
    ChannelDirectory,
    channel_of,
    message_event,
    split_message,
)
from hermes_actors.errors import ConfigError
from hermes_actors.model.events import MessageType
from hermes_actors.model.keys import build_session_key, is_shared_multi_user_session

from .fake_discord import ALICE, BOB, BOT_ID, BOT_USER, GUILD, TOKEN, message_object

pytestmark = pytest.mark.discord

THREAD = Channel("700", 11, parent_id="600", name="release plans")


def _event(channel_id="600", content="hello", *, channel=None, **fields):
    return message_event(message_object(channel_id, content, author=fields.pop("author", ALICE),
                                        **fields), bot_user_id=BOT_ID, channel=channel)


class TestPlaces:
    def test_a_dm_is_one_session_per_channel(self):
        event = _event("500", "hi", message_id="9001")
        source = event.source
        assert (source.platform, source.chat_type, source.chat_id) == ("discord", "dm", "500")
        assert (source.user_id, source.user_name, source.message_id) == (ALICE["id"], "Alice",
                                                                          "9001")
        assert source.thread_id is None and source.scope_id is None
        assert build_session_key(source) == "agent:main:discord:dm:500"

    def test_a_guild_channel_is_one_session_per_member(self):
        channel = Channel("600", 0, name="general")
        alice = _event(guild_id=GUILD, channel=channel).source
        bob = _event(guild_id=GUILD, channel=channel, author=BOB).source
        assert (alice.chat_type, alice.chat_id, alice.chat_name) == ("group", "600", "general")
        assert alice.scope_id == GUILD
        assert build_session_key(alice) == f"agent:main:discord:group:600:{ALICE['id']}"
        assert build_session_key(bob) == f"agent:main:discord:group:600:{BOB['id']}"
        assert not is_shared_multi_user_session(alice)

    def test_an_unknown_guild_channel_is_a_plain_channel(self):
        source = _event(guild_id=GUILD, channel=None).source
        assert (source.chat_type, source.chat_id, source.thread_id) == ("group", "600", None)

    def test_a_thread_is_shared_under_its_parent(self):
        alice = _event("700", guild_id=GUILD, channel=THREAD).source
        bob = _event("700", guild_id=GUILD, channel=THREAD, author=BOB).source
        assert (alice.chat_type, alice.chat_id, alice.thread_id) == ("thread", "600", "700")
        assert alice.chat_name == "release plans"
        assert build_session_key(alice) == build_session_key(bob) == \
            "agent:main:discord:thread:600:700"
        assert is_shared_multi_user_session(alice)

    def test_the_member_nickname_comes_first(self):
        member = {"nick": "Ali", "roles": []}
        assert _event(guild_id=GUILD, member=member).source.user_name == "Ali"
        plain = {**ALICE, "global_name": None}
        assert _event(author=plain).source.user_name == "alice"


class TestWhatIsAMessage:
    @pytest.mark.parametrize("author", [BOT_USER, {**BOB, "bot": True}], ids=["own", "bot"])
    def test_the_bots_own_and_other_bots_messages_are_ignored(self, author):
        assert _event(author=author) is None

    def test_the_own_id_alone_is_enough(self):
        me = {k: v for k, v in BOT_USER.items() if k != "bot"}
        assert _event(author=me) is None

    @pytest.mark.parametrize("kind", [7, 6, 18, 21])  # join, pin, thread created, starter
    def test_system_messages_are_ignored(self, kind):
        assert _event(type=kind) is None

    def test_a_reply_is_a_message(self):
        assert _event(type=19, message_reference={"message_id": "1"}).text == "hello"

    def test_webhooks_and_empty_messages_are_ignored(self):
        assert _event(webhook_id="42") is None
        assert _event(content="") is None
        assert _event(content="   ") is None

    def test_mentions_stay_raw(self):
        text = f"<@{BOT_ID}> ask <@{BOB['id']}> about <#600> and <@&99>"
        assert _event(content=text).text == text

    def test_the_message_id_names_a_redelivery(self):
        payload = message_object("500", "once", author=ALICE, message_id="777")
        first, again = (message_event(payload, bot_user_id=BOT_ID) for _ in range(2))
        assert first.source == again.source and first.event_id != again.event_id
        assert first.metadata["discord"] == {"message_id": "777", "channel_id": "500",
                                             "guild_id": None}

    def test_attachments(self):
        image = {"id": "1", "url": "https://cdn/x.png", "content_type": "image/png"}
        pdf = {"id": "2", "url": "https://cdn/x.pdf", "content_type": "application/pdf"}
        photo = _event(content="", attachments=[image])
        assert (photo.message_type, photo.media_urls) == (MessageType.PHOTO,
                                                          ("https://cdn/x.png",))
        both = _event(content="see", attachments=[image, pdf])
        assert both.message_type == MessageType.DOCUMENT and len(both.media_urls) == 2
        voice = _event(content="", flags=1 << 13, attachments=[
            {"id": "3", "url": "https://cdn/v.ogg", "content_type": "audio/ogg"}])
        assert voice.message_type == MessageType.VOICE

    @pytest.mark.parametrize("broken", [{"author": None}, {"id": None}, {"content": 5}])
    def test_a_payload_of_the_wrong_shape_raises(self, broken):
        payload = {**message_object("500", "x", author=ALICE), **broken}
        with pytest.raises((TypeError, ValueError)):
            message_event(payload, bot_user_id=BOT_ID)


class TestDirectory:
    def test_it_learns_threads_and_channels_from_the_gateway(self):
        directory = ChannelDirectory()
        directory.learn("GUILD_CREATE", reduce_event("GUILD_CREATE", {
            "id": GUILD, "members": [{"user": ALICE}], "roles": [],
            "channels": [{"id": "600", "type": 0, "name": "general", "topic": "x"}],
            "threads": [{"id": "701", "type": 11, "parent_id": "600", "name": "old"}]}))
        directory.learn("THREAD_CREATE", {"id": "702", "type": 12, "parent_id": "600",
                                          "name": "private", "guild_id": GUILD})
        directory.learn("THREAD_LIST_SYNC", {"threads": [{"id": "703", "type": 10,
                                                          "parent_id": "601"}]})
        assert directory.get("600") == Channel("600", 0, None, "general")
        assert all(directory.get(t).is_thread for t in ("701", "702", "703"))
        assert directory.get("703").parent_id == "601"
        directory.learn("THREAD_DELETE", {"id": "702", "type": 12})
        directory.learn("MESSAGE_CREATE", {"id": "9", "type": 0})  # not a channel event
        assert directory.get("702") is None and directory.get("9") is None
        assert len(directory) == 3

    def test_a_full_directory_forgets_the_oldest(self):
        directory = ChannelDirectory(size=2)
        for channel_id in ("1", "2", "3"):
            directory.add(Channel(channel_id, 0))
        assert directory.get("1") is None and len(directory) == 2

    def test_channel_objects_without_an_id_or_type_are_skipped(self):
        assert channel_of({"id": "1"}) is None
        assert channel_of({"type": 0}) is None
        assert channel_of({"id": 5, "type": 11, "parent_id": 4}) == Channel("5", 11, "4")


class TestSplitAndToken:
    def test_a_long_reply_is_split_at_2000_in_order(self):
        paragraphs = [f"part {n}: " + "z" * 1500 for n in range(4)]
        parts = split_message("\n\n".join(paragraphs))
        assert parts == paragraphs and all(len(p) <= MESSAGE_LIMIT for p in parts)
        assert split_message("short") == ["short"]

    def test_tokens(self):
        assert check_token(f"  {TOKEN}\n", "DISCORD_BOT_TOKEN") == TOKEN
        assert check_token(f"Bot {TOKEN}", "DISCORD_BOT_TOKEN") == TOKEN
        assert bot_id_of(TOKEN) == BOT_ID
        assert bot_id_of("not-base64!.x.y") is None
        with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN .*is not set"):
            check_token(None, "DISCORD_BOT_TOKEN")
        for bad in ("one-part", "a.b", "a..c", "a.b c.d"):
            with pytest.raises(ConfigError, match="malformed") as raised:
                check_token(bad, "DISCORD_BOT_TOKEN")
            assert bad not in str(raised.value)

    def test_the_bridge_masks_the_token_in_its_log(self):
        out = io.StringIO()
        handler = logging.StreamHandler(out)
        handler.addFilter(_Masking(TOKEN))
        logger = logging.getLogger("test.discord.masking")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            logger.warning("connecting with %s", TOKEN)
            try:
                raise ValueError(f"refused {TOKEN}")
            except ValueError:
                logger.exception("failed")
        finally:
            logger.removeHandler(handler)
        assert TOKEN not in out.getvalue() and out.getvalue().count("<token>") == 2
