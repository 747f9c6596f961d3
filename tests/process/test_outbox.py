"""The outbox: durable rows in the store, long-poll wake-ups, and the adapters that fill it."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from hermes_actors import Gateway, MessageEvent, SessionSource, load_config
from hermes_actors.adapters.outbox import Outbox, OutboxAdapter
from hermes_actors.errors import HomeInUseError
from hermes_actors.runtime.homelock import HomeLock
from hermes_actors.store import SessionStore
from hermes_actors.store.backends.sqlite.schema import SCHEMA_VERSION
from hermes_actors.testing import FakeClock, wait_until


def _row(store: SessionStore, chat_id: str = "42", text: str = "hi", platform: str = "webhook",
         **kw) -> int:
    return store.outbox_append(session_key=f"agent:main:{platform}:dm:{chat_id}",
                               platform=platform, chat_id=chat_id, thread_id=kw.get("thread"),
                               text=text, kind=kw.get("kind", "reply"), floor=kw.get("floor", 0))


class HeldReads:
    """A store whose first outbox read is held, after it ran, until ``release`` is set
    (``read`` is set then): what a waiter does between its read and its wait is certain."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self.read, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._store, name)

    def outbox_read(self, *args, **kwargs):
        rows = self._store.outbox_read(*args, **kwargs)
        if not self.read.is_set():
            self.read.set()
            self.release.wait(30)
        return rows


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture(params=["sqlite", "degraded"])
def store(request, tmp_path, clock):
    home = tmp_path / "home"
    home.mkdir()
    if request.param == "degraded":
        (home / "state.db").mkdir()  # a directory cannot be opened as a database
    store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
    assert store.degraded == (request.param == "degraded")
    yield store
    store.close()


class TestOutboxStore:
    """Rows are read per chat by cursor, in order, on SQLite and in degraded mode alike."""

    def test_cursors_increase_and_reads_filter_by_chat_and_platform(self, store):
        first = _row(store, "42", "a")
        _row(store, "43", "other chat")
        _row(store, "42", "other platform", platform="api_server")
        second = _row(store, "42", "b", thread="t1", kind="notice")
        rows = store.outbox_read("webhook", "42")
        assert [r["text"] for r in rows] == ["a", "b"]
        assert [r["cursor"] for r in rows] == [first, second] and first < second
        assert rows[1]["thread_id"] == "t1" and rows[1]["kind"] == "notice"
        assert rows[0]["session_key"] == "agent:main:webhook:dm:42"
        assert store.outbox_read("webhook", "42", after=first) == rows[1:]
        assert store.outbox_read("webhook", "42", limit=1) == rows[:1]
        assert store.outbox_head() == second

    def test_prune_drops_old_rows_only(self, store, clock):
        _row(store, text="old")
        clock.advance(8 * 86400)
        _row(store, text="new")
        assert store.outbox_prune(7) == 1
        assert [r["text"] for r in store.outbox_read("webhook", "42")] == ["new"]

    def test_degraded_cursors_continue_above_the_floor(self, store):
        # SQLite numbers rows itself (AUTOINCREMENT); the in-memory outbox of degraded mode
        # continues above the highest cursor clients may have seen from the database, and
        # above the clock in microseconds (its floor since issue 36: the cursors a database
        # handed out, even unseen, are below it), whichever is higher
        cursor = _row(store, floor=500)
        if not store.degraded:
            assert cursor == 1
            return
        assert 1_700_000_000_000_000 < cursor < 2**53
        assert _row(store, floor=2**52) == 2**52 + 1


class TestOutboxDurability:
    """The outbox table comes from a forward migration and cursors are never reused."""

    def test_migration_and_no_reuse_after_prune_and_reopen(self, tmp_path, clock):
        home = tmp_path / "home"
        store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
        last = _row(store, text="x")
        clock.advance(30 * 86400)
        assert store.outbox_prune(7) == 1
        store.close()
        with sqlite3.connect(home / "state.db") as conn:
            assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        again = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
        try:
            assert _row(again, text="y") > last
        finally:
            again.close()


