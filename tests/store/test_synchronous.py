"""``store.synchronous``: the ``PRAGMA synchronous`` in force on every connection that
commits writes is the one the configuration names (asked of the connection itself: the
worker thread's, and the writer child process's under gevent)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from hermes_actors.config import load_config
from hermes_actors.errors import ConfigError
from hermes_actors.store import SessionDB
from hermes_actors.store.factory import open_backend
from hermes_actors.store.ops import CreateSession

#: ``PRAGMA synchronous`` answers by level.
LEVELS = {"normal": 1, "full": 2}


def _config(level: str | None):
    source = {} if level is None else {"store": {"synchronous": level}}
    return load_config(source, env={})


@pytest.mark.parametrize("level", [None, "full", "normal"])
def test_the_writer_thread_runs_the_configured_level(tmp_path, level):
    db = open_backend(tmp_path, _config(level))
    try:
        assert db.writer == "thread"
        db.apply([CreateSession("s1", "k1", None, 0.0)])
        assert db.writer_pragma("synchronous") == LEVELS[level or "full"]
        assert db.sql("PRAGMA synchronous") == [(LEVELS[level or "full"],)]
    finally:
        db.close()


def test_an_unknown_level_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="store.synchronous"):
        SessionDB(tmp_path / "state.db", synchronous="off")


CHILD = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()

    import sys
    from hermes_actors.config import load_config
    from hermes_actors.store.factory import open_backend
    from hermes_actors.store.ops import CreateSession

    db = open_backend(sys.argv[1], load_config({}))  # HERMES_STORE_SYNCHRONOUS, if set
    assert db.writer == "process" and db.writer_pid, db.writer
    db.apply([CreateSession("s1", "k1", None, 0.0)])
    print(db.writer_pragma("synchronous"), db.sql("PRAGMA synchronous")[0][0])
    db.close()
    """
)


@pytest.mark.parametrize("level", [None, "full", "normal"])
def test_the_writer_child_process_runs_the_configured_level(tmp_path, level, monkeypatch):
    monkeypatch.delenv("HERMES_STORE_SYNCHRONOUS", raising=False)
    if level is not None:
        monkeypatch.setenv("HERMES_STORE_SYNCHRONOUS", level)
    monkeypatch.delenv("HERMES_ACTORS_DB_WRITER", raising=False)
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = LEVELS[level or "full"]
    assert result.stdout.split() == [str(expected), str(expected)]
