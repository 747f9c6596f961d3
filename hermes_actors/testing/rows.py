"""Diagnostic reads of a home for tests that check what was (or was not) stored.

``db_rows`` reads ``<home>/state.db`` through a separate read-only connection, as any other
SQLite client would, so tests need no private attribute of a store or backend, and it can
be used while the gateway runs (WAL readers never block it). ``node_values`` reads the
node's state (the clean-shutdown marker, restart counts, restart-storm boots) wherever the
home's backend keeps it: the database's ``node_state`` table, else the home's files
(degraded mode). A live store answers the same questions with ``SessionStore.rows(table)``.

Given the gateway's ``config`` naming another backend (PostgreSQL), both read through a
read-only backend of that config instead, so one scenario test checks every backend.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from hermes_actors.store.backends.files.node_files import read_home_files

__all__ = ["db_rows", "node_values"]


def _config(config: Any) -> Any:
    """A config object of ``config`` (a ``Config``, a dict of settings, or ``None``)."""
    if isinstance(config, dict):
        from hermes_actors.config import load_config

        return load_config(config, env={})
    return config


def _other_backend(config: Any) -> bool:
    return config is not None and config.store.backend != "sqlite"


def _backend_rows(home: str | os.PathLike[str], config: Any, table: str
                  ) -> list[dict[str, Any]]:
    from hermes_actors.store.factory import open_backend

    backend = open_backend(Path(home), config, read_only=True)
    try:
        return backend.rows(table)
    finally:
        backend.close()


def db_rows(home: str | os.PathLike[str], table: str, where: str = "",
            params: tuple[Any, ...] = (), *, config: Any = None) -> list[dict[str, Any]]:
    """Every row of ``table`` in ``<home>/state.db`` (optionally filtered by ``where``, an
    SQL condition with ``?`` placeholders for ``params``), in rowid order, as dicts. With a
    ``config`` (a ``Config`` or a dict of settings) of another backend: that backend's rows
    in key order (no ``where``)."""
    if not table.isidentifier():
        raise ValueError(f"not a table name: {table!r}")
    config = _config(config)
    if _other_backend(config):
        if where:
            raise ValueError("a where clause is only understood on SQLite")
        return _backend_rows(home, config, table)
    path = Path(home) / "state.db"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        sql = f'SELECT * FROM "{table}"' + (f" WHERE {where}" if where else "") + " ORDER BY rowid"
        return [dict(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


def node_values(home: str | os.PathLike[str], config: Any = None) -> dict[str, Any]:
    """The node state of the gateway of ``home`` (name -> decoded value), from
    ``state.db`` (or the backend ``config`` names) merged with whatever the home's files
    hold (files win: they are what a degraded run wrote last, and what the next start
    imports)."""
    values: dict[str, Any] = {}
    config = _config(config)
    if _other_backend(config):
        from hermes_actors.store.factory import open_backend

        backend = open_backend(Path(home), config, read_only=True)
        try:
            values.update((name, json.loads(text))
                          for name, text in backend.node_values(backend.node_id()).items())
        finally:
            backend.close()
    elif (Path(home) / "state.db").exists():
        try:
            rows = db_rows(home, "node_state")
        except sqlite3.OperationalError:  # a database from before the node state
            rows = []
        values.update((row["name"], json.loads(row["value"])) for row in rows)
    values.update((name, json.loads(text)) for name, text in read_home_files(Path(home)).items())
    return values
