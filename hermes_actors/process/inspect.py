"""The read-only views of a home and the index rebuild: ``hermes-actors sessions list|show``,
``db check`` and ``db rebuild-fts`` (§12, §17.16, §17.48).

They never need a running gateway and never change a home they only read: the database is
opened read-only, and without a usable one they read ``sessions.json`` and the JSONL
transcripts. The database is the one the home's configuration names (``<home>/config.yaml``
and the ``HERMES_STORE_*`` variables: ``state.db``, or a PostgreSQL database), reached
through the backend's :class:`~hermes_actors.store.protocol.DatabaseTools`; a database server
that cannot be reached is an error (exit 2), not a degraded home. Store modules are imported
inside the functions, so loading the command line stays cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hermes_actors.errors import (
    CommandFailed,
    StoreError,
    StoreUnavailableError,
    StoreUnreachableError,
    UsageError,
)
from hermes_actors.process.home import CONFIG_NAME, existing_home, home_config

__all__ = ["cmd_db_check", "cmd_db_rebuild_fts", "cmd_sessions_list", "cmd_sessions_show"]


def _open_db_read_only(home: Path) -> Any:
    """The home's database, read-only; ``None`` when it cannot be used (degraded)."""
    from hermes_actors.store.factory import open_tools

    try:
        return open_tools(home, home_config(home), read_only=True)
    except StoreUnreachableError:
        raise
    except StoreError:
        return None


def _load_entries(home: Path, db: Any) -> dict[str, Any]:
    from hermes_actors.store.backends.files.mirror import MIRROR_NAME, read_mirror
    from hermes_actors.store.loader import merge_entries

    mirror = read_mirror(home / "sessions" / MIRROR_NAME, now=0.0, keep_corrupt_copy=False)
    rows = []
    if db is not None:
        try:
            rows = db.routing_rows()
        except StoreError as exc:
            print(f"warning: {exc}; listing sessions.json only", file=sys.stderr)
    result = merge_entries(rows, mirror.entries, mirror_wins=mirror.degraded_since is not None,
                           winners=mirror.changed)
    for key, reason in result.skipped:
        print(f"warning: skipping session entry {key!r}: {reason}", file=sys.stderr)
    return result.entries


def _transcript(home: Path, db: Any, session_id: str) -> list[dict[str, Any]]:
    from hermes_actors.store.backends.files.jsonl import JsonlTranscripts

    messages = db.load_messages(session_id) if db is not None else []
    return messages + JsonlTranscripts(home / "sessions").load(session_id)


# -- db ----------------------------------------------------------------------------------------


