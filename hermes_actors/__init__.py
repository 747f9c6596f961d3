"""hermes_actors: an actor runtime for the session lifecycle of a chat-agent gateway.

The public API, exactly as SPEC.md §1 names it. Names are imported on first use (PEP 562),
so ``hermes-actors run`` can apply ``gevent.monkey.patch_all()`` before anything here imports
``threading``. ``hermes_actors.testing`` holds the public test helpers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_actors._lazy import lazy_exports

_EXPORTS = {
    "Agent": "hermes_actors.agents.base",
    "ConfigError": "hermes_actors.errors",
    "ConfigWarning": "hermes_actors.errors",
    "EchoAgent": "hermes_actors.agents.echo",
    "Answer": "hermes_actors.runtime.answers",
    "Gateway": "hermes_actors.runtime.gateway",
    "GatewayConfig": "hermes_actors.config",
    "HermesActorsError": "hermes_actors.errors",
    "HomeInUseError": "hermes_actors.errors",
    "InMemoryAdapter": "hermes_actors.adapters.memory",
    "MessageEvent": "hermes_actors.model.events",
    "MessageType": "hermes_actors.model.events",
    "Platform": "hermes_actors.model.platform",
    "PlatformAdapter": "hermes_actors.adapters.base",
    "RecoveryReport": "hermes_actors.runtime.recovery",
    "SendResult": "hermes_actors.adapters.base",
    "SessionContext": "hermes_actors.model.context",
    "SessionDB": "hermes_actors.store.backends.sqlite.db",
    "SessionEntry": "hermes_actors.model.entry",
    "SessionSource": "hermes_actors.model.source",
    "SessionStore": "hermes_actors.store.store",
    "TurnRequest": "hermes_actors.agents.base",
    "TurnResult": "hermes_actors.agents.base",
    "UnknownPlatformError": "hermes_actors.errors",
    "build_session_context": "hermes_actors.model.context",
    "build_session_context_prompt": "hermes_actors.model.context",
    "build_session_key": "hermes_actors.model.keys",
    "canonical_whatsapp_identifier": "hermes_actors.model.whatsapp",
    "is_shared_multi_user_session": "hermes_actors.model.keys",
    "is_silence_marker": "hermes_actors.model.silence",
    "load_config": "hermes_actors.config",
}

__all__ = [
    "Agent",
    "Answer",
    "ConfigError",
    "ConfigWarning",
    "EchoAgent",
    "Gateway",
    "GatewayConfig",
    "HermesActorsError",
    "HomeInUseError",
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

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from hermes_actors.adapters.base import PlatformAdapter, SendResult
    from hermes_actors.adapters.memory import InMemoryAdapter
    from hermes_actors.agents.base import Agent, TurnRequest, TurnResult
    from hermes_actors.agents.echo import EchoAgent
    from hermes_actors.config import GatewayConfig, load_config
    from hermes_actors.errors import (
        ConfigError,
        ConfigWarning,
        HermesActorsError,
        HomeInUseError,
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
    from hermes_actors.runtime.answers import Answer
    from hermes_actors.runtime.gateway import Gateway
    from hermes_actors.runtime.recovery import RecoveryReport
    from hermes_actors.store.backends.sqlite.db import SessionDB
    from hermes_actors.store.store import SessionStore


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
