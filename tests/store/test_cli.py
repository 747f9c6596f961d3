"""``hermes-actors db`` and ``sessions`` subcommands: exact output, exit codes, read-only checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hermes_actors.cli import main
from hermes_actors.store import SessionDB

from .conftest import dm


def _listing(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def populated(make_store, home):
    store = make_store()
    entry = store.get_or_create_session(dm())
    store.append_message(entry.session_id, {"role": "user", "content": "hello there"})
    store.append_message(entry.session_id, {"role": "assistant", "content": "echo: hello"})
    store.mark_resume_pending(entry.session_key, "restart_interrupted")
    store.close()
    return entry


class TestDbCheck:
    """``db check`` prints five key: value lines and exits 0 only when everything is ok."""

    def test_healthy_database(self, capsys, home, populated):
        before = _listing(home)
        code, out, err = _run(capsys, "db", "check", "--home", str(home))
        assert code == 0, err
        assert out.splitlines() == [
            "mode: sqlite", "integrity: ok", "fts: ok", "sessions: 1", "messages: 2",
        ]  # fmt: skip
        assert _listing(home) == before

    def test_corrupt_fts_exits_1_and_rebuild_fixes_it(self, capsys, home, populated):
        db = SessionDB(home / "state.db")
        db.sql("DELETE FROM messages_fts_data")
        db.close()
        code, out, _ = _run(capsys, "db", "check", "--home", str(home))
        assert code == 1 and "fts: corrupt" in out.splitlines()
        code, out, _ = _run(capsys, "db", "rebuild-fts", "--home", str(home))
        assert code == 0 and out.splitlines() == ["fts: ok", "messages: 2"]
        assert _run(capsys, "db", "check", "--home", str(home))[0] == 0

    def test_degraded_home_counts_the_mirror(self, capsys, make_store, home):
        (home / "state.db").mkdir()
        store = make_store()
        entry = store.get_or_create_session(dm("1"))
        store.get_or_create_session(dm("2"))
        store.append_message(entry.session_id, {"role": "user", "content": "x"})
        store.close()
        code, out, _ = _run(capsys, "db", "check", "--home", str(home))
        assert code == 1
        assert out.splitlines() == [
            "mode: degraded", "integrity: n/a", "fts: n/a", "sessions: 2", "messages: 1",
        ]  # fmt: skip

    def test_missing_home_creates_nothing(self, capsys, tmp_path):
        missing = tmp_path / "nowhere"
        code, out, err = _run(capsys, "db", "check", "--home", str(missing))
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
        assert not missing.exists()

    def test_empty_home_is_reported_degraded_without_creating_files(self, capsys, home):
        code, out, _ = _run(capsys, "db", "check", "--home", str(home))
        assert code == 1 and out.splitlines()[0] == "mode: degraded"
        assert _listing(home) == []

    def test_a_postgres_home_without_store_settings_says_so(self, capsys, home, monkeypatch):
        for name in ("HERMES_STORE_BACKEND", "HERMES_STORE_DSN"):
            monkeypatch.delenv(name, raising=False)
        (home / "node_id").write_text("node-1\n")  # what a PostgreSQL gateway leaves
        code, out, err = _run(capsys, "db", "check", "--home", str(home))
        assert code == 2 and out == ""
        [line] = err.splitlines()
        assert "no store settings were found" in line and "config.yaml" in line
        assert _listing(home) == ["node_id"]

    def test_home_option_wins_over_env(self, capsys, home, populated, monkeypatch, tmp_path):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path / "elsewhere"))
        assert _run(capsys, "db", "check", "--home", str(home))[0] == 0
        assert _run(capsys, "db", "check")[0] == 2
        monkeypatch.setenv("HERMES_HOME", str(home))
        assert _run(capsys, "db", "check")[0] == 0


class TestSessions:
    """``sessions list`` prints one line per session; ``show`` the entry and transcript tail."""

    def test_list(self, capsys, home, populated):
        code, out, _ = _run(capsys, "sessions", "list", "--home", str(home))
        assert code == 0
        [line] = out.splitlines()
        key, session_id, updated, flags = line.split("  ")
        assert (key, session_id) == (populated.session_key, populated.session_id)
        assert updated.endswith("+00:00") and flags == "resume_pending(restart_interrupted)"

    def test_show(self, capsys, home, populated):
        code, out, _ = _run(capsys, "sessions", "show", populated.session_key, "--home",
                            str(home), "--tail", "1")  # fmt: skip
        assert code == 0
        entry_json, transcript = out.split("\n\n")
        assert json.loads(entry_json)["session_id"] == populated.session_id
        lines = transcript.splitlines()
        assert lines[0] == "transcript (1 of 2 messages):"
        assert lines[1].endswith("assistant: echo: hello")

    @pytest.mark.parametrize("tail", ["-1", "-5"])
    def test_negative_tail_is_a_usage_error(self, capsys, home, populated, tail):
        # GET /v1/sessions/<key>?tail=-1 is a 422; the command line showed "0 of 2"
        code, out, err = _run(capsys, "sessions", "show", populated.session_key, "--home",
                              str(home), "--tail", tail)  # fmt: skip
        assert (code, out) == (2, "")
        assert err == (f"hermes-actors: error: hermes-actors sessions show: argument --tail: "
                       f"invalid count {tail!r} (an integer >= 0)\n")

    def test_unknown_key_exits_1(self, capsys, home, populated):
        code, _, err = _run(capsys, "sessions", "show", "agent:main:nope:dm", "--home", str(home))
        assert code == 1 and "no session" in err


class TestClosedOutput:
    """Output piped into a reader that stops early (``| head -1``) ends the command quietly:
    no traceback, no "Exception ignored ... BrokenPipeError"."""

    @pytest.mark.parametrize("argv", [["sessions", "list"], ["db", "check"]])
    def test_a_closed_pipe_is_not_a_traceback(self, home, populated, argv):
        child = subprocess.Popen([sys.executable, "-m", "hermes_actors", *argv, "--home",
                                  str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child.stdout.close()  # the reader is gone before anything was written
        _, err = child.communicate(timeout=60)
        assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
        assert child.returncode == 1


class TestUsage:
    """Usage mistakes are one line on stderr and exit code 2, never a traceback."""

    @pytest.mark.parametrize("argv", [["bogus"], ["db"], ["db", "check", "--bad"], []])
    def test_usage_errors(self, capsys, argv):
        code, _, err = _run(capsys, *argv)
        assert code == 2 and "Traceback" not in err

    def test_help_exits_0(self, capsys):
        assert _run(capsys, "db", "check", "--help")[0] == 0
