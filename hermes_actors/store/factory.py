"""``open_backend``: the store's backend, as the configuration names it (``store.backend``).

``sqlite`` (the default) is ``<home>/state.db``. The files backend is not a choice: it is
where the store goes when the configured backend cannot be used (degraded mode, §5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_actors.errors import ConfigError
from hermes_actors.store.protocol import Backend

__all__ = ["DATABASE_NAME", "open_backend"]

#: The SQLite database file in the home.
DATABASE_NAME = "state.db"


def open_backend(home: str | Path, config: Any, *, read_only: bool = False) -> Backend:
    """Open the backend ``config.store.backend`` names for ``home`` (``read_only``: change
    nothing, for inspection). Raises ``StoreUnavailableError`` when it cannot be opened."""
    kind = config.store.backend
    if kind == "sqlite":
        from hermes_actors.store.backends.sqlite.db import SessionDB

        return SessionDB(Path(home) / DATABASE_NAME, read_only=read_only)
    raise ConfigError(f"config key 'store.backend': unknown backend {kind!r}")
