"""hermes_actors: an actor runtime for the session lifecycle of a chat-agent gateway.

The public API, exactly as SPEC.md §1 names it. Everything else lives in submodules:
``hermes_actors.testing`` holds the public test helpers.
"""

from hermes_actors.adapters.base import PlatformAdapter, SendResult
from hermes_actors.adapters.memory import InMemoryAdapter
from hermes_actors.agents.base import Agent, TurnRequest, TurnResult
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.config import GatewayConfig, load_config
from hermes_actors.errors import (
    ConfigError,
    ConfigWarning,
    HermesActorsError,
    UnknownPlatformError,
)
from hermes_actors.model.context import (
    SessionContext,
    build_session_context,
    build_session_context_prompt,
)
from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.keys import build_session_key, is_shared_multi_user_session
from hermes_actors.model.platform import Platform
from hermes_actors.model.silence import is_silence_marker
from hermes_actors.model.source import SessionSource
from hermes_actors.model.whatsapp import canonical_whatsapp_identifier
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.recovery import RecoveryReport
from hermes_actors.store.db import SessionDB
from hermes_actors.store.store import SessionStore

__all__ = [
    "Agent",
    "ConfigError",
    "ConfigWarning",
    "EchoAgent",
    "Gateway",
    "GatewayConfig",
    "HermesActorsError",
    "InMemoryAdapter",
    "MessageEvent",
    "MessageType",
    "Platform",
    "PlatformAdapter",
    "RecoveryReport",
    "SendResult",
    "SessionContext",
    "SessionDB",
    "SessionEntry",
    "SessionSource",
    "SessionStore",
    "TurnRequest",
    "TurnResult",
    "UnknownPlatformError",
    "build_session_context",
    "build_session_context_prompt",
    "build_session_key",
    "canonical_whatsapp_identifier",
    "is_shared_multi_user_session",
    "is_silence_marker",
    "load_config",
]
