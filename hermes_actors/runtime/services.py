"""``Services``: what every session actor and turn worker of one gateway shares.

Everything here is either immutable, an actor reference, or a thread-safe service (the store,
the delivery, the delegation registry, the activity tracker): actors share no mutable state
except through messages and the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_actors.config import GatewayConfig
from hermes_actors.model.events import MessageEvent
from hermes_actors.runtime.activity import ActivityTracker
from hermes_actors.runtime.counters import QueueGauge, TurnCounters
from hermes_actors.runtime.delegations import DelegationRegistry
from hermes_actors.runtime.delivery import Delivery, NoticePool

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Services"]

#: The static part of every system prompt; the session context follows it.
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. People reach you through chat platforms via a gateway."
)


@dataclass(frozen=True)
class Services:
    """The shared collaborators of one running gateway."""

    config: GatewayConfig
    store: Any
    delivery: Delivery
    notices: NoticePool
    #: Proxy of the AgentCacheActor.
    cache: Any
    delegations: DelegationRegistry
    tracker: ActivityTracker
    #: Counts running turns only (the drain waits on it).
    turns: ActivityTracker
    clock: Any
    agent_factory: Callable[[Any], Any]
    #: Submit an internal wake-up (delegation completions) from any thread.
    submit_internal: Callable[[MessageEvent], None]
    #: ``try_retire(key, ref, inbox_empty) -> bool`` of the session router.
    try_retire: Callable[..., bool]
    #: Called with the session key after every successful turn (resets stuck counters).
    on_turn_succeeded: Callable[[str], None]
    #: Set when the gateway stops: no actor starts a new turn from then on.
    stopping: threading.Event
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    #: Finished turns by status and duration.
    turn_counters: TurnCounters = field(default_factory=TurnCounters)
    #: Events queued in live sessions, over all of them.
    queued: QueueGauge = field(default_factory=QueueGauge)
    #: Counts ``/new`` resets from their start until their actor handled their end (the
    #: drain waits on it: a reset cut off by the stop would replay its ``/new``).
    resets: ActivityTracker = field(default_factory=ActivityTracker)
