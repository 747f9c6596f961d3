"""The pure lifecycle and loading rules, without threads or disks."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import timedelta

import pytest

from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.timeutil import from_epoch
from hermes_actors.store import lifecycle
from hermes_actors.store.loader import merge_entries
from hermes_actors.store.recovery import judge_marker
from hermes_actors.store.routing import (
    FLAG_FIELDS,
    NO_FLAGS,
    RoutingRow,
    entry_text,
    flags_of,
    same_text,
)
from hermes_actors.store.transcript import normalize_message

from .conftest import T0, dm

KEY = "agent:main:telegram:dm:42"


def _row(entry: SessionEntry) -> RoutingRow:
    return RoutingRow(entry.session_key, entry_text(entry), flags_of(entry))


def _entry(**flags) -> SessionEntry:
    flags.setdefault("created_at", from_epoch(T0))
    flags.setdefault("updated_at", from_epoch(T0))
    return SessionEntry(KEY, "20231114_221320_0000abcd", **flags)


class TestAccessAction:
    """§6's order: missing, force_new, suspended, resume_pending, then touch or keep."""

    @pytest.mark.parametrize(
        ("entry", "force_new", "touch", "action"),
        [
            (None, False, True, "create"),
            (None, True, True, "create"),
            (_entry(suspended=True), True, True, "force_new"),
            (_entry(suspended=True, resume_pending=True), False, True, "rotate"),
            (_entry(resume_pending=True), False, True, "resume"),
            (_entry(), False, True, "touch"),
            (_entry(), False, False, "keep"),
        ],
    )
    def test_order(self, entry, force_new, touch, action):
        assert lifecycle.access_action(entry, force_new=force_new, touch_activity=touch) == action

    def test_successor_resets_flags_and_links(self):
        old = _entry(suspended=True, resume_pending=True, resume_reason="x",
                     active_turn_token="t", active_turn_started_at=from_epoch(T0),
                     origin=dm(), display_name="DM with Alice")  # fmt: skip
        new = lifecycle.successor(old, from_epoch(T0 + 1), None, is_fresh_reset=True)
        assert new.prev_session_id == old.session_id and new.session_id != old.session_id
        assert not (new.suspended or new.resume_pending or new.has_active_turn)
        assert new.origin == old.origin and new.is_fresh_reset


class TestMarkerAge:
    """Markers without a reply are judged by epoch age; boundaries only ever lose the
    marker (``judge_marker``, the one rule of recovery)."""

    def _marked(self, started: float, **flags) -> SessionEntry:
        return _entry(active_turn_token="t", active_turn_started_at=from_epoch(started), **flags)

    def test_rules(self):
        def action(entry):
            return judge_marker(entry, None, T0, 3600).action

        assert action(self._marked(T0 - 10)) == "resume"
        assert action(self._marked(T0 - 3601)) == "expire"
        assert action(self._marked(T0 + 60)) == "resume"  # a clock stepped back
        assert action(self._marked(T0 - 10, suspended=True)) == "expire"
        assert action(self._marked(T0 - 10, expiry_finalized=True)) == "expire"


class TestStale:
    """Pruning considers only entries idle since the cutoff with nothing pending."""

    def test_is_stale(self):
        assert lifecycle.is_stale(_entry(), T0 + 1)
        assert not lifecycle.is_stale(_entry(), T0)
        assert not lifecycle.is_stale(_entry(suspended=True), T0 + 1)
        assert not lifecycle.is_stale(_entry(created_at=None, updated_at=None), T0 + 1)


class TestMerge:
    """Database rows first, mirror fills gaps (or wins after degraded mode), bad ones skipped."""

    def test_rules(self):
        db_entry = _entry(resume_pending=True)
        mirror_entry = _entry().to_dict()
        other = replace(_entry(), session_key=KEY + "0").to_dict()
        result = merge_entries([_row(db_entry)], {KEY: mirror_entry, KEY + "0": other})
        assert result.entries[KEY].resume_pending and result.from_mirror == [KEY + "0"]
        won = merge_entries([_row(db_entry)], {KEY: mirror_entry}, mirror_wins=True)
        assert not won.entries[KEY].resume_pending and won.from_mirror == [KEY]

    def test_key_mismatch_and_bad_json_are_skipped(self):
        result = merge_entries([RoutingRow("agent:x", "{not json", NO_FLAGS),
                                RoutingRow(KEY + "1", entry_text(_entry()), NO_FLAGS)], {})
        assert result.entries == {} and [k for k, _ in result.skipped] == ["agent:x", KEY + "1"]


class TestMessageShape:
    """Messages are normalised to §17.13; ISO timestamps become epoch seconds."""

    def test_normalise(self):
        msg = normalize_message({"role": "user", "content": "x", "extra": 1,
                                 "timestamp": "2023-11-15T07:13:20+09:00"}, now=0.0)  # fmt: skip
        assert msg == {"role": "user", "content": "x", "timestamp": T0}


class TestSameText:
    """``same_text``: only a change outside the flag columns needs the entry text written."""

    @staticmethod
    def _other(value):
        if isinstance(value, bool):
            return not value
        if value is None:
            return "20231114_221320_0000beef"  # valid wherever a text or an id may stand
        if hasattr(value, "tzinfo"):
            return value + timedelta(seconds=1)
        if isinstance(value, int):
            return value + 1
        if isinstance(value, str):
            return value + "x" if ":" in value else "20231114_221320_0000beef"
        return None

    @pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(SessionEntry)])
    def test_each_field(self, name):
        old = _entry(origin=dm(), active_turn_token="t1", active_turn_started_at=from_epoch(T0))
        changed = old.__dict__ | {name: self._other(getattr(old, name))}
        assert changed[name] != getattr(old, name)
        new = object.__new__(SessionEntry)
        new.__dict__.update(changed)
        assert same_text(old, new) is (name in FLAG_FIELDS)
        assert same_text(old, old)
