"""``TurnRequest.interrupted()``: an interrupt that reached the agent before its ``run_turn``
(which clears the agent's own flag) still stops the turn (§9)."""

from __future__ import annotations

from hermes_actors.agents.base import TurnResult
from hermes_actors.agents.command import CommandAgent
from hermes_actors.agents.openai import OpenAIAgent
from hermes_actors.testing import ScriptedAgent

from .conftest import make_request
from .programs import argv

INTERRUPTED = TurnResult(None, "interrupted")


def test_a_request_built_elsewhere_is_not_interrupted():
    assert make_request().interrupted() is False
    assert make_request(interrupted=True).interrupted() is True


def test_command_agent_starts_no_program(programs, tmp_path):
    """The program would leave a file behind; it is never started."""
    marker = tmp_path / "ran"
    agent = CommandAgent(argv(programs, "touch", marker), timeout=10)
    agent.interrupt("/stop")  # before run_turn: cleared by it
    assert agent.run_turn(make_request(interrupted=True)) == INTERRUPTED
    assert not marker.exists()
    assert agent.run_turn(make_request()) == TurnResult(None)  # the next turn runs
    assert marker.exists()


def test_openai_agent_sends_nothing(chat_server):
    agent = OpenAIAgent(chat_server.base_url, "m", timeout=10)
    agent.interrupt("/stop")
    assert agent.run_turn(make_request(interrupted=True)) == INTERRUPTED
    assert chat_server.state.seen == []
    assert agent.run_turn(make_request()).status == "completed"


def test_scripted_agent_does_not_obey():
    agent = ScriptedAgent()
    agent.interrupt("/stop")
    assert agent.run_turn(make_request("echo this", interrupted=True)) == INTERRUPTED
    assert agent.run_turn(make_request("echo this")).reply == "echo: echo this"
