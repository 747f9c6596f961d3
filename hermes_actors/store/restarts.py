"""The stuck-loop counts as a JSON value (§5 ``restart_counts.json``): read and merged.

A store of one node keeps its counts as one value of the node's state, ``{session_key:
consecutive restarts}``; :class:`~hermes_actors.store.ops.SetSessionRestarts` changes some
sessions' counts in it. SQLite and the files backend apply that op with these functions, so
the value they write is the one :class:`~hermes_actors.store.node.NodeRecords` reads (and
writes itself on a single gateway): the format of §5 does not change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from hermes_actors.model.jsontext import to_json

__all__ = ["merged_restart_counts", "parse_restart_counts"]


def parse_restart_counts(text: str | None) -> dict[str, int]:
    """The positive counts of a ``restart_counts`` value (anything unreadable: none)."""
    if not text:
        return {}
    try:
        counts = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(counts, dict):
        return {}
    return {str(k): v for k, v in counts.items()
            if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def merged_restart_counts(text: str | None, changes: Iterable[tuple[str, int]]) -> str:
    """The value ``text`` with ``changes`` applied (a count of 0 or less removes the key)."""
    counts = parse_restart_counts(text)
    for key, count in changes:
        if count > 0:
            counts[str(key)] = int(count)
        else:
            counts.pop(str(key), None)
    return to_json(dict(sorted(counts.items())))
