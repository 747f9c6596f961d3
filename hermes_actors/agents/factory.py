"""Build an ``agent_factory`` from ``agent.kind`` in the config.

Everything a kind needs is checked here, once, when the gateway is built, so a missing
command, URL, model or API key is a ``ConfigError`` naming the key at startup rather than a
failure notice on every turn.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from hermes_actors.config import GatewayConfig
from hermes_actors.errors import ConfigError

__all__ = ["agent_factory_from_config"]


def agent_factory_from_config(
    config: GatewayConfig, *, env: Mapping[str, str] | None = None
) -> Callable[[Any], Any]:
    """The factory for ``config.agent.kind`` (``echo``, ``scripted``, ``command``, ``openai``).

    ``env`` (default ``os.environ``) is where ``agent.openai.api_key_env`` is looked up.
    """
    agent = config.agent
    kind = agent.kind
    if kind == "echo":
        from hermes_actors.agents.echo import EchoAgent

        return lambda context: EchoAgent()
    if kind == "scripted":
        from hermes_actors.agents.scripted import Gates, ScriptedAgent

        gates = Gates()
        return lambda context: ScriptedAgent(gates=gates)
    if kind == "command":
        from hermes_actors.agents.command import CommandAgent

        argv = agent.command
        if not argv:
            raise ConfigError(
                "config key 'agent.command': agent kind 'command' needs the program to run "
                "(a command line or a list of arguments)"
            )
        if shutil.which(argv[0]) is None:  # (a path with a slash is checked as it is)
            raise ConfigError(
                f"config key 'agent.command': the program {argv[0]!r} was not found "
                "(not on PATH, or not an executable file)"
            )
        timeout = agent.timeout
        return lambda context: CommandAgent(argv, timeout=timeout)
    if kind == "openai":
        return _openai_factory(config, os.environ if env is None else env)
    raise ConfigError(f"config key 'agent.kind': agent kind {kind!r} is not available")


def _openai_factory(config: GatewayConfig, env: Mapping[str, str]) -> Callable[[Any], Any]:
    from hermes_actors.agents.openai import OpenAIAgent, chat_completions_url

    openai, timeout = config.agent.openai, config.agent.timeout
    base_url, model = (openai.base_url or "").strip(), (openai.model or "").strip()
    if not base_url:
        raise ConfigError(
            "config key 'agent.openai.base_url': agent kind 'openai' needs the server's API "
            "root, e.g. http://127.0.0.1:8080/v1"
        )
    try:
        chat_completions_url(base_url)
    except ValueError as exc:
        raise ConfigError(f"config key 'agent.openai.base_url': {exc}") from None
    if not model:
        raise ConfigError(
            "config key 'agent.openai.model': agent kind 'openai' needs the model name to send"
        )
    api_key = None
    if openai.api_key_env:
        api_key = env.get(openai.api_key_env) or None
        if api_key is None:
            raise ConfigError(
                f"config key 'agent.openai.api_key_env': environment variable "
                f"{openai.api_key_env!r} is not set (unset agent.openai.api_key_env for a "
                "server without authentication)"
            )
    return lambda context: OpenAIAgent(base_url, model, api_key=api_key, timeout=timeout)