def _store_settings_given(home: Path) -> bool:
    """Whether the store is named anywhere: a ``store`` section in ``<home>/config.yaml``, or a
    ``HERMES_STORE_*`` variable."""
    import os

    import yaml

    if any(name.startswith("HERMES_STORE_") for name in os.environ):
        return True
    try:
        loaded = yaml.safe_load((home / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return (home / CONFIG_NAME).exists()
    return isinstance(loaded, dict) and "store" in loaded


def _refuse_a_home_without_store_settings(home: Path, config: Any) -> None:
    """A PostgreSQL gateway's home (its ``node_id``, no ``state.db``) read without its store
    settings would be reported degraded: say instead that no store settings were found."""
    from hermes_actors.store.factory import DATABASE_NAME

    if (config.store.backend == "sqlite" and not (home / DATABASE_NAME).exists()
            and (home / "node_id").is_file() and not _store_settings_given(home)):
        raise UsageError(
            f"no store settings were found for {str(home)!r}: it has no {DATABASE_NAME} but a "
            f"node_id (a PostgreSQL gateway's home); give store.backend: postgres and "
            f"store.dsn in {home / CONFIG_NAME}, or HERMES_STORE_BACKEND and HERMES_STORE_DSN")


def cmd_db_check(args: argparse.Namespace) -> int:
    """Print ``mode``/``integrity``/``fts``/``sessions``/``messages``; 0 only when all ok.

    Strictly read-only: the database is opened read-only (SQLite ``mode=ro``, PostgreSQL
    read-only sessions) and nothing is created or repaired. Without a usable ``state.db``
    the home is reported as ``degraded`` and the counts come from ``sessions.json`` and the
    JSONL transcripts. ``mode`` is the backend's kind (``sqlite``, ``postgres``).
    """
    from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
    from hermes_actors.store.backends.files.mirror import MIRROR_NAME, read_mirror

    home = existing_home(args)
    _refuse_a_home_without_store_settings(home, home_config(home))
    db = _open_db_read_only(home)
    if db is not None:
        try:
            integrity, fts_state = db.integrity_check(), db.check_fts()
            counts = db.counts()
        finally:
            db.close()
        report = {
            "mode": db.kind,
            "integrity": integrity,
            "fts": fts_state,
            "sessions": counts["sessions"],
            "messages": counts["messages"],
        }
    else:
        mirror = read_mirror(home / "sessions" / MIRROR_NAME, now=0.0, keep_corrupt_copy=False)
        report = {
            "mode": "degraded",
            "integrity": "n/a",
            "fts": "n/a",
            "sessions": len(mirror.entries),
            "messages": JsonlTranscripts(home / "sessions").count_messages(),
        }
    for key, value in report.items():
        print(f"{key}: {value}")
    healthy = (report["mode"] != "degraded" and report["integrity"] == "ok"
               and report["fts"] == "ok")
    return 0 if healthy else 1


def cmd_db_rebuild_fts(args: argparse.Namespace) -> int:
    """Rebuild the full-text index from the messages (no message is changed)."""
    from hermes_actors.store.factory import open_tools

    home = existing_home(args)
    try:
        db = open_tools(home, home_config(home), read_only=False)
    except StoreUnreachableError:
        raise
    except StoreUnavailableError as exc:
        raise CommandFailed(str(exc)) from None
    try:
        db.rebuild_fts()
        state, counts = db.check_fts(), db.counts()
    finally:
        db.close()
    print(f"fts: {state}")
    print(f"messages: {counts['messages']}")
    return 0 if state == "ok" else 1


# -- sessions ----------------------------------------------------------------------------------


def _flags(entry: Any) -> str:
    flags = []
    if entry.suspended:
        flags.append("suspended")
    if entry.resume_pending:
        flags.append(f"resume_pending({entry.resume_reason or '?'})")
    if entry.has_active_turn:
        flags.append("active_turn")
    if entry.is_fresh_reset:
        flags.append("fresh_reset")
    if entry.was_auto_reset:
        flags.append(f"auto_reset({entry.auto_reset_reason or '?'})")
    return ",".join(flags) or "-"


def cmd_sessions_list(args: argparse.Namespace) -> int:
    """One line per session: key, session id, last activity, flags (most recent first)."""
    from hermes_actors.model.timeutil import isoformat

    home = existing_home(args)
    db = _open_db_read_only(home)
    try:
        entries = _load_entries(home, db)
    finally:
        if db is not None:
            db.close()

    def recency(entry: Any) -> float:
        when = entry.updated_at or entry.created_at
        return when.timestamp() if when else 0.0

    for entry in sorted(entries.values(), key=lambda e: (-recency(e), e.session_key)):
        updated = isoformat(entry.updated_at) or "-"
        print(f"{entry.session_key}  {entry.session_id}  {updated}  {_flags(entry)}")
    return 0


def cmd_sessions_show(args: argparse.Namespace) -> int:
    """The entry of one key as JSON, then the last ``--tail`` transcript messages."""
    from hermes_actors.model.timeutil import from_epoch, isoformat

    home = existing_home(args)
    db = _open_db_read_only(home)
    try:
        entry = _load_entries(home, db).get(args.key)
        if entry is None:
            raise CommandFailed(f"no session with key {args.key!r}")
        messages = _transcript(home, db, entry.session_id)
    finally:
        if db is not None:
            db.close()
    print(json.dumps(entry.to_dict(), ensure_ascii=False, indent=2))
    tail = messages[-args.tail :] if args.tail > 0 else []
    print(f"\ntranscript ({len(tail)} of {len(messages)} messages):")
    for message in tail:
        when = isoformat(from_epoch(message["timestamp"]))
        tool = f" ({message['tool_name']})" if message.get("tool_name") else ""
        print(f"{when} {message['role']}{tool}: {message['content']}")
    return 0
