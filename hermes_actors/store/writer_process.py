"""``WriterProcess``: under gevent, a child process commits the database's writes.

Why a process: the hub and an in-process database thread share one GIL. The worker drops
the GIL around every ``sqlite3_step`` and has to win it back after each of the ~12
statements a turn writes; while the hub runs greenlets that takes up to a switch interval,
so the worker only made progress while the hub sat idle waiting for it. Measured at 10,000
sessions: hub 275 µs and worker 155 µs a turn, strictly one after the other (2,200 turns/s).
A child process has its own GIL: it applies the same op lists with the same group commit
(:meth:`SessionDB.apply_lists`) while the hub goes on, and the hub only pickles op lists
into a pipe and reads answers through its event loop (2,900 turns/s on the same run).
Shorter switch intervals, and a worker thread that forwarded batches to the child, were
measured and lost (the forwarding thread met the same GIL hand-offs).

Protocol: a frame is a 4-byte little-endian length and a pickle. The child answers each
request frame (at most ``MAX_GROUP`` op lists, applied as one group commit) with one frame of
``(ok, value)`` pairs in the same order. It is spawned before the parent opens (and migrates)
the database, so its interpreter starts while the parent works, and it opens the database
at the first request, which comes only after the parent's open.

Order: at most one frame is in flight; op lists submitted meanwhile wait in the next one,
so they are grouped while the child works, and a caller returns only after its frame's
answer (after the COMMIT). Reads run on the parent's own connection and first wait for every
write submitted before them (:meth:`WriterProcess.barrier`): the database keeps one history.

Lifetime: the child dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and end-of-file on
its request pipe) and inherits the ``flock`` the parent holds on ``<database>-writer.lock``;
a restarted parent waits on that lock until the old child is gone, so a commit of a dead
process's child can never land behind the new process's recovery. When the child dies,
every waiting and later write fails with ``StoreUnavailableError``: the store then switches
to degraded mode as for any unusable database.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pickle
import signal
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_actors.errors import StoreError
from hermes_actors.store.executor import MAX_GROUP

__all__ = ["LOCK_SUFFIX", "WriterProcess", "writer_lock"]

log = logging.getLogger("hermes_actors.store")

#: The writer lock beside the database: ``<database>`` + this suffix.
LOCK_SUFFIX = "-writer.lock"

_HEADER = struct.Struct("<I")
_LOCK_FD = 3  # where the child holds the inherited writer lock
_PR_SET_PDEATHSIG = 1
_PIPE_SIZE = 1 << 20
_REAP_WAIT = 5.0  # seconds a child whose pipe closed gets to finish exiting
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def writer_lock(path: Path, wait_s: float, sleep: Callable[[float], None]) -> int:
    """Open and ``flock`` ``<path>-writer.lock``; return its descriptor.

    Waits up to ``wait_s`` for a holder (an old writer child finishing) to go, then raises
    ``StoreUnavailableError``.
    """
    from hermes_actors.store.db import StoreUnavailableError

    lock_path = Path(str(path) + LOCK_SUFFIX)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreUnavailableError(f"cannot open the writer lock {lock_path}: {exc}") from None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise StoreUnavailableError(
                    f"{path} is being written by another process (it holds {lock_path})"
                ) from None
            sleep(0.02)


class _Frame:
    """Op lists sent (or to be sent) together, and what became of them."""

    __slots__ = ("lists", "callbacks", "outcomes", "done")

    def __init__(self, done: Any) -> None:
        self.lists: list[list[Any]] = []
        self.callbacks: list[Callable[[bool, Any], None] | None] = []
        self.outcomes: list[tuple[bool, Any]] = []
        self.done = done

    def finish(self, outcomes: list[tuple[bool, Any]]) -> None:
        """Record the answers, wake the waiters, run the callbacks (in the hub)."""
        self.outcomes = outcomes
        self.done.set()
        for callback, (ok, value) in zip(self.callbacks, outcomes, strict=True):
            if callback is not None:
                try:
                    callback(ok, value)
                except Exception:  # noqa: BLE001 - a broken callback must not stop the others
                    log.exception("a database write's completion callback failed")


class WriterProcess:
    """The parent's end: spawns the child, sends op lists, completes them in the hub.

    Create it in the hub's thread; :meth:`apply` and :meth:`post` may be called from
    greenlets of that hub or from other native threads.
    """

    def __init__(self, path: Path, lock_fd: int) -> None:
        import gevent
        import gevent.event
        import gevent.os
        from gevent.monkey import get_original

        self._event = gevent.event.Event
        self._hub = gevent.get_hub()
        self._native_ident = get_original("_thread", "get_ident")
        self._native_lock = get_original("_thread", "allocate_lock")
        self._hub_thread = self._native_ident()
        self._nb_read, self._nb_write = gevent.os.nb_read, gevent.os.nb_write
        self._waitpid = get_original("os", "waitpid")
        # gevent's os.close defers closing a pipe to a later loop turn; end-of-file must
        # reach the child now, and no watcher is left on these descriptors when they close.
        self._close_fd = get_original("os", "close")
        self._pending: deque[_Frame] = deque()
        self._inflight: _Frame | None = None
        self._error: str | None = None
        self._closed = False
        #: Frames answered, op lists answered, the most lists in one frame.
        self.frames = self.lists = self.largest = 0
        self.pid = self._spawn(path, lock_fd)
        self._reader = gevent.spawn(self._read_loop)

    def _spawn(self, path: Path, lock_fd: int) -> int:
        from gevent.monkey import get_original

        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        for fd in (self._req_w, self._rep_r):
            with contextlib.suppress(OSError):  # a bigger pipe is only an optimisation
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        dup2 = os.POSIX_SPAWN_DUP2
        try:
            pid = get_original("os", "posix_spawn")(
                sys.executable,
                [sys.executable, "-m", __name__, str(path), str(os.getpid())],
                env,
                file_actions=[(dup2, req_r, 0), (dup2, rep_w, 1), (dup2, lock_fd, _LOCK_FD)],
            )
        except OSError:
            self._close_fd(self._req_w)
            self._close_fd(self._rep_r)
            raise
        finally:
            self._close_fd(req_r)
            self._close_fd(rep_w)
        os.set_blocking(self._req_w, False)
        os.set_blocking(self._rep_r, False)
        return pid

    # -- submitting -------------------------------------------------------------------------

    def _in_hub(self) -> bool:
        return self._native_ident() == self._hub_thread

    def _submit(self, ops: list[Any], callback: Callable[[bool, Any], None] | None
                ) -> tuple[_Frame, int]:
        from hermes_actors.store.db import StoreUnavailableError

        if self._error is not None:
            raise StoreUnavailableError(self._error)
        if self._closed:
            raise StoreError("the database writer is closed")
        if not self._pending or len(self._pending[-1].lists) >= MAX_GROUP:
            self._pending.append(_Frame(self._event()))
        frame = self._pending[-1]
        frame.lists.append(ops)
        frame.callbacks.append(callback)
        if self._inflight is None:
            self._send_next()
        return frame, len(frame.lists) - 1

    def _send_next(self) -> None:
        while self._pending and self._inflight is None and self._error is None:
            frame = self._inflight = self._pending.popleft()
            try:
                data = _frame(frame.lists)
            except Exception as exc:  # noqa: BLE001 - an op that cannot be sent fails its frame
                self._inflight = None
                error = StoreError(f"cannot send a write to the database writer: {exc}")
                frame.finish([(False, error)] * len(frame.lists))
                continue
            view = memoryview(data)
            try:
                while view:
                    view = view[self._nb_write(self._req_w, view):]
            except OSError as exc:
                self._fail(f"the database writer process is gone ({exc})")

    def _from_other_thread(self, ops: list[Any]) -> tuple[bool, Any]:
        done = self._native_lock()
        done.acquire()
        box: list[tuple[bool, Any]] = []

        def finished(ok: bool, value: Any) -> None:
            box.append((ok, value))
            done.release()

        def start() -> None:
            try:
                self._submit(ops, finished)
            except Exception as exc:  # noqa: BLE001 - reported to the waiting thread
                finished(False, exc)

        self._hub.loop.run_callback_threadsafe(start)
        done.acquire()
        return box[0]

    def apply(self, ops: list[Any]) -> Any:
        """Commit ``ops`` as one transaction (grouped with others); its results, or raise."""
        if self._in_hub():
            frame, i = self._submit(ops, None)
            frame.done.wait()
            ok, value = frame.outcomes[i]
        else:
            ok, value = self._from_other_thread(ops)
        if ok:
            return value
        raise value

    def post(self, ops: list[Any], callback: Callable[[bool, Any], None]) -> None:
        """:meth:`apply` without waiting: ``callback(ok, value)`` runs in the hub once
        committed (or once it failed)."""
        if self._in_hub():
            self._submit(ops, callback)
        else:
            callback(*self._from_other_thread(ops))

    def barrier(self) -> None:
        """Return once every write submitted before this call has been answered."""
        if not self._in_hub():
            self._from_other_thread([])
            return
        last = self._pending[-1] if self._pending else self._inflight
        if last is not None:
            last.done.wait()

    def waiting(self) -> int:
        """Op lists submitted and not answered yet."""
        inflight = len(self._inflight.lists) if self._inflight is not None else 0
        return inflight + sum(len(f.lists) for f in self._pending)

    # -- answers ----------------------------------------------------------------------------

    def _read_exact(self, n: int) -> bytes:
        parts = []
        while n:
            chunk = self._nb_read(self._rep_r, n)
            if not chunk:
                raise EOFError
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def _receive(self) -> Any:
        (size,) = _HEADER.unpack(self._read_exact(_HEADER.size))
        return pickle.loads(self._read_exact(size))

    def _read_loop(self) -> None:
        try:
            while True:
                outcomes = self._receive()
                frame, self._inflight = self._inflight, None
                if frame is None:
                    raise EOFError
                self.frames += 1
                self.lists += len(frame.lists)
                self.largest = max(self.largest, len(frame.lists))
                frame.finish(outcomes)
                self._send_next()
        except (EOFError, OSError, pickle.UnpicklingError, struct.error) as exc:
            if not (self._closed and self._inflight is None and not self._pending):
                status = self._reap(wait_s=_REAP_WAIT)
                self._fail(f"the database writer process exited ({status}: {exc!r})")

    def _fail(self, reason: str) -> None:
        from hermes_actors.store.db import StoreUnavailableError

        if self._error is None:
            self._error = reason
            log.error("%s; writes fail until the store reopens the database", reason)
        frames = ([self._inflight] if self._inflight is not None else []) + list(self._pending)
        self._inflight = None
        self._pending.clear()
        for frame in frames:
            frame.finish([(False, StoreUnavailableError(reason))] * len(frame.lists))

    def _reap(self, wait_s: float | None = None) -> str:
        """Collect the child's exit status: wait for it (``None``), or poll for ``wait_s``
        seconds without blocking the hub (its pipe closed: it is exiting)."""
        import gevent

        deadline = time.monotonic() + (wait_s or 0.0)
        while True:
            try:
                pid, status = self._waitpid(self.pid, 0 if wait_s is None else os.WNOHANG)
            except ChildProcessError:
                return "already reaped"
            if pid != 0:
                break
            if time.monotonic() >= deadline:
                return "still running"
            gevent.sleep(0.005)
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit status {os.waitstatus_to_exitcode(status)}"

    def close(self) -> None:
        """Wait for the writes submitted so far, then let the child close the database and
        exit (idempotent; call it from the hub's thread)."""
        if self._closed:
            return
        if self._error is None:
            self.barrier()
        self._closed = True
        self._close_fd(self._req_w)  # the child sees end-of-file, closes the database, exits
        self._reader.join()
        self._close_fd(self._rep_r)
        self._reap()


# -- the child ------------------------------------------------------------------------------


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
    try:
        return _frame(outcomes)
    except Exception:  # noqa: BLE001 - an error that cannot be pickled travels as text
        return _frame([(ok, value if ok else StoreError(f"{type(value).__name__}: {value}"))
                       for ok, value in outcomes])


def serve(path: str, parent_pid: int) -> int:
    """The child's main loop: answer frames until end-of-file (opening the database at the
    first one)."""
    from hermes_actors.store.db import SessionDB, StoreUnavailableError

    _die_with_parent(parent_pid)
    for signum in (signal.SIGINT, signal.SIGTERM):  # stopping is the parent's decision: it
        signal.signal(signum, signal.SIG_IGN)  # closes the pipe (or dies: PDEATHSIG)
    answers = os.dup(1)
    os.dup2(2, 1)  # anything printed by accident goes to stderr, not into the protocol
    db = None
    try:
        while True:
            try:
                (size,) = _HEADER.unpack(_read_blocking(0, _HEADER.size))
                lists = pickle.loads(_read_blocking(0, size))
            except EOFError:
                return 0
            if db is None:
                try:
                    db = SessionDB(path, writer="thread")
                except StoreError as exc:
                    error = StoreUnavailableError(f"the database writer cannot open it: {exc}")
                    _write_blocking(answers, _answer([(False, error)] * len(lists)))
                    return 1
            _write_blocking(answers, _answer(db.apply_lists(lists)))
    finally:
        if db is not None:
            db.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], int(sys.argv[2])))
