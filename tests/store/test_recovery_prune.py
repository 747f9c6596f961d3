"""Recovery and pruning passes: judged by durable markers and epoch seconds, failing closed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.timeutil import epoch, from_epoch

from .conftest import T0, dm

DAY = 86400.0


def _with_marker(key: str, started: str, **flags) -> dict:
    """A hand-written mirror entry whose turn marker was written with another offset."""
    entry = SessionEntry(
        session_key=key, session_id="20231114_000000_aaaaaaaa", created_at=from_epoch(T0 - 99),
        updated_at=from_epoch(T0 - 99), **flags,
    ).to_dict()  # fmt: skip
    entry["active_turn_token"] = "a" * 32
    entry["active_turn_started_at"] = started
    return entry


class TestRecoverInterruptedTurns:
    """Fresh markers become resume_pending once; old or bounded ones are only cleared."""

    def test_fresh_marker_resumes_and_old_marker_clears(self, store, clock):
        fresh = store.get_or_create_session(dm("1"))
        stale = store.get_or_create_session(dm("2"))
        store.mark_turn_active(stale.session_key)
        clock.advance(5000)
        store.mark_turn_active(fresh.session_key)
        clock.advance(10)
        assert store.recover_interrupted_turns(3600) == 1
        resumed = store.get(fresh.session_key)
        assert resumed.resume_pending and resumed.resume_reason == "restart_interrupted"
        assert resumed.active_turn_token is None
        assert epoch(resumed.last_resume_marked_at) == T0 + 5010
        cleared = store.get(stale.session_key)
        assert not cleared.resume_pending and cleared.active_turn_token is None
        assert store.recover_interrupted_turns(3600) == 0

    def test_existing_pending_reason_is_kept(self, store):
        entry = store.get_or_create_session(dm())
        store.mark_resume_pending(entry.session_key, "restart_timeout")
        store.mark_turn_active(entry.session_key)
        assert store.recover_interrupted_turns(3600) == 1
        assert store.get(entry.session_key).resume_reason == "restart_timeout"

    def test_suspended_entry_only_loses_its_marker(self, store):
        entry = store.get_or_create_session(dm())
        store.mark_turn_active(entry.session_key)
        store.suspend_session(entry.session_key)
        assert store.recover_interrupted_turns(3600) == 0
        after = store.get(entry.session_key)
        assert after.suspended and not after.resume_pending and after.active_turn_token is None

    def test_other_utc_offsets_compare_as_epoch_seconds(self, make_store, home):
        tokyo = timezone(timedelta(hours=9))
        ten_min_ago = datetime.fromtimestamp(T0 - 600, tokyo).isoformat()
        two_hours_ago = datetime.fromtimestamp(T0 - 7200, tokyo).isoformat()
        assert ten_min_ago.endswith("+09:00")
        mirror = {
            "agent:main:telegram:dm:1": _with_marker("agent:main:telegram:dm:1", ten_min_ago),
            "agent:main:telegram:dm:2": _with_marker("agent:main:telegram:dm:2", two_hours_ago),
        }
        (home / "sessions").mkdir()
        (home / "sessions" / "sessions.json").write_text(json.dumps(mirror))
        store = make_store()
        assert store.recover_interrupted_turns(3600) == 1
        assert store.get("agent:main:telegram:dm:1").resume_pending
        assert not store.get("agent:main:telegram:dm:2").resume_pending
        assert store.get("agent:main:telegram:dm:2").active_turn_token is None

    def test_discard_active_turn_markers(self, store):
        a = store.get_or_create_session(dm("1"))
        store.get_or_create_session(dm("2"))
        store.mark_turn_active(a.session_key)
        assert store.discard_active_turn_markers() == 1
        assert store.get(a.session_key).active_turn_token is None
        assert not store.get(a.session_key).resume_pending
        assert store.discard_active_turn_markers() == 0


class TestPrune:
    """Pruning drops idle routing entries only; protected ones and transcripts stay."""

    def _aged(self, store, clock):
        keys = {}
        for name in ("plain", "suspended", "active", "raising", "recent"):
            keys[name] = store.get_or_create_session(dm(name)).session_key
        store.suspend_session(keys["suspended"])
        clock.advance(91 * DAY)
        store.get_or_create_session(dm("recent"))
        return keys

    def test_rules(self, make_store, clock):
        def has_active_processes(key: str) -> bool:
            if key.endswith(":raising"):
                raise RuntimeError("process table unavailable")
            return key.endswith(":active")

        store = make_store(has_active_processes_fn=has_active_processes)
        keys = self._aged(store, clock)
        plain = store.get(keys["plain"])
        store.append_message(plain.session_id, {"role": "user", "content": "keep me"})
        assert store.prune_stale_entries(90) == 1
        assert store.get(keys["plain"]) is None
        for name in ("suspended", "active", "raising", "recent"):
            assert store.get(keys[name]) is not None, name
        assert store.load_transcript(plain.session_id)[0]["content"] == "keep me"
        assert keys["plain"] not in store.db.routing_keys()

    def test_zero_disables(self, store, clock):
        self._aged(store, clock)
        assert store.prune_stale_entries(0) == 0
        assert len(store.list_sessions()) == 5

    def test_pruned_key_starts_fresh_and_prune_survives_reopen(self, make_store, clock):
        store = make_store()
        old = store.get_or_create_session(dm())
        clock.advance(91 * DAY)
        assert store.prune_stale_entries(90) == 1
        store.close()
        reopened = make_store()
        assert reopened.get(old.session_key) is None
        assert reopened.get_or_create_session(dm()).session_id != old.session_id
