"""The session store: a backend-neutral domain over persistence backends (§5–§8).

The domain: :mod:`.store` (the ``SessionStore`` facade) composed of :mod:`.core` (backend,
entries in memory, locks, commits, fail-over) and its parts :mod:`.sessions`, :mod:`.turns`,
:mod:`.inbox`, :mod:`.deliveries`, :mod:`.outbox` and :mod:`.node`; pure rules in
:mod:`.lifecycle`, :mod:`.recovery`, :mod:`.ledger`, :mod:`.loader`, :mod:`.routing` and
:mod:`.transcript`; the write records in :mod:`.ops` and the written-down :mod:`.protocol`
every backend implements, chosen by :mod:`.factory`. The backends: :mod:`.backends.sqlite`
(``SessionDB``, the embedded default) and :mod:`.backends.files` (degraded mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_actors._lazy import lazy_exports

# Imported when first used: the writer process (``writer_process``) needs only the database
# layer, and its start-up time counts in every start of the gateway.
_EXPORTS = {
    "Backend": "hermes_actors.store.protocol",
    "FilesBackend": "hermes_actors.store.backends.files.backend",
    "SessionDB": "hermes_actors.store.backends.sqlite.db",
    "SessionStore": "hermes_actors.store.store",
    "StoreStatistics": "hermes_actors.store.store",
    "StoreUnavailableError": "hermes_actors.errors",
    "open_backend": "hermes_actors.store.factory",
    "atomic_write_bytes": "hermes_actors.store.backends.files.atomic",
    "atomic_write_json": "hermes_actors.store.backends.files.atomic",
}

__all__ = [
    "Backend",
    "FilesBackend",
    "SessionDB",
    "SessionStore",
    "StoreStatistics",
    "StoreUnavailableError",
    "atomic_write_bytes",
    "atomic_write_json",
    "open_backend",
]

if TYPE_CHECKING:
    from hermes_actors.errors import StoreUnavailableError
    from hermes_actors.store.backends.files.atomic import atomic_write_bytes, atomic_write_json
    from hermes_actors.store.backends.files.backend import FilesBackend
    from hermes_actors.store.backends.sqlite.db import SessionDB
    from hermes_actors.store.factory import open_backend
    from hermes_actors.store.protocol import Backend
    from hermes_actors.store.store import SessionStore, StoreStatistics


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
