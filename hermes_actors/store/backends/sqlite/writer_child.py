"""The database writer process's own side: ``python -m hermes_actors.store.backends.sqlite.writer_child``.

The parent (:class:`~hermes_actors.store.backends.sqlite.writer_process.WriterProcess`)
starts this module with the database path, its pid and the op table's fingerprint. It reads
request frames from stdin, applies each frame's op lists as one group commit on its own
``SessionDB`` (``writer="inline"``: this one thread owns the connection) and answers every
frame on the original stdout, with a :class:`Checkpointer` thread copying the log back into
the database. It dies with its parent. Kept apart from the parent's side so that the
database module, which starts the writer, never imports the module that imports it back.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from typing import Any

from hermes_actors.errors import ConfigError, StoreError, StoreUnavailableError
from hermes_actors.store.backends.sqlite.checkpointer import Checkpointer
from hermes_actors.store.backends.sqlite.db import SessionDB
from hermes_actors.store.backends.sqlite.writer_process import (
    HEADER,
    OPS_FINGERPRINT,
    PRAGMA_TAG,
    decode_ops,
    encode_frame,
)

__all__ = ["AFTER_COMMIT", "serve"]

_PR_SET_PDEATHSIG = 1
#: The crash point of the child (``HERMES_ACTORS_CRASHPOINT``, the variable of
#: ``hermes_actors.runtime.crash``, which this process does not import): it exits at once
#: after a frame's COMMIT, before its answer, so the parent never learns the outcome and
#: fails the frame's op lists over (they are then applied again: once, by their ListId).
AFTER_COMMIT = "db_writer_after_commit"
_CRASH_ARMED = os.environ.get("HERMES_ACTORS_CRASHPOINT") == AFTER_COMMIT


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)


def _read_blocking(fd: int, n: int) -> bytes:
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _write_blocking(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _answer(outcomes: list[tuple[bool, Any]]) -> bytes:
    """The answer frame; an error is sent as :class:`StoreError` text unless it pickles and
    unpickles as itself."""
    safe = []
    for ok, value in outcomes:
        if not ok:
            try:
                pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception:  # noqa: BLE001 - it travels as text instead
                value = StoreError(f"{type(value).__name__}: {value}")
        safe.append((ok, value))
    return encode_frame(safe)


def _apply_frame(db: Any, blobs: list[bytes]) -> list[tuple[bool, Any]]:
    """Apply the readable op lists as one group; an unreadable list fails alone."""
    lists: list[Any] = []
    outcomes: list[tuple[bool, Any] | None] = []
    pragmas: list[tuple[int, str]] = []
    for blob in blobs:
        if blob[:1] == PRAGMA_TAG:  # a diagnostic, answered after the group commit
            pragmas.append((len(outcomes), blob[1:].decode()))
            outcomes.append((False, None))
            continue
        try:
            lists.append(decode_ops(blob))
            outcomes.append(None)
        except Exception as exc:  # noqa: BLE001 - e.g. a class only the parent can import
            outcomes.append((False, StoreError(f"the database writer cannot read a write: "
                                               f"{type(exc).__name__}: {exc}")))
    try:
        applied = iter(db.apply_lists(lists) if lists else [])
    except Exception as exc:  # noqa: BLE001 - a failure of the group fails its lists
        applied = iter([(False, exc)] * len(lists))
    answers = [next(applied) if outcome is None else outcome for outcome in outcomes]
    for index, name in pragmas:
        try:
            answers[index] = (True, db.writer_pragma(name))
        except Exception as exc:  # noqa: BLE001 - raised in the asking caller
            answers[index] = (False, exc)
    return answers


def serve(path: str, parent_pid: int, fingerprint: str = OPS_FINGERPRINT,
          synchronous: str = "full") -> int:
    """The child's main loop: answer frames until end-of-file (opening the database at the
    first one)."""
    _die_with_parent(parent_pid)
    if fingerprint != OPS_FINGERPRINT:  # the parent encodes ops another way: never guess
        sys.stderr.write("hermes_actors: the database writer process runs other code than "
                         "the gateway (op table mismatch); restart the gateway\n")
        return 2
    for signum in (signal.SIGINT, signal.SIGTERM):  # stopping is the parent's decision: it
        signal.signal(signum, signal.SIG_IGN)  # closes the pipe (or dies: PDEATHSIG)
    answers = os.dup(1)
    os.dup2(2, 1)  # anything printed by accident goes to stderr, not into the protocol
    db = checkpointer = None
    try:
        while True:
            try:
                (size,) = HEADER.unpack(_read_blocking(0, HEADER.size))
                blobs = pickle.loads(_read_blocking(0, size))
            except EOFError:
                return 0
            if db is None:
                try:
                    # this thread owns the connection
                    db = SessionDB(path, writer="inline", synchronous=synchronous)
                except (StoreError, ConfigError) as exc:
                    error = StoreUnavailableError(f"the database writer cannot open it: {exc}")
                    _write_blocking(answers, _answer([(False, error)] * len(blobs)))
                    return 1
                checkpointer = Checkpointer(path)  # commits never copy the log back
            outcomes = _apply_frame(db, blobs)
            if _CRASH_ARMED and any(ok for ok, _ in outcomes):
                sys.stderr.write(f"hermes_actors: crash point {AFTER_COMMIT} reached, exiting\n")
                sys.stderr.flush()
                os._exit(137)
            _write_blocking(answers, _answer(outcomes))
    finally:
        if checkpointer is not None:
            checkpointer.close()
        if db is not None:
            db.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], int(sys.argv[2]), *sys.argv[3:5]))
