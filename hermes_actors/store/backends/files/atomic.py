"""Crash-safe replacement of small state files (``sessions.json``, ``restart_counts.json``...).

A reader must see either the old file or the new one, never a torn mix, even after a power
cut. So the new content goes to a temporary file in the *same directory* (``os.replace`` is
only atomic within one filesystem), is flushed and fsync'ed, renamed over the target, and
the directory is fsync'ed so the rename itself is durable. A failure removes the temporary
file and re-raises: the old file is untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "TEMP_SUFFIX"]

#: Suffix of the temporary files; a crash can leave one behind, never a half-written target.
TEMP_SUFFIX = ".tmp"

#: Permissions of a new file (state files may name people, so not world-readable).
DEFAULT_MODE = 0o600


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes | Iterable[bytes]) -> None:
    """Replace ``path`` with ``data`` (bytes, or chunks written as they are produced)
    atomically and durably.

    An existing file keeps its permissions; a new one gets ``0o600``. Raises ``OSError``
    (e.g. ``ENOSPC``) with the target left as it was.
    """
    target = Path(path)
    directory = target.parent
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = DEFAULT_MODE
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            if isinstance(data, bytes):
                handle.write(data)
            else:
                for chunk in data:
                    handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(directory)


def atomic_write_json(path: str | os.PathLike[str], data: Any, *, indent: int | None = 2) -> None:
    """Serialise ``data`` as UTF-8 JSON and write it with :func:`atomic_write_bytes`.

    Serialisation happens before any file is touched, so unserialisable data raises
    ``TypeError`` without leaving anything behind.
    """
    text = json.dumps(data, ensure_ascii=False, indent=indent)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))
