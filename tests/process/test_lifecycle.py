"""Start, stop and restart of a real ``hermes-actors run`` process (§7 graceful stop, §17.35)."""

from __future__ import annotations

import json
import signal
import sqlite3

import psutil

from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.testing import node_values

from .conftest import run_cli


def _entry(home, key: str) -> dict:
    return json.loads((home / "sessions" / "sessions.json").read_text(encoding="utf-8"))[key]


class TestGracefulStop:
    """SIGTERM drains, writes ``.clean_shutdown`` and exits 0, logging each lifecycle event."""

    def test_sigterm_exits_0_with_clean_shutdown(self, start_gateway, tmp_path):
        gateway = start_gateway()
        gateway.post("t", "hello")
        gateway.replies("t", 1)
        assert gateway.stop() == 0
        assert "clean_shutdown" in node_values(tmp_path / "home")
        log = gateway.stderr.text()
        events = ["event=starting", "event=ready", "event=stopping signal=SIGTERM",
                  "event=stopped clean_shutdown=True"]
        positions = [log.index(event) for event in events]
        assert positions == sorted(positions)
        # a brand-new home is a first start, not a crash; the summary is logged once
        assert gateway.recovery() == "recovery: new home, nothing to recover"
        assert "recovery:" not in gateway.stdout.text()

    def test_outbox_and_cursors_survive_a_restart(self, start_gateway, tmp_path):
        first = start_gateway()
        first.post("durable", "before")
        [old] = first.replies("durable", 1)
        assert first.stop() == 0
        second = start_gateway()
        assert second.recovery().startswith("recovery: clean_shutdown=True")
        assert second.outbox("durable", wait=0)["messages"] == [old]
        second.post("durable", "after")
        [new] = second.replies("durable", 1, after=old["cursor"])
        assert new["text"] == "echo: after" and new["cursor"] > old["cursor"]

    def test_running_turn_finishes_and_is_delivered_during_the_drain(
            self, start_gateway, tmp_path):
        gateway = start_gateway("--agent", "scripted")
        key = gateway.post("drain", "sleep 0.5")["session_key"]
        gateway.post("drain", "/status")
        [status] = gateway.replies("drain", 1)
        assert "Turn: running" in status["text"]
        assert gateway.stop() == 0
        assert _entry(tmp_path / "home", key)["resume_pending"] is False
        again = start_gateway("--agent", "scripted")
        texts = [m["text"] for m in again.outbox("drain", after=status["cursor"], wait=0)[
            "messages"]]
        assert texts == ["slept 0.5"]

    def test_second_sigint_ends_the_drain_and_the_turn_resumes_next_start(
            self, start_gateway, tmp_path):
        home = tmp_path / "home"
        gateway = start_gateway("--agent", "scripted",
                                env={"HERMES_RESTART_DRAIN_TIMEOUT": "120"})
        key = gateway.post("busy", "wait forever")["session_key"]
        gateway.post("busy", "/queue after the stop")
        [ack] = gateway.replies("busy", 1)  # answered only once the first turn runs
        assert ack["text"].startswith("Queued for the next turn")
        gateway.signal(signal.SIGINT)
        gateway.stderr.expect("event=stopping signal=SIGINT drain_timeout=120")
        gateway.signal(signal.SIGINT)
        gateway.stderr.expect("event=hurry")
        assert gateway.proc.wait(timeout=30) == 0
        assert "clean_shutdown" in node_values(home)
        entry = _entry(home, key)
        assert entry["resume_pending"] is True
        assert entry["resume_reason"] == "shutdown_timeout"

        again = start_gateway("--agent", "scripted")
        summary = again.recovery()
        assert "clean_shutdown=True" in summary and "resumed=1" in summary
        assert "replayed_inbox=1" in summary
        # one turn continues the task: the recovery note rides on the replayed /queue item,
        # and the scripted agent answers both the resumed task and that item
        [answer] = again.replies("busy", 1, after=ack["cursor"])
        assert answer["text"] == "resumed: wait forever\necho: after the stop"


