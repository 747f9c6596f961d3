"""SessionEntry: round-trip, tolerant loading and path safety (§2)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone

import pytest

from hermes_actors.model.entry import (
    SessionEntry,
    new_session_id,
    validate_session_id,
    validate_session_key,
)
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import from_epoch

UTC = timezone.utc
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
KEY = "agent:main:telegram:dm:42"
SID = "20240501_120000_deadbeef"


@pytest.fixture
def tokyo_local_time():
    """Host local time set to UTC+9 (POSIX TZ string, no tz database needed), then restored."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "JST-9"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


def full_entry() -> SessionEntry:
    return SessionEntry(
        session_key=KEY,
        session_id=SID,
        created_at=T0,
        updated_at=T0 + timedelta(minutes=5),
        origin=SessionSource("telegram", chat_id="42", user_id="7", user_name="Alice"),
        display_name="Alice",
        platform="telegram",
        chat_type="dm",
        metadata={"note": "x"},
        last_prompt_tokens=1234,
        suspended=True,
        resume_pending=True,
        resume_reason="restart_interrupted",
        last_resume_marked_at=T0 + timedelta(minutes=6),
        active_turn_token="a" * 32,
        active_turn_started_at=T0 + timedelta(minutes=7),
        active_turn_internal=True,
        was_auto_reset=True,
        auto_reset_reason="suspended",
        prev_session_id="20240430_110000_cafebabe",
        is_fresh_reset=True,
        expiry_finalized=True,
    )


class TestSessionId:
    """New session ids are YYYYMMDD_HHMMSS_<8 hex> in UTC."""

    def test_format_and_time(self):
        session_id = new_session_id(T0)
        assert re.fullmatch(r"20240501_120000_[0-9a-f]{8}", session_id)

    def test_default_is_now_in_utc(self):
        session_id = new_session_id()
        stamp = datetime.strptime(session_id[:15], "%Y%m%d_%H%M%S").replace(tzinfo=UTC)
        assert abs((datetime.now(UTC) - stamp).total_seconds()) < 120

    def test_ids_are_unique(self):
        assert len({new_session_id(T0) for _ in range(100)}) == 100


class TestEntryRoundTrip:
    """to_dict/from_dict round-trip every field; datetimes are ISO 8601 with offset."""

    def test_full_entry_round_trips(self):
        entry = full_entry()
        assert SessionEntry.from_dict(entry.to_dict()) == entry

    def test_datetimes_are_written_with_offset(self):
        data = full_entry().to_dict()
        assert data["created_at"] == "2024-05-01T12:00:00+00:00"
        assert data["origin"]["user_name"] == "Alice"

    def test_minimal_entry_round_trips(self):
        entry = SessionEntry(session_key=KEY, session_id=SID)
        assert SessionEntry.from_dict(entry.to_dict()) == entry

    def test_keys_are_the_fields_in_order_however_the_entry_was_made(self):
        names = [f.name for f in fields(SessionEntry)]
        made = [full_entry(), SessionEntry(session_key=KEY, session_id=SID),
                SessionEntry.from_dict(full_entry().to_dict()),
                replace(full_entry(), suspended=True),
                full_entry().evolve(active_turn_token="t", updated_at=None)]
        for entry in made:
            assert list(entry.to_dict()) == names


