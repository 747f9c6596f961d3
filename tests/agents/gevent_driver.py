"""Agent turns under ``gevent.monkey.patch_all()``, as in the standalone process.

Run as ``python gevent_driver.py <folder>``; prints one JSON object of outcomes for
``test_gevent.py``. Interrupts come from another greenlet, which can only run if the turn
yields to the hub instead of blocking it.
"""

from gevent import monkey

monkey.patch_all()

# ruff: noqa: E402 - everything below must be imported after patching
import json
import socket
import sys
import threading
from pathlib import Path

from fake_chat import FakeChatServer
from programs import Started, argv, write_programs

from hermes_actors.agents.base import TurnRequest
from hermes_actors.agents.command import CommandAgent, CommandAgentError
from hermes_actors.agents.openai import OpenAIAgent
from hermes_actors.model.context import SessionContext
from hermes_actors.model.source import SessionSource


def request(message: str) -> TurnRequest:
    source = SessionSource("telegram", chat_id="42", user_id="7")
    return TurnRequest(session_key="k", session_id="s", message=message,
                       history=[{"role": "user", "content": "before"}],
                       context=SessionContext(source=source), system_prompt="sys")


def in_greenlet(fn):
    """Start ``fn`` in a (patched) thread, i.e. a greenlet; returns a join-and-get function."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            box["value"] = type(exc).__name__

    thread = threading.Thread(target=run)
    thread.start()

    def result():
        thread.join(10)
        return box.get("value", "still running")

    return result


def command_outcomes(paths) -> dict:
    out = {}
    agent = CommandAgent(argv(paths, "echo_request"), timeout=10)
    out["round_trip"] = json.loads(agent.run_turn(request("héllo")).reply)["message"]
    started = Started()
    agent = CommandAgent(argv(paths, "block", started.port, "ignore-term"), timeout=60,
                         grace=0.2)
    result = in_greenlet(lambda: agent.run_turn(request("block")))
    started.wait()
    agent.interrupt("/stop")
    out["interrupt"] = result().status
    agent = CommandAgent(argv(paths, "block", started.port, "plain"), timeout=0.3)
    try:
        agent.run_turn(request("block"))
    except CommandAgentError as exc:
        out["timeout"] = type(exc).__name__
    started.close()
    return out


def openai_outcomes() -> dict:
    server = FakeChatServer()
    try:
        agent = OpenAIAgent(server.base_url, "m", timeout=10)
        out = {"reply": agent.run_turn(request("hi")).reply}
        server.state.hold = True
        result = in_greenlet(lambda: agent.run_turn(request("hold")))
        server.state.received.wait(10)
        agent.interrupt("/stop")
        out["openai_interrupt"] = result().status
    finally:
        server.close()
    # A server that takes the connection and never answers the TLS hello.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        agent = OpenAIAgent(f"https://127.0.0.1:{port}/v1", "m", timeout=60)
        result = in_greenlet(lambda: agent.run_turn(request("hi")))
        conn, _ = silent.accept()
        with conn:
            conn.recv(1)  # the client hello: in the handshake now
            agent.interrupt("/stop")
            out["openai_handshake_interrupt"] = result().status
    return out


def main() -> None:
    paths = write_programs(Path(sys.argv[1]))
    outcomes = {"patched": monkey.is_module_patched("subprocess")
                and monkey.is_module_patched("socket")}
    outcomes.update(command_outcomes(paths))
    outcomes.update(openai_outcomes())
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
