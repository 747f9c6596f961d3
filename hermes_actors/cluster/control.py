"""Operator actions for a session another node serves, carried to its shard's owner as a
*control event* in the shared inbox (issue 39).

An action that changes a session's state (``unsuspend``, ``delete``) must run on the node
that serves the session: only that node may write the session's routing row (its writes are
fenced by the shard's tenure), and only it holds the session's actor and cached entry. A
node asked for a session it does not serve writes a control event into the inbox instead,
exactly as it accepts a message for that session: durable, announced to the shard's owner
(``NOTIFY``), and dispatched by the owner in the session's arrival order. The owner runs
the action instead of handing the event to the session actor, then consumes the event. If
the owner dies first, the shard's next owner replays the unconsumed event at recovery, so
an accepted action is carried out once the session is served again (every action is
idempotent: a replay after a crash between the action and the consumption is harmless).

A control event is an internal event (never a turn, never a command, never a resume
note's carrier) whose metadata names the action under :data:`CONTROL`. Here only its
shape; the actions themselves are the runtime's (``runtime.operator_actions``).
"""

from __future__ import annotations

from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource

__all__ = ["CONTROL", "control_action", "control_event"]

#: The metadata key of a control event: the action's name.
CONTROL = "operator_action"


def control_event(source: SessionSource, action: str) -> MessageEvent:
    """The control event asking the owner of ``source``'s session to run ``action``."""
    if not action:
        raise ValueError("a control event names an action")
    return MessageEvent(source=source, internal=True, metadata={CONTROL: action})


def control_action(event: MessageEvent) -> str | None:
    """The action a control event names, or ``None`` for any other event."""
    if not event.internal:
        return None
    action = event.metadata.get(CONTROL)
    return action if isinstance(action, str) and action else None
