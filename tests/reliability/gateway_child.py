"""A gateway in a child process, driven over stdin/stdout, for tests that really kill it.

stdin: one JSON object a line: ``{"text", "chat_id"?, "user_id"?, "message_id"?, "internal"?}`` → submit,
answered ``ACK <event_id>`` once the event is durable; ``{"idle": <seconds>}`` → ``IDLE true|false``
from ``wait_idle``; ``{"stop": <drain seconds>}`` → a graceful stop and exit 0. stdout:
``READY <report json>``, ``TURN <json message>`` when a turn reaches the agent, ``SENT <json
text>`` after each send. Sends go to ``<home>/outbox.jsonl`` (fsynced a line at a time), so the
parent reads exactly what a user would have received, even after a SIGKILL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading

from hermes_actors import Gateway, MessageEvent, SendResult, SessionSource, load_config
from hermes_actors.testing import ScriptedAgent

_out_lock = threading.Lock()


def emit(line: str) -> None:
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class FileAdapter:
    """Appends every send to a JSONL file, fsynced."""

    def __init__(self, platform: str, path: str) -> None:
        self.platform = platform
        self.connected = True
        self._path = path
        self._lock = threading.Lock()

    def send(self, target, text):
        with self._lock, open(self._path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"chat_id": target.chat_id, "text": text}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        emit("SENT " + json.dumps(text))
        return SendResult(success=True)


class AnnouncingAgent(ScriptedAgent):
    def run_turn(self, request):
        emit("TURN " + json.dumps(request.message))
        return super().run_turn(request)


def main() -> int:
    home = sys.argv[1]
    config = load_config(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
    adapter = FileAdapter("telegram", os.path.join(home, "outbox.jsonl"))
    os.makedirs(home, exist_ok=True)
    gw = Gateway(home, config=config, agent_factory=lambda ctx: AnnouncingAgent(),
                 adapters=[adapter])
    report = gw.start()
    done = threading.Event()

    def stop(drain: float | None = None) -> None:
        gw.stop(drain_timeout=drain)
        done.set()

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop).start())
    interrupted = gw.stats()["supervisor"]["interrupted"]
    emit("READY " + json.dumps({**dataclasses.asdict(report), "interrupted": interrupted}))

    def read() -> None:
        for line in sys.stdin:
            msg = json.loads(line)
            if "stop" in msg:
                stop(msg["stop"])
                return
            if "idle" in msg:
                emit(f"IDLE {json.dumps(gw.wait_idle(msg['idle']))}")
                continue
            src = SessionSource("telegram", chat_id=msg.get("chat_id", "42"),
                                user_id=msg.get("user_id", "7"),
                                message_id=msg.get("message_id"))
            event_id = gw.submit(MessageEvent(source=src, text=msg["text"],
                                              internal=msg.get("internal", False)))
            emit(f"ACK {event_id}")

    threading.Thread(target=read, daemon=True).start()
    done.wait()
    emit("STOPPED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
