"""``NodeRecords``: what a gateway node remembers about itself across restarts (§7).

A node is the gateway of one home; its id is stable (kept by the backend), and every start
draws a new boot id: together they name the sender of a delivery. Its state is three named
values (:data:`~hermes_actors.store.protocol.NODE_VALUES`): the clean-shutdown marker,
the stuck-loop restart counts, and the boots of the restart-storm guard. They are written
through the backend like every other change, so a database keeps them in its
``node_state`` table and the files backend in the home's files (the formats of §5 and
§17.24).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from hermes_actors.model.ids import new_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.store.core import StoreCore
from hermes_actors.store.ops import NodeValue, SetSessionRestarts

__all__ = ["NodeRecords"]

log = logging.getLogger("hermes_actors.store")


class NodeRecords:
    """The node methods of the store (its facade delegates here)."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        #: The node's id (stable per home).
        self.node_id = core.node_id
        #: This start's id: a sender is ``(node_id, boot_id)``.
        self.boot_id = new_id()

    def _value(self, name: str, default: Any) -> Any:
        raw = self._core.read(lambda backend: backend.node_values(self.node_id)).get(name)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except ValueError:
            log.warning("unreadable node state %r: starting from empty", name)
            return default

    def _put(self, name: str, value: Any) -> None:
        self._core.apply([NodeValue(self.node_id, name,
                                    None if value is None else to_json(value))])

    def clean_shutdown(self) -> bool:
        """Whether the last run of this node ended with a graceful stop."""
        return self._value("clean_shutdown", None) is not None

    def mark_clean_shutdown(self, info: dict[str, Any]) -> None:
        """The last act of a graceful stop (``info``: who stopped, when)."""
        self._put("clean_shutdown", info)

    def clear_clean_shutdown(self) -> None:
        """Forget the marker (once the start it allowed has discarded the turn markers)."""
        self._put("clean_shutdown", None)

    def restart_counts(self) -> dict[str, int]:
        """``session_key -> consecutive restarts it was mid-turn across`` (positive only)."""
        counts = self._value("restart_counts", {})
        if not isinstance(counts, dict):
            return {}
        return {str(k): v for k, v in counts.items()
                if isinstance(v, int) and not isinstance(v, bool) and v > 0}

    def write_restart_counts(self, counts: dict[str, int]) -> None:
        """Replace the restart counts."""
        self._put("restart_counts", dict(counts))

    def session_restarts(self) -> dict[str, int]:
        """The per-session stuck-loop counts shared by the store's nodes (a cluster's
        database; one node's own counts on a store of one node)."""
        counts = self._core.read(lambda backend: backend.session_restarts(self.node_id))
        return {str(k): int(v) for k, v in counts.items() if int(v) > 0}

    def session_restarts_op(self, counts: Iterable[tuple[str, int]]) -> SetSessionRestarts:
        """The op that sets some sessions' shared counts (0 removes one)."""
        return SetSessionRestarts(self.node_id, tuple((str(k), int(n)) for k, n in counts),
                                  self._core.ts())

    def write_session_restarts(self, counts: Iterable[tuple[str, int]]) -> None:
        """Set some sessions' shared counts now (nothing to write: no transaction)."""
        op = self.session_restarts_op(counts)
        if op.counts:
            self._core.apply([op])

    def restart_boots(self) -> list[float]:
        """Epoch times of recent boots that had sessions to resume (the storm guard)."""
        data = self._value("restart_storm", {})
        boots = data.get("boots", []) if isinstance(data, dict) else []
        return [float(b) for b in boots
                if isinstance(b, (int, float)) and not isinstance(b, bool)]

    def write_restart_boots(self, boots: list[float]) -> None:
        """Replace the storm guard's boots."""
        self._put("restart_storm", {"boots": list(boots)})
