"""``hermes-actors chat``: an interactive console session on an embedded gateway.

Plain threads, no gevent: the console is one user typing, and the embedded ``Gateway`` is
exactly what a host service would run. Each line is one message on platform ``local``; the
console waits until the gateway is idle before reading the next line, so replies appear in
order under the message that caused them (a piped script reads the same as a typed session).
Ctrl-C during a turn sends ``/stop``; ``/quit``, ``/exit``, end of input or Ctrl-C at the prompt
end the session with a graceful stop, like ``run`` does on SIGTERM.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TextIO

from hermes_actors.adapters.base import SendResult
from hermes_actors.config import GatewayConfig
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource

__all__ = ["QUIT_WORDS", "ConsoleAdapter", "chat"]

#: Lines that end the session.
QUIT_WORDS = ("/quit", "/exit")


class ConsoleAdapter:
    """The ``local`` platform adapter: every reply is written to ``out`` as it arrives."""

    def __init__(self, out: TextIO) -> None:
        #: Always ``local``.
        self.platform = "local"
        #: Always True: the terminal is there.
        self.connected = True
        self._out = out
        self._lock = threading.Lock()

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Print ``text`` (a whole reply, then a newline)."""
        with self._lock:
            self._out.write(text + "\n")
            self._out.flush()
        return SendResult(success=True)


def chat(home: Path, config: GatewayConfig, *, chat_id: str = "console",
         user_id: str | None = None, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout,
         stderr: TextIO = sys.stderr) -> int:
    """Run the console session until ``/quit`` or end of input; returns the exit code."""
    from hermes_actors.runtime.gateway import Gateway

    home.mkdir(parents=True, exist_ok=True)
    interactive = stdin.isatty()
    source = SessionSource("local", chat_id=chat_id, user_id=user_id or _user())
    gateway = Gateway(home, config, adapters=[ConsoleAdapter(stdout)])
    report = gateway.start()
    stderr.write(report.summary() + "\n")
    if interactive:
        stderr.write("Type a message; /quit or Ctrl-D ends the session.\n")
    try:
        _loop(gateway, source, stdin, stdout, interactive)
    finally:
        gateway.stop(drain_timeout=config.restart_drain_timeout)
    return 0


def _loop(gateway, source: SessionSource, stdin: TextIO, stdout: TextIO,
          interactive: bool) -> None:
    while True:
        if interactive:
            stdout.write("> ")
            stdout.flush()
        try:
            line = stdin.readline()
        except KeyboardInterrupt:
            return
        if not line:
            return
        text = line.rstrip("\r\n")
        if text.strip().lower() in QUIT_WORDS:
            return
        if not text.strip():
            continue
        gateway.submit(MessageEvent(source=source, text=text))
        try:
            gateway.wait_idle()
        except KeyboardInterrupt:
            gateway.submit(MessageEvent(source=source, text="/stop"))
            gateway.wait_idle()


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "console"
