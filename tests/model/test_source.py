"""SessionSource and platforms (§2, §17.6, §17.37)."""

from __future__ import annotations

import pytest

from hermes_actors.errors import HermesActorsError, UnknownPlatformError
from hermes_actors.model.platform import (
    Platform,
    is_pii_safe,
    normalize_platform,
    platform_title,
)
from hermes_actors.model.source import SessionSource

BUILT_IN_TITLES = {
    "local": "Local",
    "telegram": "Telegram",
    "discord": "Discord",
    "slack": "Slack",
    "whatsapp": "WhatsApp",
    "signal": "Signal",
    "matrix": "Matrix",
    "mattermost": "Mattermost",
    "email": "Email",
    "sms": "SMS",
    "webhook": "Webhook",
    "api_server": "API server",
    "bluebubbles": "BlueBubbles",
}


@pytest.fixture
def plugin_platform():
    """A registered plugin platform, unregistered after the test."""
    name = Platform.register("zulipish")
    yield name
    Platform.unregister(name)


class TestPlatforms:
    """Built-in and plugin platforms are accepted; anything else is rejected by name."""

    def test_every_built_in_platform_is_known(self):
        assert {p.value for p in Platform} == set(BUILT_IN_TITLES)
        for name in BUILT_IN_TITLES:
            assert SessionSource(name).platform == name

    def test_enum_member_and_any_case_normalise_to_the_value(self):
        assert SessionSource(Platform.TELEGRAM).platform == "telegram"
        assert SessionSource(" Telegram ").platform == "telegram"
        assert normalize_platform(Platform.API_SERVER) == "api_server"
        assert str(Platform.SLACK) == "slack"

    def test_unknown_platform_raises_an_error_naming_it(self):
        with pytest.raises(UnknownPlatformError) as info:
            SessionSource("myspace", chat_id="1")
        assert "myspace" in str(info.value)
        assert info.value.platform == "myspace"
        assert isinstance(info.value, HermesActorsError)
        assert isinstance(info.value, ValueError)

    @pytest.mark.parametrize("bad", [None, "", "   ", 42])
    def test_non_names_are_unknown_platforms(self, bad):
        with pytest.raises(UnknownPlatformError):
            SessionSource(bad)

    def test_registered_plugin_is_accepted_until_unregistered(self):
        name = Platform.register("Zulipish")
        try:
            assert name == "zulipish"
            assert SessionSource("zulipish", chat_id="1").platform == "zulipish"
        finally:
            Platform.unregister(name)
        with pytest.raises(UnknownPlatformError, match="zulipish"):
            SessionSource("zulipish")

    def test_registering_a_name_with_unsafe_characters_is_rejected(self):
        with pytest.raises(UnknownPlatformError):
            Platform.register("bad name/../")

    @pytest.mark.parametrize(("name", "title"), sorted(BUILT_IN_TITLES.items()))
    def test_built_in_titles(self, name, title):
        assert platform_title(name) == title

    def test_plugin_title_upper_cases_the_first_letter(self, plugin_platform):
        assert platform_title(plugin_platform) == "Zulipish"

    def test_pii_safe_built_ins_and_plugins(self, plugin_platform):
        assert {p for p in BUILT_IN_TITLES if is_pii_safe(p)} == {
            "whatsapp",
            "signal",
            "telegram",
            "bluebubbles",
        }
        assert not is_pii_safe(plugin_platform)
        Platform.register(plugin_platform, pii_safe=True)
        assert is_pii_safe(plugin_platform)


class TestCoercion:
    """Ids given as numbers become strings; the chat type defaults to dm."""

    def test_numbers_are_coerced_to_strings(self):
        source = SessionSource("telegram", chat_id=-100123, user_id=7, thread_id=12.0)
        assert source.chat_id == "-100123"
        assert source.user_id == "7"
        assert source.thread_id == "12"

    def test_booleans_and_other_objects_are_refused(self):
        with pytest.raises(TypeError):
            SessionSource("telegram", chat_id=True)
        with pytest.raises(TypeError):
            SessionSource("telegram", chat_id=["1"])

    def test_chat_type_defaults_to_dm_and_is_lower_cased(self):
        assert SessionSource("telegram").chat_type == "dm"
        assert SessionSource("telegram", chat_type=None).chat_type == "dm"
        assert SessionSource("telegram", chat_type="Group").chat_type == "group"

    def test_is_bot_is_a_bool(self):
        assert SessionSource("telegram", is_bot=1).is_bot is True
        assert SessionSource("telegram").is_bot is False

    def test_source_is_immutable(self):
        source = SessionSource("telegram", chat_id="1")
        with pytest.raises(AttributeError):
            source.chat_id = "2"


