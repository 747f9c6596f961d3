"""Build an ``agent_factory`` from ``agent.kind`` in the config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_actors.config import GatewayConfig
from hermes_actors.errors import ConfigError

__all__ = ["agent_factory_from_config"]


def agent_factory_from_config(config: GatewayConfig) -> Callable[[Any], Any]:
    """The factory for ``config.agent.kind`` (``echo``, ``scripted``, ...)."""
    kind = config.agent.kind
    if kind == "echo":
        from hermes_actors.agents.echo import EchoAgent

        return lambda context: EchoAgent()
    if kind == "scripted":
        from hermes_actors.testing.scripted import Gates, ScriptedAgent

        gates = Gates()
        return lambda context: ScriptedAgent(gates=gates)
    raise ConfigError(f"config key 'agent.kind': agent kind {kind!r} is not available yet")
