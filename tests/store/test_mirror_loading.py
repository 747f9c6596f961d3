"""sessions.json: an atomic, coalesced mirror; loading tolerates hostile or broken files."""

from __future__ import annotations

import json
import logging

import pytest

from hermes_actors.config import load_config
from hermes_actors.store import SessionDB, atomic_write_bytes, atomic_write_json
from hermes_actors.store.backends.files.mirror import README

from .conftest import dm


def _mirror(home) -> dict:
    return json.loads((home / "sessions" / "sessions.json").read_text())


def _leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


class TestAtomicWrite:
    """Atomic writes replace a file whole and leave no temporary file behind."""

    def test_replaces_and_cleans_up(self, tmp_path):
        target = tmp_path / "counts.json"
        atomic_write_json(target, {"a": 1})
        atomic_write_json(target, {"a": 2})
        assert json.loads(target.read_text()) == {"a": 2}
        assert _leftovers(tmp_path) == []

    def test_failure_keeps_the_old_file(self, tmp_path):
        target = tmp_path / "counts.json"
        atomic_write_json(target, {"a": 1})
        with pytest.raises(TypeError):
            atomic_write_json(target, {"a": object()})
        assert json.loads(target.read_text()) == {"a": 1}
        with pytest.raises(OSError):
            atomic_write_bytes(tmp_path / "missing-dir" / "x.json", b"{}")
        assert _leftovers(tmp_path) == []

    def test_keeps_permissions_of_an_existing_file(self, tmp_path):
        target = tmp_path / "f.json"
        target.write_text("{}")
        target.chmod(0o640)
        atomic_write_json(target, {})
        assert target.stat().st_mode & 0o777 == 0o640


class TestMirrorFile:
    """The mirror is valid JSON with ``_README`` first, written on flush, not per change."""

    def test_readme_first_then_entries(self, store, home):
        entry = store.get_or_create_session(dm())
        store.flush()
        data = _mirror(home)
        assert list(data)[0] == "_README" and data["_README"] == README
        assert data[entry.session_key] == entry.to_dict()
        assert _leftovers(home / "sessions") == []

    def test_changes_are_coalesced_until_flush(self, store, home):
        store.get_or_create_session(dm("1"))
        store.flush()
        writes = store.statistics().mirror_writes
        for chat in range(2, 12):
            store.get_or_create_session(dm(str(chat)))
        assert store.statistics().mirror_writes == writes
        assert store.statistics().mirror_dirty
        assert store.flush()
        assert store.statistics().mirror_writes == writes + 1
        assert len(_mirror(home)) == 12

    def test_close_always_flushes(self, make_store, home):
        store = make_store()
        entry = store.get_or_create_session(dm())
        store.close()
        assert entry.session_key in _mirror(home)

    def test_write_sessions_json_false_writes_no_mirror(self, make_store, home):
        store = make_store(config=load_config({"write_sessions_json": False}, env={}))
        store.get_or_create_session(dm())
        store.flush()
        store.close()
        assert not (home / "sessions" / "sessions.json").exists()

    def test_timer_writes_the_mirror(self, make_store, home):
        store = make_store(mirror_interval=0.01)
        entry = store.get_or_create_session(dm())
        assert store._core._mirror.wait_clean(timeout=30)
        assert entry.session_key in _mirror(home)


class TestLoading:
    """DB rows load first, then mirror entries the DB lacks; bad entries are skipped singly."""

    def test_traversal_ids_are_skipped_with_one_warning_each(self, make_store, home, caplog):
        good = {"session_key": "agent:main:telegram:dm:1", "session_id": "20240101_000000_aaaa0001"}
        mirror = {
            "_README": "hand written",
            "agent:main:telegram:dm:1": good,
            "agent:main:telegram:dm:2": {"session_key": "agent:main:telegram:dm:2",
                                         "session_id": "../../etc/passwd"},
            "../escape": {"session_key": "../escape", "session_id": "20240101_000000_aaaa0002"},
            "agent:main:telegram:dm:3": "not an object",
            "agent:main:telegram:dm:4": {"session_key": "agent:main:telegram:dm:4",
                                         "session_id": "C:evil"},
        }  # fmt: skip
        (home / "sessions").mkdir()
        (home / "sessions" / "sessions.json").write_text(json.dumps(mirror))
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            store = make_store()
        assert [e.session_key for e in store.list_sessions()] == ["agent:main:telegram:dm:1"]
        for bad in ("dm:2", "../escape", "dm:3", "dm:4"):
            hits = [r for r in caplog.records if "skipping session entry" in r.getMessage()
                    and bad in r.getMessage()]  # fmt: skip
            assert len(hits) == 1, bad
        assert {r.session_key for r in store.db.routing_rows()} == {"agent:main:telegram:dm:1"}

    def test_corrupt_mirror_is_kept_aside_and_ignored(self, make_store, home, caplog):
        (home / "sessions").mkdir()
        (home / "sessions" / "sessions.json").write_text("[1, 2")
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            store = make_store()
        assert store.list_sessions() == []
        copies = list((home / "sessions").glob("sessions.json.corrupt-*"))
        assert len(copies) == 1 and copies[0].read_text() == "[1, 2"
        assert any("not a JSON object" in r.getMessage() for r in caplog.records)
        store.get_or_create_session(dm())
        store.flush()
        assert len(_mirror(home)) == 2

    def test_non_object_mirror_is_treated_as_empty(self, make_store, home):
        (home / "sessions").mkdir()
        (home / "sessions" / "sessions.json").write_text('["a list"]')
        assert make_store().list_sessions() == []

    def test_dropped_routing_table_is_rebuilt_from_the_mirror(self, make_store, home):
        store = make_store()
        entries = [store.get_or_create_session(dm(str(n))) for n in range(3)]
        store.mark_resume_pending(entries[0].session_key, "restart_timeout")
        store.close()
        db = SessionDB(home / "state.db")
        db.sql("DROP TABLE routing")
        db.close()
        again = make_store()
        assert {e.session_key for e in again.list_sessions()} == {e.session_key for e in entries}
        assert again.get(entries[0].session_key).resume_reason == "restart_timeout"
        assert len(again.db.routing_rows()) == 3

    def test_database_wins_over_a_stale_mirror(self, make_store, home):
        store = make_store()
        entry = store.get_or_create_session(dm())
        store.flush()
        stale = (home / "sessions" / "sessions.json").read_text()
        store.mark_resume_pending(entry.session_key, "restart_timeout")
        store.close()
        (home / "sessions" / "sessions.json").write_text(stale)
        assert make_store().get(entry.session_key).resume_pending
