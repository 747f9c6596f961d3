"""Public test helpers for hosts that embed hermes_actors (like ``structlog.testing``)."""

from hermes_actors.adapters.memory import InMemoryAdapter
from hermes_actors.agents.scripted import Gates, ScriptedAgent, ScriptedFailure
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.testing.clock import FakeClock
from hermes_actors.testing.memory import FakeMemoryProbe
from hermes_actors.testing.rows import db_rows, node_values
from hermes_actors.testing.wait import wait_until

__all__ = [
    "FakeClock",
    "FakeMemoryProbe",
    "Gates",
    "InMemoryAdapter",
    "ScriptedAgent",
    "ScriptedFailure",
    "crashpoint",
    "db_rows",
    "node_values",
    "wait_until",
]
