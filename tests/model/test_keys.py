"""Session keys and multi-user sharing (§3, §4, §17.7, §17.8, §17.38)."""

from __future__ import annotations

import pytest

from hermes_actors.model.keys import (
    build_session_key,
    is_shared_multi_user_session,
    key_namespace,
)
from hermes_actors.model.source import SessionSource

SIGNAL_UUID = "0f3c6a7e-1b2d-4c5e-9f80-123456789abc"


def S(platform="telegram", **fields) -> SessionSource:
    return SessionSource(platform, **fields)


class TestSpecExamples:
    """Every example key of §3 comes out exactly (default switches)."""

    @pytest.mark.parametrize(
        ("source", "key"),
        [
            (S(chat_id="12345", user_id="7"), "agent:main:telegram:dm:12345"),
            (S(chat_id="12345", thread_id="678"), "agent:main:telegram:dm:12345:678"),
            (
                S("signal", user_id="+15550001111", user_id_alt=SIGNAL_UUID),
                f"agent:main:signal:dm:{SIGNAL_UUID}",
            ),
            (S(), "agent:main:telegram:dm"),
            (
                S(chat_type="group", chat_id="-100123", user_id="555"),
                "agent:main:telegram:group:-100123:555",
            ),
            (
                S("discord", chat_type="group", chat_id="123", thread_id="678", user_id="9"),
                "agent:main:discord:group:123:678",
            ),
            (
                S(
                    "slack",
                    chat_type="channel",
                    scope_id="T1",
                    chat_id="C2",
                    thread_id="1700.1",
                    user_id="U9",
                ),
                "agent:main:slack:channel:T1:C2:1700.1",
            ),
            (S(chat_id="42", profile="coder"), "agent:coder:telegram:dm:42"),
        ],
    )
    def test_example(self, source, key):
        assert build_session_key(source) == key


class TestNamespace:
    """The namespace is main, or the profile; a profile named main becomes main~."""

    def test_profile_named_main_is_escaped(self):
        assert build_session_key(S(chat_id="42", profile="main")) == "agent:main~:telegram:dm:42"

    def test_blank_profile_is_main(self):
        assert key_namespace(None) == "main"
        assert key_namespace("  ") == "main"
        assert key_namespace("coder") == "coder"

    def test_profiles_never_share_lanes(self):
        keys = {build_session_key(S(chat_id="42", profile=p)) for p in (None, "main", "coder")}
        assert len(keys) == 3


class TestDirectMessages:
    """DMs use the chat id, else the participant, else one shared lane per platform."""

    def test_chat_id_wins_over_participant(self):
        source = S(chat_id="12345", user_id="7", user_id_alt="alt")
        assert build_session_key(source) == "agent:main:telegram:dm:12345"

    def test_participant_stands_in_for_a_missing_chat_id(self):
        assert build_session_key(S(user_id="7")) == "agent:main:telegram:dm:7"
        assert build_session_key(S(user_id="7", user_id_alt="alt")) == (
            "agent:main:telegram:dm:alt"
        )

    def test_no_identifier_shares_one_lane(self):
        assert build_session_key(S("matrix")) == "agent:main:matrix:dm"
        assert build_session_key(S("matrix", user_name="Alice")) == "agent:main:matrix:dm"

    def test_threaded_dm_without_chat_id_uses_participant_then_thread(self):
        assert build_session_key(S(user_id="7", thread_id="5")) == "agent:main:telegram:dm:7:5"

    def test_threaded_dm_without_any_identifier_uses_the_thread(self):
        assert build_session_key(S(thread_id="5")) == "agent:main:telegram:dm:5"

    @pytest.mark.parametrize("platform", ["discord", "signal", "webhook", "slack"])
    def test_dm_thread_rule_holds_for_every_platform(self, platform):
        assert build_session_key(S(platform, user_id="7", thread_id="5")) == (
            f"agent:main:{platform}:dm:7:5"
        )

    @pytest.mark.parametrize("per_user", [True, False])
    def test_dm_never_appends_the_participant(self, per_user):
        source = S(chat_id="1", user_id="7", thread_id="5")
        assert (
            build_session_key(
                source, group_sessions_per_user=per_user, thread_sessions_per_user=per_user
            )
            == "agent:main:telegram:dm:1:5"
        )