class TestOneProcessPerHome:
    """A second ``run`` on a home in use is refused with one line; another home is fine."""

    def test_second_run_on_the_same_home_is_refused(self, start_gateway, tmp_path):
        gateway = start_gateway()
        result = run_cli("run", "--home", str(tmp_path / "home"), "--port", "0")
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by a running gateway" in lines[0]
        assert f"pid {gateway.proc.pid}" in lines[0]
        assert "event=ready" not in result.stderr
        status, _, _ = gateway.request("GET", "/healthz")
        assert status == 200

    def test_lock_is_released_when_the_process_is_killed(self, start_gateway, tmp_path):
        first = start_gateway()
        first.kill()
        second = start_gateway()
        summary = second.recovery()
        assert "clean_shutdown=False" in summary

    def test_port_in_use_fails_with_exit_1(self, start_gateway, tmp_path):
        gateway = start_gateway()
        result = run_cli("run", "--home", str(tmp_path / "other"), "--port", str(gateway.port))
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1].startswith(
            f"hermes-actors: error: cannot listen on 127.0.0.1:{gateway.port}")
        assert "Traceback" not in result.stderr


    def test_a_host_that_does_not_resolve_is_named_with_its_reason(self, tmp_path):
        result = run_cli("run", "--home", str(tmp_path / "h"), "--host", "nosuch.invalid",
                         "--port", "0")
        assert result.returncode == 1
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("hermes-actors: error: cannot listen on nosuch.invalid:0: ")
        assert "Unknown error" not in last and "Traceback" not in result.stderr

    def test_an_ipv6_host_is_in_brackets_in_the_ready_url(self, start_gateway):
        gateway = start_gateway("--host", "::1")
        ready = next(line for line in gateway.stderr.lines if "event=ready" in line)
        assert f"url=http://[::1]:{gateway.port}" in ready


class TestWriterProcess:
    """The standalone process commits through a writer child that lives and dies with it."""

    @staticmethod
    def _writer(gateway) -> psutil.Process:
        children = psutil.Process(gateway.proc.pid).children()
        assert len(children) == 1, children
        assert "hermes_actors.store.backends.sqlite.writer_child" in " ".join(children[0].cmdline())
        return children[0]

    def test_the_writer_stops_with_a_graceful_stop(self, start_gateway):
        gateway = start_gateway()
        writer = self._writer(gateway)
        assert gateway.stop() == 0
        writer.wait(timeout=30)  # closed the database and exited; the gateway reaped it
        assert not writer.is_running()
        assert "Traceback" not in gateway.stderr.text() and "writer process" not in gateway.stderr.text()

    def test_a_killed_writer_degrades_the_store_and_replies_go_on(self, start_gateway):
        gateway = start_gateway()
        gateway.post("w1", "before")
        assert [m["text"] for m in gateway.replies("w1", 1)] == ["echo: before"]
        writer = self._writer(gateway)
        writer.kill()
        writer.wait(timeout=30)
        gateway.post("w2", "after")
        assert [m["text"] for m in gateway.replies("w2", 1)] == ["echo: after"]
        gateway.stderr.expect("DEGRADED mode")
        status, _, body = gateway.request("GET", "/healthz")
        assert status == 200 and body["degraded"] is True


class TestLogLines:
    """One access line per HTTP request; one line per finished turn at debug level; a bad
    ``HERMES_LOG_LEVEL`` is a configuration error."""

    def test_access_and_turn_lines(self, start_gateway):
        gateway = start_gateway(env={"HERMES_LOG_LEVEL": "debug"})
        gateway.post("logs", "hello")
        gateway.replies("logs", 1)
        line = gateway.stderr.expect(r"method=POST path=/v1/messages status=202 ms=\d")
        assert "hermes_actors.http.access" in line
        turn = gateway.stderr.expect(r"turn finished session_key=agent:main:webhook:dm:logs")
        assert "status=completed seconds=" in turn

    def test_info_level_has_access_lines_but_no_turn_lines(self, start_gateway):
        gateway = start_gateway()
        gateway.post("quiet", "hello")
        gateway.replies("quiet", 1)
        gateway.stderr.expect(r"method=GET path=/v1/outbox status=200")
        assert gateway.stop() == 0
        assert "turn finished" not in gateway.stderr.text()

    def test_bad_level_exits_2(self, tmp_path):
        result = run_cli("run", "--home", str(tmp_path / "h"), "--port", "0",
                         env={"HERMES_LOG_LEVEL": "chatty"})
        assert result.returncode == 2
        assert "HERMES_LOG_LEVEL" in result.stderr and "Traceback" not in result.stderr


def _kill_writer(gateway) -> None:
    """SIGKILL the gateway's database writer child and wait until it is gone."""
    writer = TestWriterProcess._writer(gateway)
    writer.kill()
    writer.wait(timeout=30)


def _user_rows(home, text: str) -> list[tuple]:
    with sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True) as db:
        return db.execute("SELECT session_id, content FROM messages WHERE role = 'user' AND "
                          "content = ?", (text,)).fetchall()


