"""§15 bad-input corpus (files, database, config, disk): each gets a clear error or a
degraded-but-serving runtime, and nothing canonical is lost. The HTTP corpus lives in
``tests/process``.
"""

from __future__ import annotations

import errno
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from hermes_actors import (
    ConfigError,
    Gateway,
    HermesActorsError,
    InMemoryAdapter,
    MessageEvent,
    SessionSource,
    UnknownPlatformError,
    load_config,
)
from hermes_actors.store.backends.files import atomic

KEY = "agent:main:telegram:dm:42"
SRC = SessionSource("telegram", chat_id="42", user_id="7")


def run(home: Path, *texts: str, **config) -> tuple[Gateway, InMemoryAdapter]:
    adapter = InMemoryAdapter("telegram")
    gw = Gateway(home, config=load_config(config, env={}), adapters=[adapter])
    gw.start()
    for text in texts:
        gw.submit(MessageEvent(source=SRC, text=text))
    assert gw.wait_idle(timeout=20)
    return gw, adapter


def seed(home: Path) -> str:
    """A home with one finished conversation; returns its session id."""
    gw, _ = run(home, "first")
    session_id = gw.store.get(KEY).session_id
    gw.stop()
    return session_id


class TestSessionsJson:
    """A damaged mirror never stops the gateway; the database stays canonical."""

    @pytest.mark.parametrize("garbage", ['{"agent:main:tele', "[1, 2, 3]", "\x00\xff", ""])
    def test_corrupt_mirror_with_database(self, tmp_path, garbage):
        session_id = seed(tmp_path)
        (tmp_path / "sessions" / "sessions.json").write_text(garbage, errors="surrogateescape")
        gw, adapter = run(tmp_path, "second")
        assert gw.store.get(KEY).session_id == session_id
        assert adapter.texts() == ["echo: second"]
        contents = [m["content"] for m in gw.store.load_transcript(session_id)]
        assert contents == ["first", "echo: first", "second", "echo: second"]
        gw.stop()

    def test_traversal_and_wrong_types_without_database(self, tmp_path, caplog):
        sessions = tmp_path / "sessions"
        sessions.mkdir(parents=True)
        good = {"session_key": KEY, "session_id": "20240101_000000_abcdef12",
                "suspended": "yes", "created_at": "not a time", "origin": 5}
        data = {
            "_README": "mirror",
            KEY: good,
            "../escape": {"session_key": "../escape", "session_id": "20240101_000000_00000000"},
            "agent:main:telegram:dm:9": {"session_key": "agent:main:telegram:dm:9",
                                         "session_id": "../../etc/passwd"},
            "/abs": {"session_key": "/abs", "session_id": "C:evil"},
        }
        (sessions / "sessions.json").write_text(json.dumps(data))
        with caplog.at_level(logging.WARNING):
            gw, _ = run(tmp_path)
        keys = [e.session_key for e in gw.store.list_sessions()]
        assert keys == [KEY]
        assert gw.store.get(KEY).suspended is True  # tolerant: a truthy flag stays set
        assert not (tmp_path.parent / "escape").exists()
        gw.stop()


class TestStateDb:
    """A corrupt database header degrades to the mirror and JSONL; corrupt FTS is repaired."""

    def test_corrupt_header_degrades_and_serves(self, tmp_path, caplog):
        seed(tmp_path)
        db = tmp_path / "state.db"
        with open(db, "r+b") as fh:
            fh.write(b"this is not sqlite at all")
        for suffix in ("-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        with caplog.at_level(logging.WARNING):
            gw, adapter = run(tmp_path, "during outage")
        assert gw.store.degraded is True
        assert adapter.texts() == ["echo: during outage"]
        session_id = gw.store.get(KEY).session_id
        assert (tmp_path / "sessions" / f"{session_id}.jsonl").exists()
        gw.stop()

    def test_state_db_is_a_directory(self, tmp_path):
        (tmp_path / "state.db").mkdir(parents=True)
        gw, adapter = run(tmp_path, "hi")
        assert gw.store.degraded is True
        assert adapter.texts() == ["echo: hi"]
        gw.stop()

    def test_corrupt_fts_repaired_nothing_lost(self, tmp_path):
        session_id = seed(tmp_path)
        with sqlite3.connect(tmp_path / "state.db") as conn:
            conn.execute("UPDATE messages_fts_data SET block = x'00ff00ff' WHERE id > 1")
        gw, adapter = run(tmp_path, "after corruption")
        assert adapter.texts() == ["echo: after corruption"]
        contents = [m["content"] for m in gw.store.load_transcript(session_id)]
        assert contents == ["first", "echo: first", "after corruption", "echo: after corruption"]
        assert gw.store.db.check_fts() == "ok"
        gw.stop()


class TestDisk:
    """ENOSPC on the mirror is survived; an unusable home is a clear error."""

    def test_enospc_on_mirror(self, tmp_path, monkeypatch, caplog):
        real_replace = atomic.os.replace
        full = {"on": True}

        def replace(src, dst):
            if full["on"] and str(dst).endswith("sessions.json"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_replace(src, dst)

        monkeypatch.setattr(atomic.os, "replace", replace)
        with caplog.at_level(logging.WARNING):
            gw, adapter = run(tmp_path, "while full")
            gw.store.flush()
        assert adapter.texts() == ["echo: while full"]
        assert any("No space left" in r.getMessage() for r in caplog.records)
        assert not list((tmp_path / "sessions").glob(".sessions.json*"))  # no temp litter
        full["on"] = False
        gw.stop()
        data = json.loads((tmp_path / "sessions" / "sessions.json").read_text())
        assert KEY in data

    def test_home_is_a_file(self, tmp_path):
        home = tmp_path / "file"
        home.write_text("not a directory")
        gw = Gateway(home, config=load_config({}, env={}))
        with pytest.raises(HermesActorsError, match="home"):
            gw.start()


class TestConfigAndPlatforms:
    """Bad configuration and unknown platforms are clear errors naming the culprit."""

    def test_invalid_value_names_key(self):
        with pytest.raises(ConfigError, match="queue_max"):
            load_config({"queue_max": "lots"}, env={})

    def test_unknown_platform_named(self):
        with pytest.raises(UnknownPlatformError, match="myspace"):
            SessionSource("myspace", chat_id="1")
