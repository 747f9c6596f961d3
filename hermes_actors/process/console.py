"""``hermes-actors chat``: an interactive console session, on an embedded gateway or, with
``--url``, on a running one.

Plain threads, no gevent: the console is one user typing, and the embedded ``Gateway`` is
exactly what a host service would run. Each line is one message on platform ``local``; the
console waits until the gateway is idle before reading the next line, so replies appear in
order under the message that caused them (a piped script reads the same as a typed session).
Ctrl-C during a turn sends ``/stop``; ``/quit``, ``/exit``, end of input or Ctrl-C at the prompt
end the session with a graceful stop, like ``run`` does on SIGTERM.

``chat --url`` (:func:`remote_chat`) talks to a gateway that ``run`` serves instead of
opening the home: each line is posted (platform ``webhook``), and the conversation's event
stream (``GET /v1/stream``) prints every message of the chat as it is written; the next line
is read once the answer to the last one came. Messages that arrive between two lines (a
delegation's result) are printed at the next one.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from hermes_actors.adapters.base import SendResult
from hermes_actors.config import GatewayConfig
from hermes_actors.errors import CommandFailed
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource
from hermes_actors.process.client import readable_text

__all__ = ["QUIT_WORDS", "ConsoleAdapter", "chat", "remote_chat"]

#: Seconds ``chat --url`` waits for the answer to a line.
REMOTE_TIMEOUT = 600.0

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

    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a regular file there, no permission: one line, as ``run`` says
        raise CommandFailed(f"cannot create the home directory {str(home)!r}: {exc}") from None
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
        text = readable_text(line.rstrip("\r\n"))
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


def remote_chat(client: Any, *, chat_id: str = "console", user_id: str | None = None,
                platform: str = "webhook", stdin: TextIO = sys.stdin,
                stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr,
                timeout: float = REMOTE_TIMEOUT) -> int:
    """The console over HTTP: ``client`` is a ``GatewayClient``; returns the exit code."""
    from hermes_actors.process.client import AnswerWaiter

    def out(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    interactive = stdin.isatty()
    stream = client.stream(chat_id, platform)
    waiter = AnswerWaiter(client, stream, chat_id, platform, out, show_all=True)
    if interactive:
        stderr.write(f"Connected to {client.url}; /quit or Ctrl-D ends the session.\n")
    fields = {"chat_id": chat_id, "user_id": user_id or _user(), "platform": platform}
    try:
        while True:
            if interactive:
                stdout.write("> ")
                stdout.flush()
            line = stdin.readline()
            if not line or line.strip().lower() in QUIT_WORDS:
                return 0
            text = readable_text(line.rstrip("\r\n"))
            if not text.strip():
                continue
            accepted = client.post_message({**fields, "text": text})
            try:
                answered = waiter.wait(accepted["event_id"], timeout)
            except KeyboardInterrupt:
                client.post_message({**fields, "text": "/stop"})
                continue
            if answered is None:
                stderr.write(f"(no reply within {timeout:g}s)\n")
    except KeyboardInterrupt:
        return 0
    finally:
        stream.close()


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "console"
