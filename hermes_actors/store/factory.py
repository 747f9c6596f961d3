"""``open_backend``: the store's backend, as the configuration names it (``store.backend``).

``sqlite`` (the default) is ``<home>/state.db``; ``postgres`` is the database ``store.dsn``
names, with ``store.pool_size`` read connections (it needs the ``postgres`` extra). The
files backend is not a choice: it is where the store goes when the configured backend
cannot be used (degraded mode, §5). ``open_tools`` opens the same database for the
``hermes-actors db`` commands, without creating one that does not exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_actors.errors import ConfigError, StoreUnavailableError
from hermes_actors.store.protocol import Backend, DatabaseTools

__all__ = ["DATABASE_NAME", "open_backend", "open_tools"]

#: The SQLite database file in the home.
DATABASE_NAME = "state.db"


def _postgres(home: Path, config: Any, read_only: bool) -> DatabaseTools:
    try:
        from hermes_actors.store.backends.postgres.backend import PostgresBackend
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"config key 'store.backend': 'postgres' needs the {exc.name!r} package; "
            "install hermes_actors[postgres]") from None
    cluster = getattr(config, "cluster", None)
    # A cluster node's write may not hold its fence's lease lock longer than a lease lasts
    # (a paused node would keep others from taking the shard: docs/cluster.md).
    idle = cluster.lease_ttl if cluster is not None and cluster.enabled else None
    return PostgresBackend(config.store.dsn, home, pool_size=config.store.pool_size,
                           read_only=read_only, writer_idle_timeout=idle)


def _synchronous(config: Any) -> str:
    """``store.synchronous`` (``full`` for a config object of another shape)."""
    return getattr(config.store, "synchronous", "full")


def open_backend(home: str | Path, config: Any, *, read_only: bool = False) -> Backend:
    """Open the backend ``config.store.backend`` names for ``home`` (``read_only``: change
    nothing, for inspection). Raises ``StoreUnavailableError`` when it cannot be opened
    (``StoreUnreachableError`` when a database server cannot be reached)."""
    kind = config.store.backend
    if kind == "sqlite":
        from hermes_actors.store.backends.sqlite.db import SessionDB

        return SessionDB(Path(home) / DATABASE_NAME, read_only=read_only,
                         synchronous=_synchronous(config))
    if kind == "postgres":
        return _postgres(Path(home), config, read_only)
    raise ConfigError(f"config key 'store.backend': unknown backend {kind!r}")


def open_tools(home: str | Path, config: Any, *, read_only: bool) -> DatabaseTools:
    """The configured database of ``home`` for the ``db`` commands: an existing SQLite file
    (``StoreUnavailableError`` when there is none; writes, if any, from a thread: no writer
    process for one repair), or the PostgreSQL database."""
    kind = config.store.backend
    if kind == "sqlite":
        from hermes_actors.store.backends.sqlite.db import SessionDB

        path = Path(home) / DATABASE_NAME
        if not path.is_file():
            raise StoreUnavailableError(f"no database at {path}")
        return SessionDB(path, read_only=read_only, writer=None if read_only else "thread",
                         synchronous=_synchronous(config))
    if kind == "postgres":
        return _postgres(Path(home), config, read_only)
    raise ConfigError(f"config key 'store.backend': unknown backend {kind!r}")
