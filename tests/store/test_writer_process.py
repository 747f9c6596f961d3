"""The writer process (gevent mode): the child commits the op lists with group commit, reads
see every write submitted before them, a dead child turns into StoreUnavailableError, and
the child never outlives its parent."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_actors.errors import ConfigError, StoreError, StoreUnavailableError
from hermes_actors.store import SessionDB
from hermes_actors.store.backends.sqlite.db import WRITER_ENV
from hermes_actors.store.backends.sqlite.writer_process import (
    LOCK_SUFFIX,
    decode_ops,
    encode_ops,
    writer_lock,
)
from hermes_actors.testing import wait_until

PRELUDE = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()

    import os, signal, sys
    import gevent
    from gevent.threadpool import ThreadPool

    from hermes_actors.errors import StoreError
    from hermes_actors.store import SessionDB
    from hermes_actors.errors import StoreUnavailableError
    from hermes_actors.store.ops import AppendMessage, CreateSession, PutRouting
    from hermes_actors.testing import wait_until

    def ops(n):
        key, sid = f"agent:main:telegram:dm:{n}", f"20231114_000000_{n:08x}"
        return [CreateSession(sid, key, None, 1.0), PutRouting(key, "{}", None, None, False, False, False, 1.0)]

    db = SessionDB(sys.argv[1])
    assert db.writer == "process" and db.writer_pid, db.writer
    """
)

GROUPS = PRELUDE + textwrap.dedent(
    """
    bad = AppendMessage("20231114_000000_00000000", {"role": None, "content": "x",
                                                      "timestamp": 1.0})
    writers = [gevent.spawn(db.apply, ops(n)) for n in range(50)]
    failing = gevent.spawn(db.apply, [bad])
    gevent.joinall(writers, raise_error=True, timeout=30)
    failing.join(timeout=30)
    assert isinstance(failing.exception, StoreError), failing.exception
    stats = db.statistics()
    # the sender greenlet ran after all of them: one frame, bad list included
    assert stats.group_calls == 1 and stats.largest_group == 51, stats
    assert db.counts()["sessions"] == 50

    # a posted write is seen by the next read, and its callback hears of the commit
    heard = []
    db.apply_later(ops(60), lambda ok, value: heard.append((ok, value)))
    assert db.counts()["sessions"] == 51 and heard == [(True, [None, None])], heard

    # callbacks run as callbacks of the hub: one that blocks on the database fails loudly
    # instead of waiting for the reader that runs it
    blocked = []

    def reads_back(ok, value):
        try:
            db.counts()
        except Exception as exc:
            blocked.append(type(exc).__name__)

    db.apply_later(ops(61), reads_back)
    db.apply(ops(62))
    wait_until(lambda: blocked, interval=0.001, message="the blocking callback's failure")
    assert blocked == ["BlockingSwitchOutError"], blocked
    assert db.counts()["sessions"] == 53

    # a caller on a foreign native thread goes through the hub
    pool = ThreadPool(1)
    assert pool.apply(db.apply, (ops(99),)) == [None, None]
    assert pool.apply(db.counts)["sessions"] == 54
    pool.kill()

    child = db.writer_pid
    db.close()
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("the writer process outlived close()")
    try:
        db.apply(ops(100))
    except StoreError:
        print("ok")
    """
)

