"""``db_rows``: what a gateway's ``state.db`` holds, read through a separate read-only
connection, for tests that check that something was (or was not) stored.

It reads the file as any other SQLite client would, so tests need no private attribute of a
store or backend, and it can be used while the gateway runs (WAL readers never block it).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

__all__ = ["db_rows"]


def db_rows(home: str | os.PathLike[str], table: str, where: str = "",
            params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Every row of ``table`` in ``<home>/state.db`` (optionally filtered by ``where``, an
    SQL condition with ``?`` placeholders for ``params``), in rowid order, as dicts."""
    if not table.isidentifier():
        raise ValueError(f"not a table name: {table!r}")
    path = Path(home) / "state.db"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        sql = f'SELECT * FROM "{table}"' + (f" WHERE {where}" if where else "") + " ORDER BY rowid"
        return [dict(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()
