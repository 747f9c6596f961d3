"""Writes on PostgreSQL: group commit of concurrent callers with list-by-list replay,
``apply_later`` that never blocks, retries on a fresh connection, and the node's files."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.ops import NodeValue, OutboxAppend, PutRouting, SetRoutingFlags
from hermes_actors.store.routing import NO_FLAGS
from hermes_actors.testing import wait_until

MARKED = NO_FLAGS._replace(active_turn_token="t" * 32)


class _NotAnOp:
    """Something no backend can apply."""


def _put(key: str) -> PutRouting:
    return PutRouting(key, "{}", *NO_FLAGS)


class _RowLock:
    """Holds a lock on routing row ``key`` from another session, so the committer's next
    transaction that touches it waits on the server while callers pile up behind it."""

    def __init__(self, dsn: str, key: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.conn.execute("SELECT 1 FROM routing WHERE session_key = %s FOR UPDATE", (key,))

    def waiters(self) -> int:
        return self.conn.execute(  # a second connection: this one is in its transaction
            "SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


class TestGroupCommit:
    """Lists waiting together share one transaction; a bad one fails only its caller."""

    def test_waiting_lists_share_a_transaction_and_a_bad_one_fails_alone(self, pg,
                                                                          postgres_dsn):
        pg.apply([_put("blocker")])
        lock = _RowLock(postgres_dsn, "blocker")
        results: dict[str, object] = {}

        def call(name: str, ops: list) -> threading.Thread:
            def target() -> None:
                try:
                    results[name] = pg.apply(ops)
                except StoreError as exc:
                    results[name] = exc

            thread = threading.Thread(target=target)
            thread.start()
            return thread

        first = call("first", [SetRoutingFlags("blocker", *MARKED)])
        with psycopg.connect(postgres_dsn, autocommit=True) as watcher:
            wait_until(lambda: watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] == 1,
                30, 0.002, "a lock wait")
        before = pg.statistics()
        threads = []
        for n, ops in enumerate([[_put("a")], [_put("b"), _NotAnOp()], [_put("c")]]):
            threads.append(call(f"l{n}", ops))
            wait_until(lambda n=n: pg.statistics().waiting == n + 1, 30, 0.002,
                       f"{n + 1} waiting calls")  # fixes their order
        lock.release()
        for thread in [first, *threads]:
            thread.join(30)
        assert results["first"] == [1]
        assert results["l0"] == [None] and results["l2"] == [None]
        assert isinstance(results["l1"], StoreError)
        assert sorted(pg.routing_keys()) == ["a", "blocker", "c"]  # nothing of l1
        after = pg.statistics()
        assert after.largest_group == 3
        assert after.transactions - before.transactions == 2  # the blocked one, then all three

    def test_apply_later_returns_while_the_writer_waits(self, pg, postgres_dsn):
        pg.apply([_put("blocker")])
        lock = _RowLock(postgres_dsn, "blocker")
        done = threading.Event()
        seen: list = []
        pg.apply_later([SetRoutingFlags("blocker", *MARKED)],
                       lambda ok, value: (seen.append((ok, value)), done.set()))
        pg.apply_later([_put("later")], lambda ok, value: seen.append((ok, value)))
        assert seen == []  # both calls returned although nothing could commit yet
        lock.release()
        assert done.wait(30)
        wait_until(lambda: len(seen) == 2, 30, 0.002, "both answers")
        assert seen == [(True, [1]), (True, [None])]


class TestReconnect:
    """A connection the server dropped is replaced, for writes (nothing was committed yet)
    and for reads."""

    def test_writes_and_reads_survive_a_terminated_connection(self, pg, postgres_dsn):
        pg.apply([_put("a")])
        assert pg.routing_row("a") is not None
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            mine = admin.info.backend_pid
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> %s"
                " AND application_name = 'hermes_actors'", (mine,))
        pg.apply([_put("b")])
        assert sorted(pg.routing_keys()) == ["a", "b"]


class TestNodeFiles:
    """The node id is the home's; node state a degraded start left there is imported."""

    def test_node_id_lives_in_the_home(self, open_pg, home):
        node = open_pg().node_id()
        assert (home / "node_id").read_text().strip() == node

    def test_home_files_are_imported_and_removed(self, open_pg, home):
        (home / "node_id").write_text("n" * 32 + "\n")
        (home / "restart_counts.json").write_text(json.dumps({"k": 2}))
        pg = open_pg()
        assert pg.node_id() == "n" * 32
        assert pg.node_values("n" * 32) == {"restart_counts": '{"k": 2}'}
        assert not (home / "restart_counts.json").exists()
        pg.apply([NodeValue("n" * 32, "restart_counts", None)])
        assert pg.node_values("n" * 32) == {}