class TestOutboxWaiting:
    """A long poll returns at once when rows exist, and wakes when a reply is appended."""

    @pytest.fixture
    def outbox(self, tmp_path, clock):
        store = SessionStore(tmp_path / "sessions", clock=clock, mirror_interval=None)
        yield Outbox(lambda: store)
        store.close()

    def _wait_in_thread(self, outbox: Outbox, after: int = 0) -> tuple[threading.Thread, list]:
        result: list = []
        thread = threading.Thread(
            target=lambda: result.append(outbox.wait("webhook", "42", after, timeout=30))
        )
        thread.start()
        return thread, result

    def test_a_bounded_chat_memory_loses_no_wake_up(self, tmp_path, clock, monkeypatch):
        """The waiter's chat is forgotten (a memory of one chat) and appended to again, both
        after the waiter read and before it waits: the change must still wake it. The
        store's read is held until both appends are done, so the order is certain."""
        from hermes_actors.adapters import outbox as outbox_module

        monkeypatch.setattr(outbox_module, "CHAT_VERSIONS", 1)
        store = SessionStore(tmp_path / "bounded", clock=clock, mirror_interval=None)
        held = HeldReads(store)
        read, release = held.read, held.release
        thread = None
        try:
            bounded = Outbox(lambda: held)
            bounded.append(SessionSource("webhook", chat_id="42"), "first", kind="reply")
            result: list = []
            thread = threading.Thread(target=lambda: result.append(
                bounded.wait("webhook", "42", bounded.head(), timeout=120)))
            thread.start()
            assert read.wait(30)  # it read (nothing new) and has not waited yet
            bounded.append(SessionSource("webhook", chat_id="43"), "other", kind="reply")
            bounded.append(SessionSource("webhook", chat_id="42"), "late", kind="reply")
            release.set()
            thread.join(30)  # a lost wake-up would hold it for the whole 120 s
            assert not thread.is_alive()
            assert [r["text"] for r in result[0]] == ["late"]
        finally:
            release.set()
            if thread is not None:
                thread.join(130)
            store.close()

    @pytest.mark.parametrize("told", ["note_unknown", "note_append"])
    def test_changes_told_by_other_nodes_wake_waiters(self, tmp_path, clock, told):
        """``note_append`` (another node appended to the chat) and ``note_unknown`` (appends
        may have gone unheard) after a waiter read make it read again; a row another node
        appended meanwhile is returned."""
        store = SessionStore(tmp_path / "told", clock=clock, mirror_interval=None)
        held = HeldReads(store)
        outbox = Outbox(lambda: held)
        thread = None
        try:
            thread, result = self._wait_in_thread(outbox, outbox.head())
            assert held.read.wait(30)  # it read (nothing) and has not waited yet
            _row(store, text="from another node")  # in the database, unheard here
            if told == "note_unknown":
                outbox.note_unknown()
            else:
                outbox.note_append("webhook", "42")
            held.release.set()
            thread.join(timeout=25)  # unheard, the wait would last its whole 30 s
            assert not thread.is_alive()
            assert [r["text"] for r in result[0]] == ["from another node"]
        finally:
            held.release.set()
            if thread is not None:
                thread.join(40)
            store.close()

    def test_an_append_wakes_every_reader_of_its_chat_and_no_other(self, outbox):
        """Readers wait per chat: an append to one wakes all of its readers, while a reader
        of another chat waits on (until its own append or the close); none is left
        counted once it returned."""
        start = outbox.head()
        results: dict[str, list] = {}

        def reader(name: str, chat: str) -> threading.Thread:
            thread = threading.Thread(target=lambda: results.__setitem__(
                name, outbox.wait("webhook", chat, start, timeout=30)))
            thread.start()
            return thread

        first, second, other = reader("a", "42"), reader("b", "42"), reader("c", "43")
        wait_until(lambda: outbox.readers == 3, 30, message="three waiting readers")
        outbox.append(SessionSource("webhook", chat_id="42"), "to 42", kind="reply")
        first.join(30)
        second.join(30)
        assert [r["text"] for r in results["a"]] == [r["text"] for r in results["b"]] == [
            "to 42"]
        assert other.is_alive() and outbox.readers == 1
        outbox.append(SessionSource("webhook", chat_id="43"), "to 43", kind="reply")
        other.join(30)
        assert [r["text"] for r in results["c"]] == ["to 43"]
        assert outbox.readers == 0

    def test_close_releases_the_readers_of_every_chat(self, outbox):
        threads = [self._wait_in_thread(outbox)[0] for _ in range(2)]
        extra: list = []
        threads.append(threading.Thread(
            target=lambda: extra.append(outbox.wait("webhook", "43", 0, timeout=30))))
        threads[-1].start()
        wait_until(lambda: outbox.readers == 3, 30, message="three waiting readers")
        outbox.close()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        assert extra == [[]] and outbox.readers == 0

    def test_rows_present_return_at_once(self, outbox):
        cursor = outbox.append(SessionSource("webhook", chat_id="42"), "ready", kind="reply")
        assert [r["cursor"] for r in outbox.wait("webhook", "42", 0, timeout=30)] == [cursor]

    def test_append_wakes_a_waiting_reader(self, outbox):
        start = outbox.head()
        thread, result = self._wait_in_thread(outbox, start)
        outbox.append(SessionSource("webhook", chat_id="42"), "late", kind="reply")
        thread.join(timeout=30)
        assert not thread.is_alive() and [r["text"] for r in result[0]] == ["late"]

    def test_other_chats_do_not_satisfy_a_reader(self, outbox):
        outbox.append(SessionSource("webhook", chat_id="99"), "not yours", kind="reply")
        assert outbox.wait("webhook", "42", 0, timeout=0.05) == []

    def test_close_releases_readers_and_refuses_appends(self, outbox):
        thread, result = self._wait_in_thread(outbox)
        outbox.close()
        thread.join(timeout=30)
        assert not thread.is_alive() and result == [[]]
        adapter = OutboxAdapter("webhook", outbox)
        assert adapter.connected is False
        sent = adapter.send(SessionSource("webhook", chat_id="42"), "too late")
        assert sent.success is False and "closed" in sent.error