class TestDegradedInbox:
    """What degraded mode (a dead writer child) consumes or accepts is not forgotten at the
    next start with a working database (§8 durable inbox)."""

    def test_a_message_answered_in_degraded_mode_is_not_answered_again(
            self, start_gateway, tmp_path):
        home = tmp_path / "home"
        gateway = start_gateway("--agent", "scripted")
        gateway.post("dq", "sleep 60")
        gateway.post("dq", "/status")
        [status] = gateway.replies("dq", 1)
        assert "Turn: running" in status["text"]
        gateway.post("dq", "/queue after")  # durable in state.db, waits behind the turn
        _kill_writer(gateway)
        gateway.post("dq", "/stop")  # ends the turn: "after" runs in degraded mode
        texts = []
        after = status["cursor"]
        while "echo: after" not in texts:
            page = gateway.outbox("dq", after=after)
            assert page["messages"], texts
            texts += [m["text"] for m in page["messages"]]
            after = page["cursor"]
        gateway.stderr.expect("DEGRADED mode")
        assert gateway.stop() == 0
        again = start_gateway("--agent", "scripted")
        head = again.outbox("dq", after="latest", wait=0)["cursor"]
        again.post("dq", "ping")
        replies = []
        while "echo: ping" not in replies:
            page = again.outbox("dq", after=head)
            replies += [m["text"] for m in page["messages"] if m["kind"] == "reply"]
            head = page["cursor"]
        assert replies == ["echo: ping"]  # "after" was answered once, before the restart
        assert len(_user_rows(home, "after")) == 1

    def test_a_message_accepted_in_degraded_mode_is_answered_after_the_restart(
            self, start_gateway, tmp_path):
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text("busy_input_mode: queue\nrestart_drain_timeout: 0.5\n")
        gateway = start_gateway("--agent", "scripted")
        gateway.post("da", "first")
        [first] = gateway.replies("da", 1)
        _kill_writer(gateway)
        gateway.post("da", "sleep 60")
        gateway.post("da", "/status")
        [status] = [m for m in gateway.replies("da", 1, after=first["cursor"])]
        gateway.stderr.expect("DEGRADED mode")
        assert "Turn: running" in status["text"]
        gateway.post("da", "later")  # accepted (202) while degraded; waits behind the turn
        assert gateway.stop() == 0
        again = start_gateway("--agent", "scripted")
        texts: list[str] = []
        after = 0
        while "echo: later" not in texts:
            page = again.outbox("da", after=after, wait=10)
            assert page["messages"], texts
            texts += [line for m in page["messages"] if m["kind"] == "reply"
                      for line in m["text"].splitlines()]
            after = page["cursor"]
        # the interrupted turn was continued, with the waiting message in the same turn
        assert texts == ["echo: first", "resumed: sleep 60", "echo: later"]

    def test_replies_of_degraded_mode_and_their_cursors_survive_the_restart(
            self, start_gateway):
        gateway = start_gateway()
        gateway.post("dc", "before")
        [before] = gateway.replies("dc", 1)
        _kill_writer(gateway)
        gateway.post("dc", "during")
        [during] = gateway.replies("dc", 1, after=before["cursor"])
        gateway.stderr.expect("DEGRADED mode")
        assert during["text"] == "echo: during" and during["cursor"] > before["cursor"]
        assert gateway.stop() == 0
        again = start_gateway()
        assert [m["text"] for m in again.outbox("dc", wait=0)["messages"]] == [
            "echo: before", "echo: during"]
        again.post("dc", "after")  # a client that read "during" asks for what follows it
        [after] = again.replies("dc", 1, after=during["cursor"])
        assert after["text"] == "echo: after"

    def test_a_reply_owed_in_degraded_mode_is_delivered_after_a_crash(self, start_gateway):
        gateway = start_gateway(env={"HERMES_ACTORS_CRASHPOINT": "after_ledger_recorded"})
        _kill_writer(gateway)  # before any reply: the crash point fires in degraded mode
        status, _, _ = gateway.request("POST", "/v1/messages", {"chat_id": "do", "text": "hi"})
        assert status == 202
        assert gateway.proc.wait(timeout=30) == 137  # died with the reply owed, not sent
        gateway.stderr.expect("DEGRADED mode")
        again = start_gateway()
        [reply] = again.replies("do", 1)
        assert reply["text"].removeprefix(RECOVERED_PREFIX) == "echo: hi"
