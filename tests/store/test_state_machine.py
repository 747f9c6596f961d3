"""SessionStore: §6's state machine, explicit cuts, flags and turn markers, on real SQLite."""

from __future__ import annotations

import threading

import pytest

from hermes_actors.config import load_config
from hermes_actors.errors import StoreError
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import epoch

from .conftest import T0, dm


class TestCreate:
    """A first message creates one entry and one ``sessions`` row describing the source."""

    def test_fresh_entry_records_the_source(self, store):
        entry = store.get_or_create_session(dm(message_id="m1"))
        assert entry.session_key == "agent:main:telegram:dm:42"
        assert entry.display_name == "DM with Alice"
        assert (entry.platform, entry.chat_type) == ("telegram", "dm")
        assert entry.origin.chat_id == "42" and entry.origin.message_id is None
        assert epoch(entry.created_at) == epoch(entry.updated_at) == T0
        row = store.db.session_row(entry.session_id)
        assert row["session_key"] == entry.session_key and row["started_at"] == T0
        assert row["ended_at"] is None and row["source"]["chat_id"] == "42"

    def test_key_follows_the_config_switches(self, make_store):
        group = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="7")
        shared = make_store(config=load_config({"group_sessions_per_user": False}, env={}))
        assert shared.session_key_for(group) == "agent:main:telegram:group:-100"
        assert shared.get_or_create_session(group).session_key == "agent:main:telegram:group:-100"

    def test_whatsapp_aliases_come_from_the_config(self, make_store):
        config = load_config({"whatsapp": {"lid_aliases": {"999": "+60123456789"}}}, env={})
        store = make_store(config=config)
        by_lid = SessionSource("whatsapp", chat_id="999@lid")
        by_phone = SessionSource("whatsapp", chat_id="60123456789@s.whatsapp.net")
        assert store.session_key_for(by_lid) == store.session_key_for(by_phone)

    def test_concurrent_first_messages_create_one_entry_and_one_row(self, store):
        barrier = threading.Barrier(20)
        results = []

        def first_message() -> None:
            barrier.wait()
            results.append(store.get_or_create_session(dm("777")))

        threads = [threading.Thread(target=first_message) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({entry.session_id for entry in results}) == 1
        assert len(store.list_sessions()) == 1
        assert store.db.counts()["sessions"] == 1


class TestAccess:
    """Existing entries follow §6 in order: suspended, then resume pending, then touch."""

    def test_touch_bumps_updated_at_and_keeps_the_id(self, store, clock):
        first = store.get_or_create_session(dm())
        clock.advance(60)
        again = store.get_or_create_session(dm())
        assert again.session_id == first.session_id
        assert epoch(again.updated_at) == T0 + 60 and epoch(again.created_at) == T0

    def test_touch_activity_false_keeps_updated_at(self, store, clock):
        first = store.get_or_create_session(dm())
        clock.advance(60)
        again = store.get_or_create_session(dm(), touch_activity=False)
        assert again == first

    def test_resume_pending_returns_the_entry_unchanged(self, store, clock):
        first = store.get_or_create_session(dm())
        assert store.mark_resume_pending(first.session_key, "restart_timeout")
        marked = store.get(first.session_key)
        clock.advance(60)
        again = store.get_or_create_session(dm())
        assert again == marked
        assert again.session_id == first.session_id
        assert again.resume_pending and again.resume_reason == "restart_timeout"
        assert store.get_or_create_session(dm()).resume_pending

    def test_suspended_rotates_and_beats_resume_pending(self, store, clock):
        old = store.get_or_create_session(dm())
        store.mark_resume_pending(old.session_key, "restart_interrupted")
        assert store.suspend_session(old.session_key)
        clock.advance(5)
        new = store.get_or_create_session(dm())
        assert new.session_id != old.session_id
        assert new.was_auto_reset and new.auto_reset_reason == "suspended"
        assert new.prev_session_id == old.session_id
        assert not new.suspended and not new.resume_pending
        ended = store.db.session_row(old.session_id)
        assert ended["end_reason"] == "suspended" and ended["ended_at"] == T0 + 5
        assert store.db.session_row(new.session_id)["ended_at"] is None

    def test_force_new_ends_the_old_row(self, store):
        old = store.get_or_create_session(dm())
        new = store.get_or_create_session(dm(), force_new=True)
        assert new.session_id != old.session_id and new.prev_session_id == old.session_id
        assert store.db.session_row(old.session_id)["end_reason"] == "force_new"


class TestReset:
    """``/new``/``/reset`` end the old row and start a fresh session that never reopens it."""

    def test_reset_ends_old_row_and_links_the_new_one(self, store):
        old = store.get_or_create_session(dm())
        store.mark_resume_pending(old.session_key, "restart_interrupted")
        store.mark_turn_active(old.session_key)
        new = store.reset_session(old.session_key)
        assert new.is_fresh_reset and new.prev_session_id == old.session_id
        assert not new.resume_pending and new.active_turn_token is None
        assert new.origin == old.origin and new.display_name == old.display_name
        assert store.db.session_row(old.session_id)["end_reason"] == "session_reset"
        assert store.get_or_create_session(dm()).session_id == new.session_id

    def test_reset_of_an_unknown_key_is_none(self, store):
        assert store.reset_session("agent:main:telegram:dm:nobody") is None


class TestFlags:
    """Flag setters answer False when refused or unknown (§17.15)."""

    def test_mark_resume_pending_is_refused_on_suspended_and_unknown(self, store):
        entry = store.get_or_create_session(dm())
        store.suspend_session(entry.session_key)
        assert not store.mark_resume_pending(entry.session_key, "restart_interrupted")
        assert not store.get(entry.session_key).resume_pending
        assert not store.mark_resume_pending("agent:main:x:dm", "restart_interrupted")

    def test_mark_resume_pending_records_when(self, store, clock):
        entry = store.get_or_create_session(dm())
        clock.advance(30)
        store.mark_resume_pending(entry.session_key, "shutdown_timeout")
        assert epoch(store.get(entry.session_key).last_resume_marked_at) == T0 + 30

    def test_clear_resume_pending(self, store):
        entry = store.get_or_create_session(dm())
        store.mark_resume_pending(entry.session_key, "restart_interrupted")
        assert store.clear_resume_pending(entry.session_key)
        cleared = store.get(entry.session_key)
        assert not cleared.resume_pending and cleared.resume_reason is None
        assert not store.clear_resume_pending("agent:main:x:dm")
        assert not store.suspend_session("agent:main:x:dm")

    def test_flags_survive_a_reopen(self, make_store, home):
        first = make_store()
        entry = first.get_or_create_session(dm())
        first.mark_resume_pending(entry.session_key, "restart_timeout")
        first.close()
        again = make_store().get(entry.session_key)
        assert again.resume_pending and again.resume_reason == "restart_timeout"


class TestTurnMarker:
    """The durable turn marker is a compare-and-swap: an older token never clears a newer one."""

    def test_mark_sets_token_and_aware_start(self, store):
        entry = store.get_or_create_session(dm())
        token = store.mark_turn_active(entry.session_key, internal=True)
        marked = store.get(entry.session_key)
        assert marked.active_turn_token == token and len(token) == 32
        assert marked.active_turn_started_at.tzinfo is not None and marked.active_turn_internal

    def test_older_token_cannot_clear_newer(self, store):
        entry = store.get_or_create_session(dm())
        old = store.mark_turn_active(entry.session_key)
        new = store.mark_turn_active(entry.session_key)
        assert not store.clear_turn_active(entry.session_key, old)
        assert store.get(entry.session_key).active_turn_token == new
        assert store.clear_turn_active(entry.session_key, new)
        assert store.get(entry.session_key).active_turn_token is None
        assert not store.clear_turn_active(entry.session_key, new)

    def test_unknown_key(self, store):
        assert not store.clear_turn_active("agent:main:x:dm", "t")
        with pytest.raises(StoreError):
            store.mark_turn_active("agent:main:x:dm")


class TestTranscripts:
    """Messages keep the §17.13 shape and order; bad ones are refused with ValueError."""

    def test_append_and_load(self, store, clock):
        entry = store.get_or_create_session(dm())
        store.append_message(entry.session_id, {"role": "user", "content": "hi"})
        store.append_message(
            entry.session_id,
            {"role": "assistant", "content": "", "tool_calls": [{"name": "x"}], "timestamp": 5.5},
        )
        store.append_message(entry.session_id, {"role": "tool", "content": "42", "tool_name": "x"})
        assert store.load_transcript(entry.session_id) == [
            {"role": "user", "content": "hi", "timestamp": T0},
            {"role": "assistant", "content": "", "tool_calls": [{"name": "x"}], "timestamp": 5.5},
            {"role": "tool", "content": "42", "tool_name": "x", "timestamp": T0},
        ]
        assert store.db.session_row(entry.session_id)["message_count"] == 3

    @pytest.mark.parametrize(
        "message",
        [{"role": "bot", "content": "x"}, {"role": "user", "content": None}, {"role": "user"},
         {"role": "user", "content": "x", "timestamp": "yesterday"}],
    )  # fmt: skip
    def test_invalid_messages_are_refused(self, store, message):
        entry = store.get_or_create_session(dm())
        with pytest.raises(ValueError):
            store.append_message(entry.session_id, message)
        assert store.load_transcript(entry.session_id) == []

    def test_unsafe_session_id_is_refused(self, store):
        with pytest.raises(ValueError):
            store.append_message("../escape", {"role": "user", "content": "x"})

    def test_update_session_counts_tokens(self, store, clock):
        entry = store.get_or_create_session(dm())
        clock.advance(10)
        store.update_session(entry.session_key, 1200, input_tokens=10, output_tokens=5)
        store.update_session(entry.session_key, touch_activity=False, input_tokens=1)
        updated = store.get(entry.session_key)
        assert updated.last_prompt_tokens == 1200 and epoch(updated.updated_at) == T0 + 10
        row = store.db.session_row(entry.session_id)
        assert (row["input_tokens"], row["output_tokens"], row["last_prompt_tokens"]) == (
            11, 5, 1200,
        )  # fmt: skip
        assert store.update_session("agent:main:x:dm") is None