class TestOutboxAdapterInAGateway:
    """Replies and notices of an embedded gateway land in the outbox with the ledger's kind."""

    def test_reply_and_notice_kinds(self, tmp_path):
        outbox = Outbox()
        adapters = [OutboxAdapter(p, outbox) for p in ("webhook", "api_server")]
        gateway = Gateway(tmp_path / "home", load_config({}, env={}), adapters=adapters)
        outbox.bind(lambda: gateway.store)
        gateway.start()
        try:
            source = SessionSource("webhook", chat_id="7", user_id="u")
            hello = gateway.submit(MessageEvent(source=source, text="hello"))
            assert gateway.wait_idle(timeout=30)
            status = gateway.submit(MessageEvent(source=source, text="/status"))
            assert gateway.wait_idle(timeout=30)
            rows = outbox.read("webhook", "7")
        finally:
            gateway.stop(drain_timeout=5)
        assert [(r["text"], r["kind"]) for r in rows][0] == ("echo: hello", "reply")
        assert rows[1]["kind"] == "notice" and rows[1]["text"].startswith("Session: ")
        assert rows[0]["session_key"] == "agent:main:webhook:dm:7"
        # each row names the event it answers
        assert [r["in_reply_to"] for r in rows] == [hello, status]

    def test_a_redelivered_reply_keeps_the_event_it_answers(self, tmp_path):
        outbox = Outbox()
        adapters = [OutboxAdapter("webhook", outbox)]
        home = tmp_path / "home"
        store = SessionStore(home / "sessions", mirror_interval=None)
        source = SessionSource("webhook", chat_id="8")
        key = store.get_or_create_session(source).session_key
        store.ledger_record(session_key=key, platform="webhook", chat_id="8", thread_id=None,
                            content="owed", kind="reply", token="t",
                            in_reply_to=("e1", "e2"))  # recorded, never sent: a crash
        store.close()
        gateway = Gateway(home, load_config({}, env={}), adapters=adapters)
        outbox.bind(lambda: gateway.store)
        try:
            assert gateway.start().redelivered == 1
            [row] = outbox.read("webhook", "8")
        finally:
            gateway.stop(drain_timeout=5)
        assert (row["text"], row["kind"], row["in_reply_to"]) == ("owed", "reply", "e1 e2")


class TestHomeLock:
    """One holder per home; the refusal names the holder; release lets the next one in."""

    def test_second_holder_is_refused_until_release(self, tmp_path):
        first = HomeLock(tmp_path).acquire()
        with pytest.raises(HomeInUseError, match=r"in use by a running gateway \(pid \d+\)"):
            HomeLock(tmp_path).acquire()
        first.release()
        with HomeLock(tmp_path) as second:
            assert second.held
        assert (tmp_path / "gateway.lock").exists()
