"""One routing change costs the same at 100 and at 10,000 sessions (no timing, only work)."""

from __future__ import annotations

from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.timeutil import from_epoch
from hermes_actors.store import SessionDB
from hermes_actors.store.ops import CreateSession, PutRouting
from hermes_actors.store.routing import entry_text, flags_of

from .conftest import T0, dm


def _seed(home, count: int) -> None:
    """``count`` sessions written straight into a fresh state.db in one transaction."""
    ops = []
    for n in range(count):
        entry = SessionEntry(
            session_key=f"agent:main:telegram:dm:seed{n}",
            session_id=f"20231114_000000_{n:08x}",
            created_at=from_epoch(T0),
            updated_at=from_epoch(T0),
        )
        ops.append(CreateSession(entry.session_id, entry.session_key, None, T0))
        ops.append(PutRouting(entry.session_key, entry_text(entry), *flags_of(entry)))
    db = SessionDB(home / "state.db")
    db.apply(ops)
    db.close()


def _cost_of_one_change(make_store, home, count: int) -> tuple[list[str], int]:
    _seed(home, count)
    store = make_store()
    assert len(store.list_sessions()) == count
    entry = store.get_or_create_session(dm())
    store.flush()
    mirror_writes = store.statistics().mirror_writes
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    assert store.mark_resume_pending(entry.session_key, "restart_timeout")
    store.db.set_trace_callback(None)
    return statements, store.statistics().mirror_writes - mirror_writes


class TestRoutingScale:
    """A change is one upsert of one row, and the mirror is not rewritten per change."""

    def test_change_cost_does_not_grow_with_sessions(self, make_store, tmp_path):
        small_home, large_home = tmp_path / "small", tmp_path / "large"
        small_home.mkdir()
        large_home.mkdir()
        small, small_mirror = _cost_of_one_change(
            lambda: make_store(small_home / "sessions"), small_home, 100
        )
        large, large_mirror = _cost_of_one_change(
            lambda: make_store(large_home / "sessions"), large_home, 10_000
        )
        # BEGIN, the op list's id (ops.ListId), one upsert, COMMIT
        assert len(small) == len(large) == 4
        assert [s.split()[0] for s in large] == ["BEGIN", "INSERT", "INSERT", "COMMIT"]
        assert "applied_lists" in large[1]
        assert "ON CONFLICT" in large[2] and '"routing"' in large[2]
        assert small_mirror == large_mirror == 0
