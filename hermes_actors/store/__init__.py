"""Persistence: SessionDB (SQLite through peewee), SessionStore, mirror and degraded mode.

Layout: :mod:`.db` (the canonical SQLite database) with :mod:`.schema`, :mod:`.fts`,
:mod:`.sqlite_ops` and :mod:`.executor` (its single worker thread); :mod:`.store`,
:mod:`.core` and :mod:`.runtime_api` (the store the runtime uses); pure rules in
:mod:`.lifecycle`, :mod:`.loader`, :mod:`.ledger` and :mod:`.transcript`; files in
:mod:`.atomic`, :mod:`.mirror` and :mod:`.jsonl`; :mod:`.degraded` for life without SQLite.
"""

from __future__ import annotations

from hermes_actors.store.atomic import atomic_write_bytes, atomic_write_json
from hermes_actors.store.db import SessionDB, StoreUnavailableError
from hermes_actors.store.store import SessionStore, StoreStatistics

__all__ = [
    "SessionDB",
    "SessionStore",
    "StoreStatistics",
    "StoreUnavailableError",
    "atomic_write_bytes",
    "atomic_write_json",
]