class TestGroupsAndThreads:
    """Groups are per user by default; threads are shared by default; both can be switched."""

    GROUP = S(chat_type="group", chat_id="-100123", user_id="7", user_id_alt="alt7")
    THREAD = S(chat_type="group", chat_id="-100123", thread_id="99", user_id="7")

    def test_group_appends_the_participant_alt_first(self):
        assert build_session_key(self.GROUP) == "agent:main:telegram:group:-100123:alt7"

    def test_group_shared_when_switched_off(self):
        key = build_session_key(self.GROUP, group_sessions_per_user=False)
        assert key == "agent:main:telegram:group:-100123"

    def test_thread_shared_by_default(self):
        assert build_session_key(self.THREAD) == "agent:main:telegram:group:-100123:99"

    def test_thread_per_user_when_switched_on(self):
        key = build_session_key(self.THREAD, thread_sessions_per_user=True)
        assert key == "agent:main:telegram:group:-100123:99:7"

    def test_group_switch_does_not_affect_threads(self):
        assert build_session_key(self.THREAD, group_sessions_per_user=True) == (
            "agent:main:telegram:group:-100123:99"
        )
        assert (
            build_session_key(
                self.THREAD, group_sessions_per_user=False, thread_sessions_per_user=True
            )
            == "agent:main:telegram:group:-100123:99:7"
        )

    def test_thread_chat_type_is_a_thread(self):
        source = S("discord", chat_type="thread", chat_id="555", user_id="7")
        assert build_session_key(source) == "agent:main:discord:thread:555"
        assert build_session_key(source, thread_sessions_per_user=True) == (
            "agent:main:discord:thread:555:7"
        )

    def test_channel_follows_group_rules(self):
        source = S("discord", chat_type="channel", chat_id="c1", user_id="7")
        assert build_session_key(source) == "agent:main:discord:channel:c1:7"

    def test_two_users_in_a_group_get_two_sessions_and_share_a_thread(self):
        alice = S(chat_type="group", chat_id="-1", user_id="1")
        bob = S(chat_type="group", chat_id="-1", user_id="2")
        assert build_session_key(alice) != build_session_key(bob)
        alice_t = S(chat_type="group", chat_id="-1", user_id="1", thread_id="t")
        bob_t = S(chat_type="group", chat_id="-1", user_id="2", thread_id="t")
        assert build_session_key(alice_t) == build_session_key(bob_t)

    def test_group_without_participant_has_no_participant_part(self):
        assert build_session_key(S(chat_type="group", chat_id="-1")) == (
            "agent:main:telegram:group:-1"
        )


class TestSlack:
    """Slack keys carry the workspace after the chat type, for every chat type."""

    def test_dm_includes_scope(self):
        assert build_session_key(S("slack", scope_id="T1", chat_id="D1")) == (
            "agent:main:slack:dm:T1:D1"
        )

    def test_dm_without_chat_id_includes_scope(self):
        assert build_session_key(S("slack", scope_id="T1", user_id="U1", thread_id="1.2")) == (
            "agent:main:slack:dm:T1:U1:1.2"
        )

    def test_per_user_channel_includes_scope(self):
        source = S("slack", chat_type="channel", scope_id="T1", chat_id="C2", user_id="U1")
        assert build_session_key(source) == "agent:main:slack:channel:T1:C2:U1"

    def test_same_channel_id_in_two_workspaces_differs(self):
        one = S("slack", chat_type="channel", scope_id="T1", chat_id="C2")
        two = S("slack", chat_type="channel", scope_id="T2", chat_id="C2")
        assert build_session_key(one) != build_session_key(two)

    def test_without_scope_nothing_is_added(self):
        assert build_session_key(S("slack", chat_id="D1")) == "agent:main:slack:dm:D1"

    def test_scope_is_ignored_on_other_platforms(self):
        assert build_session_key(S("discord", scope_id="guild", chat_id="D1")) == (
            "agent:main:discord:dm:D1"
        )


