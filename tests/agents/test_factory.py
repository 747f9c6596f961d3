"""``agent_factory_from_config``: one factory per ``agent.kind``, config errors at build time."""

from __future__ import annotations

import json
import logging
import shlex
import sys

import pytest

from hermes_actors import (
    ConfigError,
    EchoAgent,
    Gateway,
    InMemoryAdapter,
    MessageEvent,
    SessionSource,
    load_config,
)
from hermes_actors.agents.command import CommandAgent
from hermes_actors.agents.factory import agent_factory_from_config
from hermes_actors.agents.openai import OpenAIAgent
from hermes_actors.testing import ScriptedAgent

from .programs import argv


def factory_for(agent: dict, env: dict | None = None):
    """The factory for an ``agent`` config section (no environment overrides)."""
    return agent_factory_from_config(load_config({"agent": agent}, env={}), env=env or {})


class TestKinds:
    """Each kind builds its agent with the configured settings."""

    def test_echo(self):
        """``echo`` builds EchoAgents."""
        assert isinstance(factory_for({"kind": "echo"})(None), EchoAgent)

    def test_scripted_agents_share_gates(self):
        """``scripted`` builds ScriptedAgents that share one set of gates."""
        factory = factory_for({"kind": "scripted"})
        first, second = factory(None), factory(None)
        assert isinstance(first, ScriptedAgent) and first.gates is second.gates

    def test_command(self):
        """``command`` builds a CommandAgent with the command line and agent.timeout."""
        agent = factory_for({"kind": "command",
                             "command": f"{shlex.quote(sys.executable)} --fast 'a b'",
                             "timeout": 42})(None)
        assert isinstance(agent, CommandAgent)
        assert (agent.argv, agent.timeout) == ((sys.executable, "--fast", "a b"), 42)

    def test_openai(self):
        """``openai`` builds an OpenAIAgent with URL, model, timeout and the key from env."""
        factory = factory_for(
            {"kind": "openai", "timeout": 30,
             "openai": {"base_url": "http://127.0.0.1:8080", "model": "llama",
                        "api_key_env": "LLM_KEY"}},
            env={"LLM_KEY": "sk-1"},
        )
        agent = factory(None)
        assert isinstance(agent, OpenAIAgent)
        assert agent.url.geturl() == "http://127.0.0.1:8080/v1/chat/completions"
        assert (agent.model, agent.timeout, agent._headers()["Authorization"]) == (
            "llama", 30, "Bearer sk-1")


class TestConfigErrors:
    """Missing or unusable settings are ConfigErrors naming the key, raised at build time."""

    def test_command_missing(self):
        """``command`` without ``agent.command`` names that key."""
        with pytest.raises(ConfigError, match="'agent.command'"):
            factory_for({"kind": "command"})

    def test_command_not_found(self, monkeypatch, tmp_path):
        """A program that is not on PATH is named at build time, not on every turn."""
        monkeypatch.setenv("PATH", str(tmp_path))
        with pytest.raises(ConfigError) as info:
            factory_for({"kind": "command", "command": "no-such-agent --fast"})
        assert str(info.value) == (
            "config key 'agent.command': the program 'no-such-agent' was not found "
            "(not on PATH, or not an executable file)")

    def test_command_path_that_is_not_an_executable_file(self, tmp_path):
        """A path is checked as it is: missing, or a file without the execute bit."""
        script = tmp_path / "agent.py"
        script.write_text("print('hi')\n")
        for path in (tmp_path / "missing", script, tmp_path):
            with pytest.raises(ConfigError, match=f"the program {str(path)!r} was not found"):
                factory_for({"kind": "command", "command": [str(path)]})

    @pytest.mark.parametrize(("openai", "key"), [
        ({"model": "m"}, "agent.openai.base_url"),
        ({"base_url": "  ", "model": "m"}, "agent.openai.base_url"),
        ({"base_url": "localhost:8080", "model": "m"}, "agent.openai.base_url"),
        ({"base_url": "http://127.0.0.1:80800/v1", "model": "m"}, "agent.openai.base_url"),
        ({"base_url": "http://127.0.0.1:80x/v1", "model": "m"}, "agent.openai.base_url"),
        ({"base_url": "http://h/v1"}, "agent.openai.model"),
        ({"base_url": "http://h/v1", "model": "m", "api_key_env": "NOPE"},
         "agent.openai.api_key_env"),
    ])
    def test_openai_incomplete(self, openai, key):
        """Each missing or bad ``agent.openai`` setting is named in the error."""
        with pytest.raises(ConfigError, match=f"'{key}'"):
            factory_for({"kind": "openai", "openai": openai})

    def test_gateway_refuses_a_bad_agent_config(self, tmp_path):
        """A Gateway built from such a config fails at construction, not on a turn."""
        with pytest.raises(ConfigError, match="'agent.command'"):
            Gateway(tmp_path / "home", config=load_config({"agent": {"kind": "command"}},
                                                          env={}))


class TestThroughGateway:
    """A configured agent answers real turns through the Gateway."""

    def run_one(self, tmp_path, agent: dict) -> str:
        adapter = InMemoryAdapter("telegram")
        config = load_config({"agent": agent}, env={})
        with Gateway(tmp_path / "home", config=config, adapters=[adapter]) as gw:
            gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="42", user_id="7"),
                                   text="hello"))
            assert gw.wait_idle(timeout=20)
        return adapter.sent[-1].text

    def test_command_agent_turn(self, tmp_path, programs):
        """The command agent's reply record reaches the user."""
        record = json.dumps({"reply": "from the program"})
        assert self.run_one(tmp_path, {"kind": "command",
                                       "command": argv(programs, "print", record)}) == (
            "from the program")

    def test_failing_command_sends_the_failure_notice(self, tmp_path, programs):
        """A program exiting non-zero gives the user the failed-turn notice."""
        text = self.run_one(tmp_path, {"kind": "command",
                                       "command": argv(programs, "fail", "nope", 1)})
        assert "CommandAgentError" in text

    def test_failing_command_logs_why(self, tmp_path, programs, caplog):
        """The log line of the failed turn says what went wrong, not only the error type."""
        with caplog.at_level(logging.WARNING, logger="hermes_actors.turn"):
            self.run_one(tmp_path, {"kind": "command",
                                    "command": argv(programs, "fail", "nope", 1)})
        [line] = [r.getMessage() for r in caplog.records if r.name == "hermes_actors.turn"]
        assert line.startswith("agent failed session_key=agent:main:telegram:dm:42 "
                               "error=CommandAgentError: agent command ")
        assert line.endswith(" exited with status 1; stderr: nope")

    def test_openai_agent_turn(self, tmp_path, chat_server):
        """The model's reply reaches the user."""
        text = self.run_one(tmp_path, {"kind": "openai", "openai": {
            "base_url": chat_server.base_url, "model": "m"}})
        assert text == "hello from the model"
        assert chat_server.seen[0].body["messages"][-1] == {"role": "user", "content": "hello"}