CHILD_DIES = PRELUDE + textwrap.dedent(
    """
    from hermes_actors.store.backends.sqlite.writer_process import MAX_IN_FLIGHT

    db.apply(ops(1))
    child = db.writer_pid
    os.kill(child, signal.SIGSTOP)  # frames pile up: in flight, and pending behind them
    heard = {}
    for n in range(2, 2 + MAX_IN_FLIGHT + 2):
        db.apply_later(ops(n), lambda ok, value, n=n: heard.setdefault(n, []).append(
            (ok, type(value).__name__)))
        gevent.sleep(0)  # let the sender send what it may
    def waiting_apply():
        try:
            db.apply(ops(49))
        except StoreUnavailableError:
            return "refused"
        return "applied"

    waiter = gevent.spawn(waiting_apply)
    gevent.sleep(0)  # it waits for its answer now
    os.kill(child, signal.SIGKILL)
    # a caller waiting for its answer when the writer died hears it too
    assert waiter.get(timeout=30) == "refused"
    try:
        db.apply(ops(50))
    except StoreUnavailableError:
        pass
    else:
        raise AssertionError("a write succeeded without a writer")
    wait_until(lambda: len(heard) == MAX_IN_FLIGHT + 2, interval=0.001,
               message="every posted write's answer")
    # every posted write heard exactly once that the database is unavailable
    assert heard == {n: [(False, "StoreUnavailableError")]
                     for n in range(2, 2 + MAX_IN_FLIGHT + 2)}, heard
    assert db.counts()["sessions"] == 1  # reads still work on this process's connection
    db.close()
    print("ok")
    """
)

DIES_MID_FRAME = PRELUDE + textwrap.dedent(
    """
    import fcntl, sqlite3, struct, termios
    from hermes_actors.store.backends.sqlite.executor import MAX_GROUP
    from hermes_actors.store.ops import NodeValue

    node = db.node_id()
    db.apply([NodeValue(node, "warm", "1")])
    heard = {}
    for i in range(MAX_GROUP):  # one frame of small lists
        db.apply_later([NodeValue(node, f"a{i}", "1")],
                       lambda ok, value, i=i: heard.setdefault(f"a{i}", ok))
    db.apply_later([NodeValue(node, "big", "x" * (8 << 20))],  # and one bigger than the pipe
                   lambda ok, value: heard.setdefault("big", ok))
    gevent.sleep(0)  # the sender writes the first frame, then part of the second
    replies = db._writer._rep_r  # (the pipe the child answers on)

    def unread():
        return struct.unpack("i", fcntl.ioctl(replies, termios.FIONREAD, b"0000"))[0]

    while unread() == 0:  # (no yield: the answer must stay unread in the pipe)
        pass
    child = db.writer_pid
    os.kill(child, signal.SIGKILL)  # the sender's write breaks while the answer waits
    while open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        pass
    wait_until(lambda: len(heard) == MAX_GROUP + 1, 30, message="every write's answer")
    probe = sqlite3.connect(sys.argv[1])
    committed = probe.execute(
        "SELECT count(*) FROM node_state WHERE name LIKE 'a%'").fetchone()[0]
    assert committed == MAX_GROUP, committed
    assert [heard[f"a{i}"] for i in range(MAX_GROUP)] == [True] * MAX_GROUP, heard
    assert heard["big"] is False
    print("ok")
    """
)

FALLBACK_ORDER = PRELUDE + textwrap.dedent(
    """
    import logging
    import gevent.event
    from hermes_actors.store import SessionStore

    logging.disable(logging.CRITICAL)  # (the failover's warnings)
    db.close()
    store = SessionStore(os.path.join(os.path.dirname(sys.argv[1]), "sessions"),
                         mirror_interval=None)
    core = store._core  # (apply_later: the deferred writes' path)
    sid = "20231114_000000_00000001"

    def message(text):
        return [AppendMessage(sid, {"role": "user", "content": text, "timestamp": 1.0})]

    core.apply(message("0"))
    child = core.backend.writer_pid
    os.kill(child, signal.SIGSTOP)  # the next writes stay in flight
    done = gevent.event.Event()
    core.apply_later(message("first, deferred"), done.set)
    gevent.sleep(0)  # sent
    os.kill(child, signal.SIGKILL)
    core.apply(message("second, awaited"))  # fails over and is applied in degraded mode
    assert done.wait(10)
    assert store.degraded
    texts = [m["content"] for m in store.load_transcript(sid)]
    assert texts == ["0", "first, deferred", "second, awaited"], texts
    store.close()
    print("ok")
    """
)

