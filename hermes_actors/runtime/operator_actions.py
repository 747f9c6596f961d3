"""The operator's session actions that must run where the session is served
(``unsuspend``, ``delete``), on any gateway.

:func:`perform` is what ``Gateway.operator_action`` does: on a gateway that is not a
cluster node, or on the node serving the session, it runs the action now; on another node
it writes a control event (:mod:`hermes_actors.cluster.control`) into the shared inbox for
the shard's owner and answers with the event's id. :func:`execute` is the owner's side: the
gateway's dispatch hands it every control event instead of the session actor, and it runs
the action off the gateway's lock, then consumes the event.

An action is a function ``(gateway, session_key) -> bool`` (``False``: no such session),
idempotent (a control event is replayed after a crash between the action and its
consumption), registered in :data:`ACTIONS` under the name the HTTP route uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from hermes_actors._green import spawn
from hermes_actors.cluster.control import control_action, control_event
from hermes_actors.errors import FencedError, StoreUnavailableError
from hermes_actors.model.events import MessageEvent

__all__ = ["ACTIONS", "CONSUMED_REASON", "OperatorOutcome", "execute", "perform"]

log = logging.getLogger("hermes_actors.runtime")

#: The ``consumed_reason`` of a control event once its action ran.
CONSUMED_REASON = "operator"

Action = Callable[[Any, str], bool]


def _unsuspend(gateway: Any, key: str) -> bool:
    return bool(gateway.store.unsuspend_session(key))


def _delete(gateway: Any, key: str) -> bool:
    # (the control event that carried it is one of the inbox rows deleted with the
    # conversation: its consumption afterwards finds nothing)
    return gateway.delete_session(key) is not None


#: name -> the action (see the module docstring).
ACTIONS: dict[str, Action] = {
    "unsuspend": _unsuspend,
    "delete": _delete,
}


class OperatorOutcome(NamedTuple):
    """What :func:`perform` did."""

    #: The session exists (the action ran, or was sent to its owner).
    found: bool
    #: The control event's id when the action was sent to the shard's owner; ``None``
    #: when it ran here.
    event_id: str | None = None
    #: Why it could not be sent (the session has no origin to address it with).
    refused: str | None = None


def perform(gateway: Any, session_key: str, action: str) -> OperatorOutcome:
    """Run ``action`` on ``session_key`` here when this gateway serves the session, else
    send it to the session's owner (see the module docstring)."""
    run = ACTIONS[action]
    cluster = gateway.cluster
    if cluster is None or cluster.serves(session_key):
        return OperatorOutcome(run(gateway, session_key))
    entry = gateway.session_entry(session_key)
    if entry is None:
        return OperatorOutcome(False)
    if entry.origin is None:
        return OperatorOutcome(True, refused=f"session {session_key!r} has no origin to "
                               "address its owner with")
    event_id = gateway.submit(control_event(entry.origin, action))
    log.info("event=operator_action_sent action=%s session_key=%s event_id=%s", action,
             session_key, event_id)
    return OperatorOutcome(True, event_id)


def execute(gateway: Any, session_key: str, event: MessageEvent,
            started: Callable[[], None], done: Callable[[], None]) -> None:
    """Run the control ``event``'s action for ``session_key`` on a worker of its own (the
    caller holds the gateway's lock), then consume the event. ``started``/``done`` bracket
    the work (the gateway's activity tracker). A write the shard's fence refuses, or one
    in an outage, leaves the event unconsumed: the session's next owner, or this node's
    replacement, replays it. An unknown action is consumed as ``dropped``."""
    action = control_action(event)
    run = ACTIONS.get(action or "")

    def work() -> None:
        try:
            if run is None:
                log.warning("event=operator_action_unknown action=%s session_key=%s "
                            "event_id=%s", action, session_key, event.event_id)
                gateway.store.consume_events([event.event_id], "dropped")
                return
            found = run(gateway, session_key)
            gateway.store.consume_events([event.event_id], CONSUMED_REASON)
            log.info("event=operator_action action=%s session_key=%s event_id=%s found=%s",
                     action, session_key, event.event_id, "yes" if found else "no")
        except (FencedError, StoreUnavailableError) as exc:
            log.warning("event=operator_action_deferred action=%s session_key=%s "
                        "event_id=%s error=%s", action, session_key, event.event_id, exc)
        except Exception:  # noqa: BLE001 - logged; the event stays for a replay
            log.exception("event=operator_action_failed action=%s session_key=%s "
                          "event_id=%s", action, session_key, event.event_id)
        finally:
            done()

    started()
    try:
        spawn(work, f"operator-{action}")
    except BaseException:
        done()
        raise
