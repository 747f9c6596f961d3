"""What the migration runners of both backends share: the refusal of a newer schema.

Each backend keeps its own record of the version (SQLite's ``PRAGMA user_version``,
PostgreSQL's ``schema_version`` table under an advisory lock) and its own frozen steps; a
fresh database is made in the latest form (``schema_models.latest_ddl``) at once and
recorded at the latest version.
"""

from __future__ import annotations

from hermes_actors.errors import StoreError

__all__ = ["refuse_newer"]


def refuse_newer(found: int, latest: int, where: str) -> None:
    """Raise :class:`StoreError` when the database at ``where`` has a schema version newer
    than ``latest`` (this code's): it is left untouched."""
    if found > latest:
        raise StoreError(
            f"{where} has schema version {found}, newer than this hermes_actors supports "
            f"({latest}); upgrade hermes_actors")
