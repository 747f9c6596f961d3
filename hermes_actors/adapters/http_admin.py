"""The operator routes of the HTTP adapter (§12, ``/v1/admin/...``): look at sessions, stop or
reset one as its chat's ``/stop`` and ``/new`` would, clear a suspension, delete a
conversation whole (``Gateway.delete_session``); list the failed and abandoned deliveries
and put one back for the next ledger sweep; show a cluster's nodes and leases.

On a cluster node every route answers for every session: reads come from the database, and
an action reaches the session's owner through the shared inbox (a chat command, or a
control event: ``Gateway.operator_action``; see docs/architecture.md, *Operator actions in
a cluster*).

Guarded by ``http.admin_token`` (and off, 404, without one: :class:`HttpApi` decides that);
this module only reads the gateway and the store and shapes the answers. A handler returns
``(status, JSON body)`` or raises :class:`~hermes_actors.adapters.http_requests.RequestError`.
"""

from __future__ import annotations

from typing import Any

from hermes_actors.adapters.http_requests import RequestError, parse_count, parse_query
from hermes_actors.cluster.control import control_action
from hermes_actors.cluster.report import status_report
from hermes_actors.errors import HermesActorsError, StoreError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.timeutil import isoformat

__all__ = ["ADMIN_PREFIX", "AdminRoutes"]

ADMIN_PREFIX = "/v1/admin/"
_SESSIONS = ADMIN_PREFIX + "sessions"
_DELIVERIES = ADMIN_PREFIX + "deliveries"
_CLUSTER = ADMIN_PREFIX + "cluster"
#: The ledger states ``GET /v1/admin/deliveries`` lists (both by default).
_DELIVERY_STATES = ("failed", "abandoned")
_STATES = ("running", "suspended", "resume_pending", "all")
#: ``POST /v1/admin/sessions/<key>/<action>``: the chat command each one submits.
_COMMANDS = {"cancel": "/stop", "reset": "/new"}


