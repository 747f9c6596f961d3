"""``hermes-actors run`` on PostgreSQL: the standalone process (gevent patched, the HTTP API)
keeps its store on the server, answers, stops cleanly and starts again on the same data."""

from __future__ import annotations

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.postgres


class TestRunOnPostgres:
    """The real process, end to end, on the session's test server."""

    def test_answers_restarts_and_checks(self, start_gateway, postgres_dsn, tmp_path):
        env = {"HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": postgres_dsn}
        home = tmp_path / "home"
        gateway = start_gateway(home=home, env=env)
        for chat in ("1", "2", "3"):
            gateway.post(chat, f"hello {chat}")
        for chat in ("1", "2", "3"):
            [reply] = gateway.replies(chat, 1)
            assert reply["text"] == f"echo: hello {chat}"
        assert gateway.stop() == 0

        again = start_gateway(home=home, env=env)
        assert "clean" in again.recovery()
        cursor = again.outbox("1", wait=0)["cursor"]
        again.post("1", "more")
        [reply] = again.replies("1", 1, after=cursor)
        assert reply["text"] == "echo: more"
        assert again.stop() == 0

        checked = run_cli("db", "check", "--home", str(home), env=env)
        assert checked.returncode == 0, checked.stderr
        assert "mode: postgres" in checked.stdout and "sessions: 3" in checked.stdout