CLOSE_COMMITS = PRELUDE + textwrap.dedent(
    """
    heard = []
    for n in range(40):  # frames in flight and pending when close() is called
        db.apply_later(ops(n), lambda ok, value: heard.append(ok))
        if n % 10 == 0:
            gevent.sleep(0)
    db.close()
    assert heard == [True] * 40, heard
    again = SessionDB(sys.argv[1], writer="thread")
    assert again.counts()["sessions"] == 40
    again.close()
    print("ok")
    """
)

ISOLATION = PRELUDE + textwrap.dedent(
    """
    class Tag(str):  # importable here, not in the child: the child cannot read it
        pass

    def write(n, content="x"):
        sid = f"20231114_000000_{n:08x}"
        return db.apply(ops(n) + [AppendMessage(sid, {"role": "user", "content": content,
                                                      "timestamp": 1.0})])

    innocent = [gevent.spawn(write, n) for n in range(20)]
    unpicklable = gevent.spawn(write, 100, lambda: None)
    unreadable = gevent.spawn(write, 101, Tag("x"))
    gevent.joinall(innocent, raise_error=True, timeout=30)
    gevent.joinall([unpicklable, unreadable], timeout=30)
    assert isinstance(unpicklable.exception, StoreError), unpicklable.exception
    assert "cannot hand this write" in str(unpicklable.exception)
    assert isinstance(unreadable.exception, StoreError), unreadable.exception
    assert "cannot read a write" in str(unreadable.exception)
    assert not isinstance(unreadable.exception, StoreUnavailableError)
    assert db.counts()["sessions"] == 20 and db.counts()["messages"] == 20
    write(200)  # the child lives on
    db.close()
    print("ok")
    """
)

BIG_WRITES = PRELUDE + textwrap.dedent(
    """
    def big(n):  # several times the pipe's buffer
        sid = f"20231114_000000_{n:08x}"
        return ops(n) + [AppendMessage(sid, {"role": "user", "content": "x" * (4 << 20),
                                             "timestamp": 1.0})]

    pool = ThreadPool(1)
    assert pool.apply(db.apply, (big(1),)) == [None, None, 1]  # from a native thread
    # a caller that stops waiting does not cancel its write, nor tear the pipe
    with gevent.Timeout(0.0001, False):
        db.apply(big(2))
    # two big writers at once: one pipe writer, so frames never interleave
    both = [gevent.spawn(db.apply, big(3)), gevent.spawn(db.apply, big(4))]
    gevent.joinall(both, raise_error=True, timeout=60)
    assert db.counts()["sessions"] == 4
    db.close()
    print("ok")
    """
)

IDLE_AND_CLOSE = PRELUDE + textwrap.dedent(
    """
    try:  # SQLite on the hub: refused
        SessionDB(sys.argv[1] + ".other", writer="inline")
    except StoreError as exc:
        assert "inline" in str(exc), exc
    else:
        raise AssertionError("an inline writer was accepted under gevent")
    db.apply(ops(1))
    # nothing in flight: the writer keeps no watcher alive, the loop may end
    assert gevent.wait(timeout=10), "an idle writer kept the hub's loop alive"
    child = db.writer_pid
    pool = ThreadPool(1)
    pool.apply(db.close)  # from a native thread: handed to the hub
    pool.kill()
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        print("ok")
    """
)

PARENT_HOLDS = PRELUDE + textwrap.dedent(
    """
    db.apply(ops(1))
    print(db.writer_pid, flush=True)
    gevent.sleep(120)
    """
)


