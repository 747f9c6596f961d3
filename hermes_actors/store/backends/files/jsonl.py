"""Transcripts as ``<sessions_dir>/<session_id>.jsonl`` files: the degraded-mode fallback (§5).

One JSON object per line, appended and fsync'ed per write, so a crash loses at most a torn
last line, which the reader skips. Besides the §17.13 message fields a line may carry
``turn_token`` and ``is_reply`` (crash recovery looks up a turn's reply); readers strip them.
Session ids are validated before they become file names.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hermes_actors._green import off_the_hub
from hermes_actors.model.entry import validate_session_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.store.transcript import public_message

__all__ = ["JsonlTranscripts", "SUFFIX", "append_lines", "read_lines"]

log = logging.getLogger(__name__)

#: File suffix of a degraded-mode transcript.
SUFFIX = ".jsonl"


class JsonlTranscripts:
    """Append-only transcript files in one directory (thread-safe)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        #: The directory holding ``<session_id>.jsonl`` files.
        self.directory = Path(directory)
        self._lock = threading.Lock()

    def path(self, session_id: str) -> Path:
        """The file of ``session_id`` (``ValueError`` for an id that could escape the dir)."""
        return self.directory / f"{validate_session_id(session_id)}{SUFFIX}"

    def append(self, session_id: str, records: list[dict[str, Any]]) -> None:
        """Append ``records`` durably (one line each); ``OSError`` when the disk refuses."""
        data = "".join(to_json(r) + "\n" for r in records).encode()
        with self._lock:  # taken here: a gevent lock belongs to the hub's thread
            append_lines(self.path(session_id), data)

    def records(self, session_id: str) -> list[dict[str, Any]]:
        """Every readable line of ``session_id``'s file, as stored (torn lines skipped)."""
        return [record for record in read_lines(self.path(session_id))
                if "role" in record and "content" in record]

    def load(self, session_id: str, before_turn: str | None = None) -> list[dict[str, Any]]:
        """The transcript of ``session_id`` in order (§17.13 shape); with ``before_turn``
        only the messages written before that turn's first one."""
        out = []
        for record in self.records(session_id):
            if before_turn is not None and record.get("turn_token") == before_turn:
                break
            out.append(_public(record))
        return out

    def tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of ``session_id`` in order (§17.13 shape)."""
        if limit <= 0:
            return []
        return [_public(record) for record in self.records(session_id)[-limit:]]

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The last final reply recorded for turn ``token``, or ``None``."""
        for record in reversed(self.records(session_id)):
            if record.get("turn_token") == token and record.get("is_reply"):
                return _public(record)
        return None

    def remove(self, session_id: str) -> int:
        """Delete ``session_id``'s file (and an imported copy of it); how many messages it
        held (0 without a file). ``OSError`` when the disk refuses."""
        path = self.path(session_id)
        with self._lock:
            count = len([r for r in read_lines(path) if "role" in r and "content" in r])
            for victim in (path, path.with_name(path.name + ".imported")):
                try:
                    victim.unlink()
                except FileNotFoundError:
                    pass
        return count

    def discard(self, session_ids: Iterable[str]) -> None:
        """Remove these sessions' files, best effort (what a delete leaves behind): one the
        disk refuses, or an id no file could have, is logged and passed over."""
        for session_id in session_ids:
            try:
                self.remove(session_id)
            except (OSError, ValueError) as exc:
                log.warning("cannot remove the transcript file of %s: %s", session_id, exc)

    def session_ids(self) -> list[str]:
        """Ids of every transcript file present, sorted."""
        try:
            names = sorted(p.name for p in self.directory.glob(f"*{SUFFIX}") if p.is_file())
        except OSError:
            return []
        return [name[: -len(SUFFIX)] for name in names]

    def count_messages(self) -> int:
        """Messages across all transcript files (``hermes-actors db check`` in degraded mode)."""
        return sum(len(self.records(sid)) for sid in self.session_ids())


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return public_message(
        record["role"],
        record["content"],
        record.get("tool_name"),
        record.get("tool_calls"),
        record.get("timestamp") or 0.0,
        record.get("token_count"),
    )


def append_lines(path: Path, data: bytes) -> None:
    """Append ``data`` (whole lines) to ``path`` and fsync it, off the gevent hub; a last
    line a crash tore is ended first, so the new lines are not glued to it. The caller
    serialises appends to one file."""
    off_the_hub(_append, path, data)  # fsync never stalls gevent


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        if handle.tell() and _ends_torn(handle):
            data = b"\n" + data
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``'s lines, in order (none for a missing file); a line that
    is not one (a torn last line) is skipped with a warning."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            log.warning("skipping unreadable line %d of %s", number, path)
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _ends_torn(handle: Any) -> bool:
    """Whether the file open in ``handle`` (positioned at its end) lacks a final newline."""
    end = handle.tell()
    handle.seek(end - 1)
    last = handle.read(1)
    handle.seek(end)
    return last != b"\n"