class TestWhatsApp:
    """WhatsApp DM chat ids and participants are canonical; group ids are kept raw."""

    ALIASES = {"123456789012345": "60123456789"}

    @pytest.mark.parametrize(
        "chat_id",
        [
            "60123456789@s.whatsapp.net",
            "+60 12-345 6789",
            "60123456789:12@s.whatsapp.net",
            "123456789012345@lid",
        ],
    )
    def test_aliases_of_one_person_give_one_dm_key(self, chat_id):
        source = S("whatsapp", chat_id=chat_id)
        key = build_session_key(source, whatsapp_aliases=self.ALIASES)
        assert key == "agent:main:whatsapp:dm:+60123456789"

    def test_unmapped_lid_dm(self):
        assert build_session_key(S("whatsapp", chat_id="123456789012345@lid")) == (
            "agent:main:whatsapp:dm:lid:123456789012345"
        )

    def test_dm_participant_fallback_is_canonical(self):
        source = S("whatsapp", user_id="123456789012345@lid")
        assert build_session_key(source, whatsapp_aliases=self.ALIASES) == (
            "agent:main:whatsapp:dm:+60123456789"
        )

    def test_group_participant_is_canonical_and_group_id_raw(self):
        group = "120363012345678901@g.us"
        by_jid = S(
            "whatsapp", chat_type="group", chat_id=group, user_id="60123456789:4@s.whatsapp.net"
        )
        by_lid = S("whatsapp", chat_type="group", chat_id=group, user_id="123456789012345@lid")
        expected = f"agent:main:whatsapp:group:{group}:+60123456789"
        assert build_session_key(by_jid) == expected
        assert build_session_key(by_lid, whatsapp_aliases=self.ALIASES) == expected

    def test_other_platforms_are_not_canonicalised(self):
        assert build_session_key(S("signal", chat_id="60123456789@s.whatsapp.net")) == (
            "agent:main:signal:dm:60123456789@s.whatsapp.net"
        )


class TestKeyInputs:
    """Only identifying fields matter: message ids, names and topics never change a key."""

    def test_message_id_never_influences_the_key(self):
        base = dict(chat_type="group", chat_id="-1", user_id="7", thread_id="3")
        assert (
            build_session_key(S(message_id="1", **base))
            == build_session_key(S(message_id="2", **base))
            == build_session_key(S(**base))
        )

    def test_labels_never_influence_the_key(self):
        one = S(chat_id="1", chat_name="A", user_name="x", chat_topic="t", is_bot=True)
        two = S(chat_id="1", chat_name="B", user_name="y")
        assert build_session_key(one) == build_session_key(two)

    def test_raw_ids_are_kept(self):
        source = S(chat_type="group", chat_id="telegram:-100 123", user_id="User Seven")
        assert build_session_key(source) == "agent:main:telegram:group:telegram:-100 123:User Seven"

    def test_numeric_ids_are_coerced(self):
        assert build_session_key(S(chat_id=12345, thread_id=678)) == (
            "agent:main:telegram:dm:12345:678"
        )


class TestSharedMultiUser:
    """DMs are private; threads are shared unless per-user; groups shared only if switched."""

    @pytest.mark.parametrize(
        ("source", "group_per_user", "thread_per_user", "shared"),
        [
            (S(chat_id="1", thread_id="2"), False, False, False),
            (S(chat_type="group", chat_id="1"), True, False, False),
            (S(chat_type="group", chat_id="1"), False, False, True),
            (S(chat_type="channel", chat_id="1"), False, True, True),
            (S(chat_type="group", chat_id="1", thread_id="2"), True, False, True),
            (S(chat_type="group", chat_id="1", thread_id="2"), True, True, False),
            (S(chat_type="thread", chat_id="1"), True, False, True),
            (S(chat_type="thread", chat_id="1"), False, True, False),
        ],
    )
    def test_rule(self, source, group_per_user, thread_per_user, shared):
        assert (
            is_shared_multi_user_session(
                source,
                group_sessions_per_user=group_per_user,
                thread_sessions_per_user=thread_per_user,
            )
            is shared
        )

    def test_defaults(self):
        assert is_shared_multi_user_session(S(chat_type="group", chat_id="1")) is False
        assert is_shared_multi_user_session(S(chat_type="group", chat_id="1", thread_id="t"))

    @pytest.mark.parametrize("group_per_user", [True, False])
    @pytest.mark.parametrize("thread_per_user", [True, False])
    @pytest.mark.parametrize("thread_id", [None, "t"])
    def test_shared_exactly_when_the_key_has_no_participant(
        self, group_per_user, thread_per_user, thread_id
    ):
        source = S(chat_type="group", chat_id="-1", user_id="7", thread_id=thread_id)
        switches = dict(
            group_sessions_per_user=group_per_user, thread_sessions_per_user=thread_per_user
        )
        has_participant = build_session_key(source, **switches).endswith(":7")
        assert is_shared_multi_user_session(source, **switches) is not has_participant
