"""``send --wait`` across a restart of the real gateway (issue 36, item 5): it reconnects,
reads on from the last cursor it saw and prints the final answer of its own message."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from hermes_actors.testing import wait_until

from .conftest import GatewayProcess, Stream, clean_env

CHAT = "restart"
KEY = f"agent:main:webhook:dm:{CHAT}"


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


class Sender:
    """``hermes-actors send --wait TEXT`` running in the background."""

    def __init__(self, url: str, text: str, timeout: float = 90.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_actors", "send", "--wait", text, "--chat-id", CHAT,
             "--url", url, "--timeout", f"{timeout:g}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
        self.stderr = Stream(self.proc.stderr)

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        """Its exit code, stdout and stderr, once it ended."""
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        with pytest.raises(AssertionError, match="stream ended"):
            self.stderr.expect("(?!)", timeout=30)  # read to its end
        return code, out, self.stderr.text()


def _running(gateway: GatewayProcess) -> None:
    """Until the session's turn runs."""
    def running() -> bool:
        status, body = gateway.session(KEY)
        return status == 200 and bool(body.get("running"))

    wait_until(running, 30, 0.05, "the start of the turn")


@pytest.fixture
def restartable(start_gateway, tmp_path):
    """``restartable()`` starts a gateway (scripted agent, queue mode, a short drain) on the
    same home and the same port each time."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "busy_input_mode: queue\nrestart_drain_timeout: 0.2\n", encoding="utf-8")
    port = _free_port()
    return lambda: start_gateway("--agent", "scripted", "--port", port, home=home)


class TestSendWaitAcrossARestart:
    """The answer written by the next gateway process is printed, and the exit code is 0."""

    def test_a_queued_message_answered_after_a_graceful_restart(self, restartable):
        gateway = restartable()
        gateway.post(CHAT, "sleep 3")
        _running(gateway)
        sender = Sender(gateway.url, "x")
        sender.stderr.expect("Queued for the next turn", timeout=30)  # accepted, waiting
        assert gateway.stop() == 0  # the drain ends before the sleep: x stays in the inbox
        assert sender.proc.poll() is None  # still waiting
        again = restartable()
        assert "replayed_inbox=1" in again.recovery()
        code, out, err = sender.finish()
        assert code == 0, err
        assert out.splitlines()[-1] == "echo: x"
        assert err == "Queued for the next turn."  # the acknowledgement, once, on stderr

    def test_a_turn_resumed_after_a_kill_is_answered(self, restartable):
        gateway = restartable()
        sender = Sender(gateway.url, "sleep 4", timeout=40)
        _running(gateway)
        gateway.kill()
        restartable()
        code, out, err = sender.finish()
        assert code == 0, err
        assert out.startswith("resumed: sleep 4")
