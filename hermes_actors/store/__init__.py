"""Persistence: SessionDB (SQLite through peewee), SessionStore, mirror and degraded mode.

Layout: :mod:`.db` (the canonical SQLite database) with :mod:`.schema`, :mod:`.fts`,
:mod:`.sqlite_ops` and :mod:`.executor` (its single worker thread); :mod:`.store`,
:mod:`.core` and :mod:`.runtime_api` (the store the runtime uses); pure rules in
:mod:`.lifecycle`, :mod:`.loader`, :mod:`.ledger` and :mod:`.transcript`; files in
:mod:`.atomic`, :mod:`.mirror` and :mod:`.jsonl`; :mod:`.degraded` for life without SQLite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_actors._lazy import lazy_exports

# Imported when first used: the writer process (``writer_process``) needs only the database
# layer, and its start-up time counts in every start of the gateway.
_EXPORTS = {
    "SessionDB": "hermes_actors.store.backends.sqlite.db",
    "SessionStore": "hermes_actors.store.store",
    "StoreStatistics": "hermes_actors.store.store",
    "StoreUnavailableError": "hermes_actors.errors",
    "atomic_write_bytes": "hermes_actors.store.backends.files.atomic",
    "atomic_write_json": "hermes_actors.store.backends.files.atomic",
}

__all__ = [
    "SessionDB",
    "SessionStore",
    "StoreStatistics",
    "StoreUnavailableError",
    "atomic_write_bytes",
    "atomic_write_json",
]

if TYPE_CHECKING:
    from hermes_actors.errors import StoreUnavailableError
    from hermes_actors.store.backends.files.atomic import atomic_write_bytes, atomic_write_json
    from hermes_actors.store.backends.sqlite.db import SessionDB
    from hermes_actors.store.store import SessionStore, StoreStatistics


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