class AdminRoutes:
    """The operator routes of one gateway."""

    def __init__(self, gateway: Any) -> None:
        self._gw = gateway

    def handle(self, method: str, path: str, query: str) -> tuple[int, Any]:
        """Answer ``method path?query`` (``path`` starts with :data:`ADMIN_PREFIX`)."""
        if path == _SESSIONS:
            self._allow(method, "GET", path)
            return self._list_sessions(query)
        if path.startswith(_SESSIONS + "/"):
            rest = path[len(_SESSIONS) + 1:]
            key, _, action = rest.rpartition("/")
            if key and action in (*_COMMANDS, "unsuspend"):
                self._allow(method, "POST", path)
                if action == "unsuspend":
                    return self._unsuspend(key)
                return self._command(key, _COMMANDS[action])
            if method == "DELETE":
                return self._delete_session(rest)
            self._allow(method, "GET, DELETE", path)
            return self._show_session(rest)
        if path == _DELIVERIES:
            self._allow(method, "GET", path)
            return self._list_deliveries(query)
        if path == _CLUSTER:
            self._allow(method, "GET", path)
            return self._cluster()
        if path.startswith(_DELIVERIES + "/") and path.endswith("/retry"):
            self._allow(method, "POST", path)
            return self._retry(path[len(_DELIVERIES) + 1:-len("/retry")])
        raise RequestError(404, f"no such endpoint: {path}")

    @staticmethod
    def _allow(method: str, allowed: str, path: str) -> None:
        if method not in allowed.split(", "):
            raise RequestError(405, f"method {method} is not allowed on {path} "
                               f"(allowed: {allowed})", [("Allow", allowed)])

    # -- sessions ---------------------------------------------------------------------------

    def _summary(self, entry: Any, stored: _StoredQueues | None = None) -> dict[str, Any]:
        stats = self._gw.session_statistics(entry.session_key)
        if stats is not None:  # its actor is live here
            running, depth = bool(stats.running), stats.queue_depth
        else:  # not live here (idle, or served by another cluster node): as stored
            stored = stored or _StoredQueues(self._gw.store)
            running, depth = stored.state(entry)
        origin = entry.origin
        return {
            "session_key": entry.session_key,
            "session_id": entry.session_id,
            "platform": entry.platform,
            "chat_id": origin.chat_id if origin is not None else None,
            "thread_id": origin.thread_id if origin is not None else None,
            "running": running,
            "queue_depth": depth,
            "suspended": entry.suspended,
            "resume_pending": entry.resume_pending,
            "updated_at": isoformat(entry.updated_at) if entry.updated_at else None,
        }

    def _list_sessions(self, query: str) -> tuple[int, Any]:
        params = parse_query(query)
        state = params.get("state", "all")
        if state not in _STATES:
            raise RequestError(400, f"state must be one of {', '.join(_STATES)}, got {state!r}")
        limit = parse_count(params)
        entries = sorted(self._gw.list_sessions(), key=_recency, reverse=True)
        if state in ("suspended", "resume_pending"):
            entries = [e for e in entries if getattr(e, state)]
        sessions: list[dict[str, Any]] = []
        stored = _StoredQueues(self._gw.store)  # (the inbox read once, if at all)
        for entry in entries:
            if len(sessions) >= limit:
                break
            summary = self._summary(entry, stored)
            if state != "running" or summary["running"]:
                sessions.append(summary)
        return 200, {"sessions": sessions}

    def _entry(self, key: str) -> Any:
        entry = self._gw.session_entry(key) if key else None
        if entry is None:
            raise RequestError(404, f"no session with key {key!r}")
        return entry

    def _show_session(self, key: str) -> tuple[int, Any]:
        entry = self._entry(key)
        store = self._gw.store
        tail = 20
        if hasattr(store, "load_transcript_tail"):
            transcript = store.load_transcript_tail(entry.session_id, tail)
        else:  # pragma: no cover - every store has it today
            transcript = store.load_transcript(entry.session_id)[-tail:]
        inbox = [event.to_dict() for k, event in store.pending_inbox() if k == key]
        return 200, {
            **self._summary(entry),
            "transcript_tail": transcript,
            "inbox": inbox,
            "deliveries": store.ledger_rows(session_key=key),
        }

    def _command(self, key: str, text: str) -> tuple[int, Any]:
        """Submit ``text`` as if the session's chat had sent it (its origin's source): the
        session actor handles it exactly as that chat's command."""
        entry = self._entry(key)
        if entry.origin is None:
            raise RequestError(409, f"session {key!r} has no origin to send {text} from")
        event_id = self._gw.submit(MessageEvent(source=entry.origin, text=text))
        return 202, {"event_id": event_id}

    def _unsuspend(self, key: str) -> tuple[int, Any]:
        return self._session_action(key, "unsuspend", {"session_key": key, "suspended": False})

    def _session_action(self, key: str, action: str, done: dict[str, Any]) -> tuple[int, Any]:
        """Run ``action`` (``Gateway.operator_action``) on the session: ``200`` and ``done``
        when it ran here; on a cluster node that does not serve the session, ``202`` and
        the id of the control event that carries it to the shard's owner."""
        outcome = self._gw.operator_action(key, action) if key else None
        if outcome is None or not outcome.found:
            raise RequestError(404, f"no session with key {key!r}")
        if outcome.refused is not None:
            raise RequestError(409, outcome.refused)
        if outcome.event_id is not None:
            return 202, {"session_key": key, "action": action, "event_id": outcome.event_id,
                         "forwarded": True}
        return 200, done

    # -- the cluster ------------------------------------------------------------------------

    def _cluster(self) -> tuple[int, Any]:
        """The cluster's nodes, shard leases and adapter leases as the database holds them
        now (``cluster status --json``'s report), and which node answered; 404 on a gateway
        that is not a cluster node."""
        cluster = getattr(self._gw, "cluster", None)
        if cluster is None:
            raise RequestError(404, "not a cluster: this gateway runs alone "
                               "(cluster.enabled is false)")
        snapshot, where = cluster.lease_snapshot()
        return 200, {"node_id": self._gw.store.node_id, **status_report(snapshot, where)}

    def _delete_session(self, key: str) -> tuple[int, Any]:
        """Delete the conversation whole (``Gateway.delete_session``): its running turn is
        stopped first; what it still owed is deleted unanswered. On a cluster node that
        does not serve the session: ``202``, sent to its owner as a control event."""
        cluster = getattr(self._gw, "cluster", None)
        if cluster is not None and key and not cluster.serves(key):
            return self._session_action(key, "delete", {})
        entry = self._entry(key)
        try:
            removed = self._gw.delete_session(key)
        except StoreError as exc:  # nothing deleted (one transaction)
            raise RequestError(503, f"the delete failed, nothing was deleted: {exc}") from None
        except HermesActorsError as exc:  # busy, another node's, stopping
            raise RequestError(409, str(exc)) from None
        if removed is None:  # deleted meanwhile (another delete, retention)
            raise RequestError(404, f"no session with key {key!r}")
        return 200, {"session_key": key, "session_id": entry.session_id, "deleted": removed}

    # -- deliveries -------------------------------------------------------------------------

    def _list_deliveries(self, query: str) -> tuple[int, Any]:
        params = parse_query(query)
        state = params.get("state")
        if state is not None and state not in _DELIVERY_STATES:
            raise RequestError(400, f"state must be one of {', '.join(_DELIVERY_STATES)}, "
                               f"got {state!r}")
        limit = parse_count(params)
        rows = self._gw.store.ledger_rows((state,) if state else _DELIVERY_STATES)
        return 200, {"deliveries": rows[:limit]}

    def _retry(self, obligation_id: str) -> tuple[int, Any]:
        """Put a ``failed``/``abandoned`` row back to ``pending`` with its attempts reset:
        the next ledger sweep (housekeeping) sends it."""
        was = self._gw.store.ledger_reopen(obligation_id) if obligation_id else None
        if was is None:
            raise RequestError(404, f"no delivery with id {obligation_id!r}")
        if was not in _DELIVERY_STATES:
            raise RequestError(409, f"delivery {obligation_id!r} is {was}: only a failed or "
                               "abandoned one can be retried")
        return 202, {"obligation_id": obligation_id, "state": "pending", "was": was}


def _recency(entry: Any) -> float:
    when = entry.updated_at or entry.created_at
    return when.timestamp() if when else 0.0


class _StoredQueues:
    """``running`` and ``queue_depth`` of sessions whose actor is not live here, as the
    store has them: the turn marker, and the unconsumed inbox events not in the marked
    turn (a cluster node answering for a session another node serves). The inbox is read
    once, when first needed."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._pending: dict[str, list[str]] | None = None

    def state(self, entry: Any) -> tuple[bool, int]:
        if self._pending is None:
            self._pending = {}
            for key, event in self._store.pending_inbox():
                if control_action(event) is None:  # (an operator's action is no message)
                    self._pending.setdefault(key, []).append(event.event_id)
        running = entry.active_turn_token is not None
        in_turn = set(entry.active_turn_events) if running else set()
        waiting = [e for e in self._pending.get(entry.session_key, ()) if e not in in_turn]
        return running, len(waiting)