def _run(script: str, db_path: Path) -> str:
    result = subprocess.run([sys.executable, "-c", script, str(db_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


#: Scripts run in a patched process; each prints ``ok`` once its assertions held.
CHECKPOINTED = PRELUDE + textwrap.dedent(
    """
    import time
    from hermes_actors.store.ops import AppendMessage
    db.apply(ops(1))
    sid = "20231114_000000_00000001"
    size = os.path.getsize(sys.argv[1])
    # ~2 MB of rows: far below the child's own threshold (FALLBACK_PAGES), so only its
    # background checkpointer can copy them into the database file
    for batch in range(20):
        db.apply([AppendMessage(sid, {"role": "user", "content": "x" * 1000 + str(i),
                                      "timestamp": 1.0}) for i in range(100)])
    wait_until(lambda: os.path.getsize(sys.argv[1]) >= size + 1_000_000, 30, 0.05,
               "the copy of the log back into the database")
    db.close()
    print("ok")
    """
)

SCRIPTS = {
    "the_writer_checkpoints_in_the_background": CHECKPOINTED,
    "groups_and_orders_the_writes": GROUPS,
    "a_dead_writer_fails_every_write_once_as_unavailable": CHILD_DIES,
    "a_writer_dying_mid_frame_fails_only_what_it_did_not_answer": DIES_MID_FRAME,
    "failed_writes_go_to_degraded_mode_in_their_order": FALLBACK_ORDER,
    "close_commits_what_was_submitted": CLOSE_COMMITS,
    "a_write_it_cannot_carry_fails_alone": ISOLATION,
    "big_frames_from_threads_and_abandoned_callers": BIG_WRITES,
    "idle_writer_frees_the_loop_and_closes_from_a_thread": IDLE_AND_CLOSE,
}


class TestWriterProcess:
    @pytest.mark.parametrize("name", sorted(SCRIPTS))
    def test_in_a_patched_process(self, tmp_path, name):
        assert _run(SCRIPTS[name], tmp_path / "state.db") == "ok"

    def test_a_child_of_other_code_refuses_to_serve(self, tmp_path):
        result = subprocess.run(
            [sys.executable, "-m", "hermes_actors.store.backends.sqlite.writer_child",
             str(tmp_path / "state.db"), str(os.getpid()), "not-this-table"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 2 and "op table mismatch" in result.stderr

    def test_the_writer_dies_with_its_parent_and_frees_the_lock(self, tmp_path):
        path = tmp_path / "state.db"
        parent = subprocess.Popen([sys.executable, "-c", PARENT_HOLDS, str(path)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            child = int(parent.stdout.readline())
            parent.send_signal(signal.SIGKILL)
            parent.wait(timeout=30)
        finally:
            parent.kill()
            parent.stdout.close()
        # PR_SET_PDEATHSIG: killed with its parent
        wait_until(lambda: _gone(child), 30, message="the writer process's end with its parent")
        os.close(writer_lock(path, 10, time.sleep))  # free once the child is gone
        db = SessionDB(path, writer="thread")
        try:
            assert db.counts()["sessions"] == 1  # the committed write survived
        finally:
            db.close()


class TestEncoding:
    """Op lists travel as a pickle of plain tuples, or of the ops when one's type is unknown."""

    def test_every_op_type_round_trips_as_plain_tuples(self):
        from dataclasses import fields
        from typing import get_args

        from hermes_actors.store.ops import Op

        samples = []
        for cls in get_args(Op):
            values = {f.name: _sample(f.type, i) for i, f in enumerate(fields(cls))}
            op = cls(**values)
            assert list(op.__dict__) == [f.name for f in fields(cls)]  # positional decode
            samples.append(op)
        blob = encode_ops(samples)
        assert blob[:1] == b"R"
        assert decode_ops(blob) == samples

    def test_a_value_of_another_type_rides_in_the_tuples(self):
        from collections import OrderedDict

        from hermes_actors.store.ops import AppendMessage

        op = AppendMessage("20231114_000000_00000001",
                           OrderedDict(role="user", content="x", timestamp=1.0))
        blob = encode_ops([op])
        assert blob[:1] == b"R" and decode_ops(blob) == [op]

    def test_an_op_the_table_lacks_goes_as_itself(self):
        op = _ForeignOp("20231114_000000_00000001", {"role": "user", "content": "x"})
        blob = encode_ops([op])
        assert blob[:1] == b"O" and decode_ops(blob) == [op]

    def test_a_list_nothing_can_carry_is_refused(self):
        from hermes_actors.store.ops import AppendMessage

        op = AppendMessage("20231114_000000_00000001", {"role": "user", "content": lambda: 1})
        with pytest.raises(StoreError, match="cannot hand this write"):
            encode_ops([op])


@dataclass(frozen=True)
class _ForeignOp:
    """An op of a type the encoding table does not know."""

    session_id: str
    message: dict


def _sample(annotation: object, i: int) -> object:
    """A plain value for a field annotated ``annotation`` (ops hold only built-in types),
    different for each field position ``i``, so that swapped fields cannot pass."""
    text = str(annotation)
    if text.startswith(("dict", "Mapping")):
        return {"role": "user", "content": f"x{i}", "timestamp": float(i)}
    if text.startswith(("tuple", "list", "Sequence", "Iterable")):
        return (f"a{i}", f"b{i}")
    if text.startswith("float"):
        return 1.5 + i
    if text.startswith("int"):
        return 3 + i
    if text.startswith("bool"):
        return i % 2 == 0
    return f"text{i}"


class TestWriterLock:
    def test_a_held_lock_is_refused_after_the_wait(self, tmp_path):
        path = tmp_path / "state.db"
        holder = os.open(str(path) + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT)
        fcntl.flock(holder, fcntl.LOCK_EX)
        waits = []
        try:
            with pytest.raises(StoreUnavailableError, match="being written by another"):
                writer_lock(path, 0.05, waits.append)
        finally:
            os.close(holder)
        assert waits  # it waited before refusing
        os.close(writer_lock(path, 0, waits.append))


class TestChoosingTheWriter:
    def test_plain_threads_write_in_process(self, tmp_path):
        db = SessionDB(tmp_path / "state.db")
        try:
            assert db.writer == "thread" and db.writer_pid is None
        finally:
            db.close()

    def test_a_process_writer_needs_gevent(self, tmp_path):
        with pytest.raises(StoreError, match="needs gevent"):
            SessionDB(tmp_path / "state.db", writer="process")

    def test_a_bad_choice_names_its_source(self, tmp_path, monkeypatch):
        # a setting's mistake, not a database failure (a StoreError would mean degraded mode)
        monkeypatch.setenv(WRITER_ENV, "fork")
        with pytest.raises(ConfigError, match=WRITER_ENV):
            SessionDB(tmp_path / "state.db")
        assert not (tmp_path / "state.db").exists()

    def test_the_variable_asks_for_a_process_only_under_gevent(self, tmp_path, monkeypatch,
                                                               caplog):
        monkeypatch.setenv(WRITER_ENV, "process")
        db = SessionDB(tmp_path / "state.db")
        try:
            assert db.writer == "thread"
        finally:
            db.close()
        assert f"{WRITER_ENV}=process needs gevent" in caplog.text

    def test_inline_runs_every_call_in_the_callers_thread(self, tmp_path):
        import threading

        from hermes_actors.store.ops import AppendMessage, CreateSession

        before = threading.active_count()
        db = SessionDB(tmp_path / "state.db", writer="inline")  # what the child uses
        try:
            assert threading.active_count() == before  # no worker thread
            assert db.apply([CreateSession("20231114_000000_00000001", "k", None, 1.0)]) == [None]
            bad = AppendMessage("20231114_000000_00000003", {"role": None, "content": "x",
                                                              "timestamp": 1.0})
            good, failed = db.apply_lists(
                [[CreateSession("20231114_000000_00000002", "j", None, 1.0)], [bad]])
            assert good == (True, [None]) and failed[0] is False
            assert db.counts()["sessions"] == 2
        finally:
            db.close()

    def test_read_only_handles_never_write(self, tmp_path, monkeypatch):
        SessionDB(tmp_path / "state.db").close()
        monkeypatch.setenv(WRITER_ENV, "process")
        db = SessionDB(tmp_path / "state.db", read_only=True)
        try:
            assert db.writer == "thread"
        finally:
            db.close()