class TestTolerantLoading:
    """Old or damaged data loads: defaults fill gaps, bad values degrade, never crash."""

    def test_missing_fields_take_defaults(self):
        entry = SessionEntry.from_dict({"session_key": KEY, "session_id": SID})
        assert entry.created_at is None
        assert entry.origin is None
        assert entry.metadata == {}
        assert entry.last_prompt_tokens == 0
        assert not (entry.suspended or entry.resume_pending or entry.has_active_turn)
        assert not (entry.was_auto_reset or entry.is_fresh_reset or entry.expiry_finalized)

    def test_unknown_fields_are_ignored(self):
        entry = SessionEntry.from_dict(
            {"session_key": KEY, "session_id": SID, "input_tokens": 5, "future": True}
        )
        assert entry.session_id == SID

    def test_missing_key_or_id_is_rejected(self):
        with pytest.raises(ValueError):
            SessionEntry.from_dict({"session_id": SID})
        with pytest.raises(ValueError):
            SessionEntry.from_dict({"session_key": KEY})
        with pytest.raises(ValueError):
            SessionEntry.from_dict("not a dict")

    @pytest.mark.parametrize("bad", ["yesterday", "2024-13-45T00:00:00", "", [], {}, True])
    def test_malformed_timestamps_become_none(self, bad):
        entry = SessionEntry.from_dict(
            {
                "session_key": KEY,
                "session_id": SID,
                "created_at": bad,
                "updated_at": bad,
                "last_resume_marked_at": bad,
            }
        )
        assert entry.created_at is None
        assert entry.updated_at is None
        assert entry.last_resume_marked_at is None

    def test_epoch_numbers_are_accepted(self):
        entry = SessionEntry.from_dict(
            {"session_key": KEY, "session_id": SID, "created_at": T0.timestamp()}
        )
        assert entry.created_at == T0

    def test_zulu_suffix_is_accepted(self):
        entry = SessionEntry.from_dict(
            {"session_key": KEY, "session_id": SID, "created_at": "2024-05-01T12:00:00Z"}
        )
        assert entry.created_at == T0

    @pytest.mark.parametrize(
        "pair",
        [
            {"active_turn_token": "abc"},
            {"active_turn_started_at": "2024-05-01T12:00:00+00:00"},
            {"active_turn_token": "abc", "active_turn_started_at": "garbage"},
            {"active_turn_token": "", "active_turn_started_at": "2024-05-01T12:00:00+00:00"},
            {"active_turn_token": 17, "active_turn_started_at": "2024-05-01T12:00:00+00:00"},
        ],
    )
    def test_malformed_active_turn_pair_is_dropped_as_a_pair(self, pair):
        data = {"session_key": KEY, "session_id": SID, "active_turn_internal": True, **pair}
        entry = SessionEntry.from_dict(data)
        assert entry.active_turn_token is None
        assert entry.active_turn_started_at is None
        assert entry.active_turn_internal is False
        assert not entry.has_active_turn

    def test_well_formed_active_turn_pair_is_kept(self):
        entry = SessionEntry.from_dict(
            {
                "session_key": KEY,
                "session_id": SID,
                "active_turn_token": "abc",
                "active_turn_started_at": "2024-05-01T12:00:00+00:00",
            }
        )
        assert entry.has_active_turn
        assert entry.active_turn_started_at == T0

    def test_origin_of_an_unregistered_plugin_platform_is_dropped(self):
        entry = SessionEntry.from_dict(
            {"session_key": KEY, "session_id": SID, "origin": {"platform": "gone_plugin"}}
        )
        assert entry.origin is None

    def test_wrong_types_degrade_to_defaults(self):
        entry = SessionEntry.from_dict(
            {
                "session_key": KEY,
                "session_id": SID,
                "metadata": [1],
                "last_prompt_tokens": "x",
                "origin": "telegram",
            }
        )
        assert entry.metadata == {}
        assert entry.last_prompt_tokens == 0
        assert entry.origin is None

    def test_naive_timestamps_are_host_local_time(self, tokyo_local_time):
        entry = SessionEntry.from_dict(
            {
                "session_key": KEY,
                "session_id": SID,
                "created_at": "2024-05-01T21:00:00",
                "active_turn_token": "abc",
                "active_turn_started_at": "2024-05-01T21:00:00",
            }
        )
        assert entry.created_at == T0
        assert entry.created_at.tzinfo == UTC
        assert entry.active_turn_started_at == T0


class TestPathSafety:
    """Ids that could escape a directory are rejected; interior slashes in keys are fine."""

    @pytest.mark.parametrize(
        "session_id",
        [
            "..",
            "../etc",
            "20240501_120000_ab..cd",
            "a/b",
            "/abs",
            "a\\b",
            "\\abs",
            "C:evil",
            "c:\\windows",
            "Z:x",
            "",
            "nul\x00byte",
        ],
    )
    def test_unsafe_session_ids_are_rejected(self, session_id):
        with pytest.raises(ValueError):
            SessionEntry.from_dict({"session_key": KEY, "session_id": session_id})
        with pytest.raises(ValueError):
            validate_session_id(session_id)

    @pytest.mark.parametrize(
        "session_key",
        [
            "..",
            "../x",
            "agent:main:..:dm",
            "a/../b",
            "/etc/passwd",
            "\\server\\share",
            "C:\\x",
            "d:agent",
            "",
        ],
    )
    def test_unsafe_session_keys_are_rejected(self, session_key):
        with pytest.raises(ValueError):
            SessionEntry.from_dict({"session_key": session_key, "session_id": SID})
        with pytest.raises(ValueError):
            validate_session_key(session_key)

    def test_unsafe_previous_session_id_is_rejected(self):
        with pytest.raises(ValueError):
            SessionEntry.from_dict(
                {"session_key": KEY, "session_id": SID, "prev_session_id": "../x"}
            )

    def test_interior_slash_in_a_key_is_accepted(self):
        key = "agent:main:matrix:group:!room/with/slashes:example.org"
        assert SessionEntry.from_dict({"session_key": key, "session_id": SID}).session_key == key
        assert validate_session_key(key) == key

    def test_non_string_ids_are_rejected(self):
        with pytest.raises(ValueError):
            SessionEntry.from_dict({"session_key": KEY, "session_id": 123})


class TestEvolve:
    """The hot path's replace: markers, flags and times only, equal to dataclasses.replace."""

    def _entry(self):
        return SessionEntry(session_key="agent:main:telegram:dm:1",
                            session_id="20240101_000000_aaaa0001")

    def test_same_as_replace(self):
        entry = self._entry()
        changes = {"active_turn_token": "t" * 32, "active_turn_started_at": from_epoch(5.0),
                   "updated_at": from_epoch(6.0), "resume_pending": True}
        evolved = entry.evolve(**changes)
        assert evolved == replace(entry, **changes)
        assert evolved.to_dict() == replace(entry, **changes).to_dict()
        assert entry.active_turn_token is None  # the original is untouched

    def test_ids_cannot_be_evolved(self):
        with pytest.raises(TypeError, match="session_id"):
            self._entry().evolve(session_id="../../etc")