class TestParticipant:
    """The participant is user_id_alt when present, else user_id."""

    def test_alt_id_is_preferred(self):
        assert SessionSource("signal", user_id="+1555", user_id_alt="uuid-1").participant_id == (
            "uuid-1"
        )

    def test_user_id_is_the_fallback(self):
        assert SessionSource("signal", user_id="+1555").participant_id == "+1555"
        assert SessionSource("signal").participant_id is None


class TestDescription:
    """The description names the chat the way a person would."""

    def test_local_is_the_cli_terminal(self):
        assert SessionSource("local", chat_type="group", chat_name="x").description == (
            "CLI terminal"
        )

    def test_dm_uses_name_then_id_then_user(self):
        assert SessionSource("telegram", user_name="Alice", user_id="7").description == (
            "DM with Alice"
        )
        assert SessionSource("telegram", user_id="7").description == "DM with 7"
        assert SessionSource("telegram").description == "DM with user"

    def test_group_and_channel_use_name_then_id(self):
        group = SessionSource("telegram", chat_type="group", chat_id="-1", chat_name="My Group")
        assert group.description == "group: My Group"
        assert SessionSource("telegram", chat_type="group", chat_id="-1").description == (
            "group: -1"
        )
        channel = SessionSource("slack", chat_type="channel", chat_id="C2", chat_name="ops")
        assert channel.description == "channel: ops"

    def test_threaded_group_appends_the_thread(self):
        source = SessionSource(
            "telegram", chat_type="group", chat_name="My Group", chat_id="-1", thread_id="12345"
        )
        assert source.description == "group: My Group, thread: 12345"

    def test_thread_chat_type_is_name_or_id_plus_thread(self):
        named = SessionSource("discord", chat_type="thread", chat_id="9", chat_name="bugs")
        assert named.description == "bugs"
        unnamed = SessionSource("discord", chat_type="thread", chat_id="9", thread_id="77")
        assert unnamed.description == "9, thread: 77"

    def test_threaded_dm_appends_the_thread(self):
        source = SessionSource("telegram", user_name="Alice", thread_id="5")
        assert source.description == "DM with Alice, thread: 5"


class TestSourceRoundTrip:
    """to_dict/from_dict round-trip exactly with a stable key order."""

    FULL = dict(
        platform="slack",
        chat_id="C2",
        chat_type="channel",
        chat_name="ops",
        user_id="U1",
        user_name="Alice",
        thread_id="1700.1",
        chat_topic="deploys",
        user_id_alt="alt",
        chat_id_alt="calt",
        scope_id="T1",
        parent_chat_id="C0",
        message_id="m1",
        profile="coder",
        is_bot=True,
    )

    def test_full_source_round_trips(self):
        source = SessionSource(**self.FULL)
        data = source.to_dict()
        assert list(data) == list(self.FULL)
        assert SessionSource.from_dict(data) == source

    def test_none_fields_are_omitted(self):
        data = SessionSource("telegram", chat_id="1").to_dict()
        assert data == {"platform": "telegram", "chat_id": "1", "chat_type": "dm", "is_bot": False}
        assert SessionSource.from_dict(data) == SessionSource("telegram", chat_id="1")

    def test_unknown_keys_are_ignored(self):
        data = {"platform": "telegram", "chat_id": "1", "future_field": 3}
        assert SessionSource.from_dict(data) == SessionSource("telegram", chat_id="1")

    def test_from_dict_coerces_numbers(self):
        assert SessionSource.from_dict({"platform": "telegram", "chat_id": 42}).chat_id == "42"

    def test_missing_platform_and_non_dicts_are_rejected(self):
        with pytest.raises(ValueError):
            SessionSource.from_dict({"chat_id": "1"})
        with pytest.raises(TypeError):
            SessionSource.from_dict(["telegram"])

    def test_unknown_platform_in_data_is_rejected(self):
        with pytest.raises(UnknownPlatformError):
            SessionSource.from_dict({"platform": "myspace"})