class TestDegradedJournalImport:
    """A degraded run's outbox rows reach PostgreSQL with the cursors its readers saw
    (issue 36): the identity's sequence continues above them, never back."""

    def test_imported_rows_keep_their_cursors(self, pg, home):
        from hermes_actors.store import SessionStore
        from hermes_actors.store.backends.files.backend import FilesBackend
        from hermes_actors.store.backends.files.jsonl import JsonlTranscripts

        def append(text: str) -> OutboxAppend:
            return OutboxAppend("k", "webhook", "42", None, text, "reply", 1.0)

        before = pg.apply([append("db0"), append("db1")])
        (home / "sessions").mkdir()
        degraded = FilesBackend(home, JsonlTranscripts(home / "sessions"))  # saw no row
        read = degraded.apply([append("d0"), append("d1")])
        degraded.close()
        assert before[-1] < read[0] < read[1] < 2**53
        store = SessionStore(home / "sessions", db=pg, mirror_interval=None)
        try:
            assert not store.degraded
            rows = store.outbox_read("webhook", "42", before[-1])
            assert [(r["cursor"], r["text"]) for r in rows] == [(read[0], "d0"),
                                                                (read[1], "d1")]
            later = store.outbox_append(session_key="k", platform="webhook", chat_id="42",
                                        thread_id=None, text="after", kind="reply")
        finally:
            store.close()
        assert later > read[-1]
        assert [r["text"] for r in pg.outbox_read("webhook", "42", read[-1], 10)] == ["after"]


@pytest.mark.parametrize("bad", ["half an emoji \ud83d"])
def test_text_the_server_cannot_store_fails_only_the_call(pg, bad):
    with pytest.raises(StoreError, match="rejected"):
        pg.apply([PutRouting("k", bad, *NO_FLAGS)])
    pg.apply([_put("k")])
    assert pg.routing_row("k") is not None


class TestOutboxOrderAcrossNodes:
    """Two nodes appending to one chat: the second waits for the first's commit, so one
    chat's cursors become visible in their order (a reader past a later cursor would
    otherwise never see an earlier one that committed late)."""

    def test_an_append_waits_for_an_earlier_uncommitted_one_of_its_chat(self, pg,
                                                                        postgres_dsn):
        from hermes_actors.store.backends.postgres.operations import _OUTBOX_APPEND
        from hermes_actors.store.backends.postgres.writer import (
            _OUTBOX_LOCKS,
            OUTBOX_LOCK_CLASS,
            outbox_lock_keys,
        )

        def append(text: str) -> OutboxAppend:
            return OutboxAppend("agent:main:webhook:group:g1:u", "webhook", "g1", None, text,
                                "reply", 1.0)

        other = psycopg.connect(postgres_dsn)  # another node's writer, mid-transaction
        other.execute(_OUTBOX_LOCKS, (OUTBOX_LOCK_CLASS, outbox_lock_keys([[append("a")]])))
        first = other.execute(_OUTBOX_APPEND, ("k", "webhook", "g1", None, "first", "reply",
                                               1.0, None)).fetchone()[0]
        done: dict[str, object] = {}
        appender = threading.Thread(target=lambda: done.update(c=pg.apply([append("second")])))
        appender.start()
        watcher = psycopg.connect(postgres_dsn, autocommit=True)
        try:  # this node's append waits for the chat's lock
            wait_until(lambda: watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0,
                30, 0.002, "a lock wait")
            assert "c" not in done
        finally:
            other.commit()
            other.close()
            watcher.close()
        appender.join(30)
        [second] = done["c"]
        assert second > first

    def test_lock_keys_are_one_per_chat_sorted_and_fit_an_int4(self):
        from hermes_actors.store.backends.postgres.writer import outbox_lock_keys

        ops = [OutboxAppend("k", "webhook", chat, None, "t", "reply", 1.0)
               for chat in ("c", "a", "b", "a")]
        keys = outbox_lock_keys([ops[:2], ops[2:], [NodeValue("n", "x", "1")]])
        assert len(keys) == 3 and keys == sorted(keys)
        assert all(-(1 << 31) <= k < (1 << 31) for k in keys)
        assert outbox_lock_keys([[NodeValue("n", "x", "1")]]) == []
