"""``hermes-actors run`` on PostgreSQL: the standalone process (gevent patched, the HTTP API)
keeps its store on the server, answers, stops cleanly and starts again on the same data."""

from __future__ import annotations

import json

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

        # without the store's settings: not "degraded", but that none were found (one line)
        unset = run_cli("db", "check", "--home", str(home))
        assert unset.returncode == 2, unset.stdout
        assert "mode: degraded" not in unset.stdout
        [line] = unset.stderr.splitlines()
        assert "no store settings were found" in line

        # the settings in the home's config.yaml, as `run` reads them
        (home / "config.yaml").write_text(
            f"store:\n  backend: postgres\n  dsn: {json.dumps(postgres_dsn)}\n")
        configured = run_cli("db", "check", "--home", str(home))
        assert configured.returncode == 0, configured.stderr
        assert "mode: postgres" in configured.stdout
