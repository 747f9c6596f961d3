"""One owner per home (issue 17.1): ``Gateway.start()`` itself takes ``gateway.lock``.

A second gateway on a live home, embedded or standalone, is refused with
:class:`HomeInUseError` before it reads or writes anything there: no recovery over the live
gateway's turns, no ``.clean_shutdown`` written into a home that is still running. These
tests use real processes, as the field report did, and end with the ``kill -9`` that used
to lose an accepted message.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

from hermes_actors import Gateway, HermesActorsError, HomeInUseError, load_config
from hermes_actors.testing import node_values, wait_until

from .conftest import clean_env, run_cli

KEY = "agent:main:webhook:dm:busy"

#: An embedded host, as in the README: tries to start a gateway on the home it is given.
EMBEDDED = textwrap.dedent("""
    import sys
    from hermes_actors import Gateway, HomeInUseError, load_config
    gw = Gateway(sys.argv[1], config=load_config({"agent": {"kind": "scripted"}}))
    try:
        gw.start()
    except HomeInUseError as exc:
        print("REFUSED", exc, flush=True)
        sys.exit(3)
    print("STARTED", flush=True)
    sys.stdin.readline()          # hold the home until told to stop
    gw.stop(drain_timeout=0)
    print("STOPPED", flush=True)
""")


def _embedded(home) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", EMBEDDED, str(home)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env())


def _wait_running(gateway, key: str, timeout: float = 30.0) -> dict:
    """The session's entry once its turn runs (polled over HTTP, bounded)."""
    def entry() -> dict | None:
        status, body = gateway.session(key)
        if status == 200 and body["running"] and body["entry"].get("active_turn_token"):
            return body["entry"]
        return None

    return wait_until(entry, timeout, 0.05, f"the start of the turn of {key}")


class TestEmbeddedAgainstRun:
    """An embedded gateway started on the home of a live ``run`` is refused and changes
    nothing; a ``kill -9`` of ``run`` afterwards still loses nothing."""

    def test_refused_then_the_killed_turn_is_resumed(self, start_gateway, tmp_path):
        home = tmp_path / "home"
        first = start_gateway("--agent", "scripted")
        first.post("busy", "sleep 60")
        marked = _wait_running(first, KEY)

        second = _embedded(home)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 3, err
        assert out.startswith("REFUSED ") and f"pid {first.proc.pid}" in out
        assert "stop that gateway first" in out and "Traceback" not in err
        # the live gateway's turn and marker are untouched, and no marker was written
        assert "clean_shutdown" not in node_values(home)
        status, body = first.session(KEY)
        assert status == 200 and body["running"]
        assert body["entry"]["active_turn_token"] == marked["active_turn_token"]

        first.kill()  # the field report's sequence: this used to look like a clean stop
        again = start_gateway("--agent", "scripted")
        summary = again.recovery()
        assert "clean_shutdown=False" in summary and "resumed=1" in summary
        [reply] = again.replies("busy", 1)
        assert reply["text"] == "resumed: sleep 60"


class TestRunAgainstEmbedded:
    """``run`` on the home of a live embedded gateway exits 2 with one line naming its pid;
    the embedded gateway goes on and stops cleanly."""

    def test_run_is_refused(self, tmp_path):
        home = tmp_path / "home"
        embedded = _embedded(home)
        try:
            assert embedded.stdout.readline().strip() == "STARTED"
            result = run_cli("run", "--home", str(home), "--port", "0")
            assert result.returncode == 2
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and f"(pid {embedded.pid})" in lines[0], result.stderr
            assert "clean_shutdown" not in node_values(home)
            embedded.stdin.write("\n")
            embedded.stdin.flush()
            assert embedded.stdout.readline().strip() == "STOPPED"
        finally:
            embedded.kill()
            embedded.wait(timeout=30)
        assert "clean_shutdown" in node_values(home)

    def test_read_only_commands_work_while_a_gateway_runs(self, start_gateway, tmp_path):
        home = tmp_path / "home"
        gateway = start_gateway()
        gateway.post("ro", "hello")
        gateway.replies("ro", 1)
        listed = run_cli("sessions", "list", "--home", str(home))
        assert listed.returncode == 0 and "agent:main:webhook:dm:ro" in listed.stdout
        checked = run_cli("db", "check", "--home", str(home))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        quoted = urllib.parse.quote("agent:main:webhook:dm:ro", safe="")
        assert gateway.request("GET", f"/v1/sessions/{quoted}")[0] == 200


class TestInProcess:
    """Two ``Gateway`` objects on one home in one process: the second is refused until
    the first stops, and the refusal writes nothing."""

    def test_second_start_is_refused_until_stop(self, tmp_path):
        home = tmp_path / "home"
        first = Gateway(home, load_config({}))
        first.start()
        before = sorted(p.relative_to(home) for p in home.rglob("*"))
        second = Gateway(home, load_config({}))
        with pytest.raises(HomeInUseError) as caught:
            second.start()
        assert isinstance(caught.value, HermesActorsError)
        assert "in use by a running gateway (pid" in str(caught.value)
        assert not second.running
        assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
        assert "clean_shutdown" not in node_values(home)
        first.stop(drain_timeout=1)
        third = Gateway(home, load_config({}))
        try:
            third.start()
            assert third.running
        finally:
            third.stop(drain_timeout=1)

    def test_a_refused_gateway_can_retry_once_the_home_is_free(self, tmp_path):
        home = tmp_path / "home"
        first = Gateway(home, load_config({}))
        first.start()
        second = Gateway(home, load_config({}))
        with pytest.raises(HomeInUseError):
            second.start()
        first.stop(drain_timeout=1)
        try:
            report = second.start()
            assert report.clean_shutdown
        finally:
            second.stop(drain_timeout=1)
        assert json.loads((home / "sessions" / "sessions.json").read_text())["_README"]
