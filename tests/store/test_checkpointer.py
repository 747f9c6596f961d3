"""The background checkpointer: it copies the log into the database through its own
connection, survives failures, and the writer process's connection keeps only a high
automatic threshold as a fallback."""

from __future__ import annotations

import logging
import threading

from hermes_actors.store import SessionDB
from hermes_actors.store.backends.sqlite.checkpointer import FALLBACK_PAGES, Checkpointer
from hermes_actors.store.ops import AppendMessage, CreateSession

SID = "20231114_000000_00000001"


def _write(db: SessionDB, rows: int) -> None:
    db.apply([CreateSession(SID, "k", None, 1.0)])
    db.apply([AppendMessage(SID, {"role": "user", "content": f"m{i}", "timestamp": 1.0})
              for i in range(rows)])


class TestCheckpointer:
    def test_copies_every_frame_of_the_log(self, tmp_path):
        db = SessionDB(tmp_path / "state.db", writer="inline")
        checkpointer = Checkpointer(db.path, interval=3600)
        try:
            _write(db, 200)
            result = checkpointer.run_once()
            assert result is not None and not result.busy
            assert result.log_frames > 0 and result.checkpointed == result.log_frames
            again = checkpointer.run_once()  # nothing new: nothing to copy
            assert again is not None and again.checkpointed == again.log_frames
            assert checkpointer.runs == 2
        finally:
            checkpointer.close()
            db.close()

    def test_the_writer_process_connection_checkpoints_only_as_a_fallback(self, tmp_path):
        inline = SessionDB(tmp_path / "a.db", writer="inline")
        threaded = SessionDB(tmp_path / "b.db", writer="thread")
        try:
            pragma = "PRAGMA wal_autocheckpoint"
            assert inline.sql(pragma)[0][0] \
                == FALLBACK_PAGES
            assert threaded.sql(pragma)[0][0] \
                == 1000  # SQLite's own default: a thread writer commits in this process
        finally:
            inline.close()
            threaded.close()

    def test_a_failure_is_logged_once_and_the_thread_goes_on(self, tmp_path, caplog):
        checkpointer = Checkpointer(tmp_path / "missing" / "state.db", interval=3600)
        try:
            with caplog.at_level(logging.DEBUG, logger="hermes_actors.store"):
                assert checkpointer.run_once() is None
                assert checkpointer.run_once() is None
            levels = [r.levelno for r in caplog.records if "background checkpoint" in r.message]
            assert levels == [logging.WARNING, logging.DEBUG]
            assert checkpointer.running
        finally:
            checkpointer.close()

    def test_runs_on_its_own_and_close_stops_it(self, tmp_path):
        db = SessionDB(tmp_path / "state.db", writer="inline")
        ran = threading.Event()

        class Watched(Checkpointer):
            def run_once(self):
                result = super().run_once()
                if result is not None and result.log_frames:
                    ran.set()
                return result

        _write(db, 10)
        checkpointer = Watched(db.path, interval=0.01)
        try:
            assert ran.wait(30), "no checkpoint ran on the thread"
        finally:
            checkpointer.close()
            db.close()
        assert not checkpointer.running
