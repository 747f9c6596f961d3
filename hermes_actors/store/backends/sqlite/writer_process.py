"""``WriterProcess``: under gevent, a child process commits the database's writes.

Why a process: the hub and an in-process database thread share one GIL. The worker drops
the GIL around every ``sqlite3_step`` and has to win it back after each of the ~12
statements a turn writes; while the hub runs greenlets that takes up to a switch interval,
so the worker only made progress while the hub sat idle waiting for it. Measured at 10,000
sessions: hub 275 µs and worker 155 µs a turn, strictly one after the other (2,200 turns/s).
A child process has its own GIL: it applies the same op lists with the same group commit
(:meth:`SessionDB.apply_lists`) while the hub goes on, and the hub only encodes op lists
into a pipe and reads answers through its event loop (2,900 turns/s on the same run).
Shorter switch intervals, and a worker thread that forwarded batches to the child, were
measured and lost (the forwarding thread met the same GIL hand-offs).

Protocol: a frame is a 4-byte little-endian length and a pickle; a request frame carries
op lists each encoded on its own (:func:`encode_ops`). The child answers each request frame (at most ``MAX_GROUP`` op lists, applied as one group commit) with one frame of
``(ok, value)`` pairs in the same order. It is spawned before the parent opens (and migrates)
the database, so its interpreter starts while the parent works, and it opens the database
at the first request, which comes only after the parent's open. Its commits never copy the
log back into the database: a :class:`~hermes_actors.store.backends.sqlite.checkpointer.Checkpointer`
thread of the child does that a few times a second.

Order: at most :data:`MAX_IN_FLIGHT` frames are in flight and the child runs them in order;
op lists submitted meanwhile wait in the next frame, so they are grouped while the child
works, and a caller returns only after its frame's answer (after the COMMIT). Reads run on the parent's own connection and first wait for every
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
import dataclasses
import fcntl
import hashlib
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
from typing import Any, get_args

from hermes_actors.errors import StoreError, StoreUnavailableError
from hermes_actors.store.groupcommit import MAX_GROUP, call_back
from hermes_actors.store.ops import Op

__all__ = ["CHILD_MODULE", "HEADER", "LOCK_SUFFIX", "MAX_IN_FLIGHT", "OPS_FINGERPRINT",
           "PRAGMA_TAG", "WriterProcess", "decode_ops", "encode_frame", "encode_ops", "writer_lock"]

log = logging.getLogger("hermes_actors.store")

#: The writer lock beside the database: ``<database>`` + this suffix.
LOCK_SUFFIX = "-writer.lock"

#: The module the child runs (``python -m``).
CHILD_MODULE = "hermes_actors.store.backends.sqlite.writer_child"
#: A frame's length prefix.
HEADER = struct.Struct("<I")
_LOCK_FD = 3  # where the child holds the inherited writer lock
_PIPE_SIZE = 1 << 20
_REAP_WAIT = 5.0  # seconds a child whose pipe closed gets to finish exiting
#: Frames sent and not answered yet, at most: the next one waits in the pipe while the
#: child commits the current one, so the child never waits for the hub.
MAX_IN_FLIGHT = 2
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


#: The op classes, by the code that stands for each in an encoded list.
_CLASSES: tuple[type, ...] = get_args(Op)
_CODES = {cls: code for code, cls in enumerate(_CLASSES)}
_ROWS, _OBJECTS = b"R", b"O"
#: The tag of a diagnostic request in a frame's place of an op list: ``PRAGMA <name>`` on
#: the child's connection (:meth:`WriterProcess.pragma`), answered ``(True, value)``.
PRAGMA_TAG = b"P"


def _positional_fields(cls: type) -> tuple[str, ...]:
    """``cls``'s fields, which its constructor takes positionally in this order (checked:
    an op is decoded as ``cls(*fields)`` from its ``__dict__`` values)."""
    names = tuple(f.name for f in dataclasses.fields(cls))
    if any(not f.init or f.kw_only for f in dataclasses.fields(cls)):
        raise TypeError(f"{cls.__name__}: every op field must be positional")
    return names


#: What both ends must agree on: the codes, classes and field orders. The child refuses to
#: serve a parent whose table differs (another version of the code on disk).
OPS_FINGERPRINT = hashlib.sha256(repr([
    (cls.__module__, cls.__qualname__, _positional_fields(cls)) for cls in _CLASSES
]).encode()).hexdigest()[:16]


def encode_ops(ops: list[Any]) -> bytes:
    """One op list as bytes for the child: a pickle of ``(code, *fields)`` tuples (pickling
    the op objects themselves is about 6 × slower on the hub; marshal of the same tuples,
    used before, 1.3 ×), or a pickle of the ops when one is of a type the table lacks.
    Raises ``StoreError`` when the list cannot be sent at all."""
    try:
        rows = []
        for op in ops:  # (a loop, not a comprehension: one frame less a list)
            rows.append((_CODES[type(op)], *op.__dict__.values()))
        tag, value = _ROWS, rows
    except (KeyError, AttributeError):  # an op of another type
        tag, value = _OBJECTS, ops
    try:
        return tag + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - the caller's own write is rejected
        raise StoreError(f"cannot hand this write to the database writer: {exc}") from None


def decode_ops(blob: bytes) -> list[Any]:
    """The op list that :func:`encode_ops` encoded."""
    value = pickle.loads(blob[1:])
    if blob[:1] == _ROWS:
        return [_CLASSES[code](*fields) for code, *fields in value]
    return value


def encode_frame(obj: Any) -> bytes:
    """``obj`` as one frame: its length, then its pickle."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def writer_lock(path: Path, wait_s: float, sleep: Callable[[float], None]) -> int:
    """Open and ``flock`` ``<path>-writer.lock``; return its descriptor.

    Waits up to ``wait_s`` for a holder (an old writer child finishing) to go, then raises
    ``StoreUnavailableError``.
    """
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

    __slots__ = ("blobs", "callbacks", "outcomes", "done")

    def __init__(self, done: Any) -> None:
        #: Each op list encoded on its own (by its caller): a list the child cannot read
        #: fails alone, and so does one that cannot be encoded (at once, in its caller).
        self.blobs: list[bytes] = []
        self.callbacks: list[_Callback | None] = []
        self.outcomes: list[tuple[bool, Any]] = []
        self.done = done

    def finish(self, outcomes: list[tuple[bool, Any]], schedule: Callable[..., Any]) -> None:
        """Record the answers, wake the waiters, and ``schedule`` each callback as a callback
        of the hub itself (never in the reader: one that blocks there on the writer would
        wait for itself; in the hub, blocking fails loudly, as with the writer thread). A
        ``Waiter`` (a greenlet parked in :meth:`WriterProcess.apply`) is switched to with
        its outcome: waiting on the frame's event instead ran four Python-level calls of
        gevent's no-timeout placeholder at each wait."""
        self.outcomes = outcomes
        self.done.set()
        for callback, outcome in zip(self.callbacks, outcomes, strict=True):
            if callback is None:
                continue
            if type(callback) is _WAITER:
                schedule(callback.switch, outcome)
            else:
                schedule(call_back, callback, *outcome)


#: gevent's ``Waiter`` class, once a :class:`WriterProcess` exists (the child never imports
#: gevent): a callback slot holding one is a greenlet parked in :meth:`WriterProcess.apply`.
_WAITER: Any = None

#: What a submitted op list's answer goes to: a function of ``(ok, value)`` run in the hub,
#: or a ``Waiter`` of a greenlet waiting for it (gevent's type, unknown to the child: ``Any``).
_Callback = Any


def _above_stdio(fd: int, close: Callable[[int], None]) -> int:
    """A close-on-exec copy of ``fd`` numbered 10 or more (``fd`` is closed): the child's
    ``dup2`` actions target 0, 1 and 3, which must not be sources too."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    close(fd)
    return high


class WriterProcess:
    """The parent's end: spawns the child, sends op lists, completes them in the hub.

    Create it in the hub's thread; :meth:`apply`, :meth:`post`, :meth:`barrier` and
    :meth:`close` may be called from greenlets of that hub or from other native threads.
    One sender greenlet writes the pipe and one reader greenlet reads it, so a caller that
    is killed or times out can never leave half a frame behind.
    """

    def __init__(self, path: Path, lock_fd: int, synchronous: str = "full") -> None:
        import gevent
        import gevent.event
        import gevent.hub
        from gevent.monkey import get_original

        global _WAITER
        self._event = gevent.event.Event
        self._waiter = _WAITER = gevent.hub.Waiter
        self._hub = gevent.get_hub()
        self._native_ident = get_original("_thread", "get_ident")
        self._native_lock = get_original("_thread", "allocate_lock")
        self._hub_thread = self._native_ident()
        self._waitpid = get_original("os", "waitpid")
        # gevent's os.close defers closing a pipe to a later loop turn; end-of-file must
        # reach the child now, and no watcher is left on these descriptors when they close.
        self._close_fd = get_original("os", "close")
        self._pending: deque[_Frame] = deque()  # not sent yet
        self._inflight: deque[_Frame] = deque()  # sent (or being sent); answers in order
        self._error: str | None = None
        self._closing = False
        self._reaped = False
        #: Frames answered, op lists answered, the most lists in one frame.
        self.frames = self.lists = self.largest = 0
        self.pid = self._spawn(path, lock_fd, synchronous)
        self._wake = self._event()
        self._watcher = self._hub.loop.io(self._rep_r, 1)
        self._watcher.ref = False  # an idle writer must not keep the hub's loop alive
        self._sender = gevent.spawn(self._send_loop)
        self._reader = gevent.spawn(self._read_loop)

    def _spawn(self, path: Path, lock_fd: int, synchronous: str) -> int:
        from gevent.monkey import get_original

        fds: list[int] = []
        try:
            for _ in range(2):
                fds.extend(_above_stdio(fd, self._close_fd) for fd in os.pipe())
            fds.append(fcntl.fcntl(lock_fd, fcntl.F_DUPFD_CLOEXEC, 10))
        except OSError:
            for fd in fds:
                self._close_fd(fd)
            raise
        req_r, self._req_w, self._rep_r, rep_w, lock_copy = fds
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
                [sys.executable, "-m", CHILD_MODULE, str(path), str(os.getpid()), OPS_FINGERPRINT,
                 synchronous],
                env,
                file_actions=[(dup2, req_r, 0), (dup2, rep_w, 1), (dup2, lock_copy, _LOCK_FD)],
            )
        except OSError:
            self._close_fd(self._req_w)
            self._close_fd(self._rep_r)
            raise
        finally:
            for fd in (req_r, rep_w, lock_copy):
                self._close_fd(fd)
        os.set_blocking(self._req_w, False)
        os.set_blocking(self._rep_r, False)
        return pid

    # -- submitting -------------------------------------------------------------------------

    def _in_hub(self) -> bool:
        return self._native_ident() == self._hub_thread

    def _submit(self, blob: bytes, callback: _Callback | None) -> None:
        """Queue one encoded op list (in the hub, never blocking)."""
        if self._error is not None:
            raise StoreUnavailableError(self._error)
        if self._closing:
            raise StoreError("the database writer is closed")
        if not self._pending or len(self._pending[-1].blobs) >= MAX_GROUP:
            self._pending.append(_Frame(self._event()))
        frame = self._pending[-1]
        frame.blobs.append(blob)
        frame.callbacks.append(callback)
        self._watcher.ref = True  # an answer is due: keep the loop alive for it
        if len(self._inflight) < MAX_IN_FLIGHT:
            self._wake.set()

    def _send_loop(self) -> None:
        """The only writer of the request pipe: sends pending frames, in order."""
        from gevent.os import nb_write

        while True:
            self._wake.wait()
            self._wake.clear()
            while self._pending and len(self._inflight) < MAX_IN_FLIGHT:
                if self._error is not None:
                    return
                frame = self._pending.popleft()
                self._inflight.append(frame)
                try:
                    view = memoryview(encode_frame(frame.blobs))
                    while view:  # a full pipe: nb_write waits for room
                        view = view[nb_write(self._req_w, view):]
                except BaseException as exc:  # a torn frame: the child can never resync
                    # Refuse new writes and end the child. The frames before this one may
                    # be committed, their answers still in the pipe: the reader drains them
                    # and fails only the frames left unanswered, at the child's end of file.
                    self._refuse(f"the database writer process is unusable: a write to its "
                                 f"pipe failed ({exc!r})")
                    self._kill()
                    if not isinstance(exc, Exception):
                        raise
                    return
            if self._closing and not self._pending:
                return

    def _from_other_thread(self, work: Callable[[Callable[[bool, Any], None]], Any]
                           ) -> tuple[bool, Any]:
        """Run ``work(finished)`` in the hub (it must not block) and wait here until it
        calls ``finished(ok, value)``."""
        done = self._native_lock()
        done.acquire()
        box: list[tuple[bool, Any]] = []

        def finished(ok: bool, value: Any) -> None:
            box.append((ok, value))
            done.release()

        def start() -> None:
            try:
                work(finished)
            except Exception as exc:  # noqa: BLE001 - reported to the waiting thread
                finished(False, exc)

        self._hub.loop.run_callback_threadsafe(start)
        done.acquire()
        return box[0]

    def apply(self, ops: list[Any]) -> Any:
        """Commit ``ops`` as one transaction (grouped with others); its results, or raise."""
        blob = encode_ops(ops)
        if self._native_ident() == self._hub_thread:  # (in the hub: _in_hub(), inlined)
            waiter = self._waiter()
            self._submit(blob, waiter)
            ok, value = waiter.get()
        else:
            ok, value = self._from_other_thread(lambda finished: self._submit(blob, finished))
        if ok:
            return value
        raise value

    def pragma(self, name: str) -> Any:
        """``PRAGMA name`` as the child's connection answers it (a diagnostic: it rides in a
        frame like an op list, after the frame's group commit)."""
        blob = PRAGMA_TAG + name.encode()
        if self._in_hub():
            waiter = self._waiter()
            self._submit(blob, waiter)
            ok, value = waiter.get()
        else:
            ok, value = self._from_other_thread(lambda finished: self._submit(blob, finished))
        if ok:
            return value
        raise value

    def post(self, ops: list[Any], callback: Callable[[bool, Any], None]) -> None:
        """:meth:`apply` without waiting: ``callback(ok, value)`` runs in the hub once
        committed (or once it failed)."""
        blob = encode_ops(ops)
        if self._native_ident() == self._hub_thread:  # (in the hub: _in_hub(), inlined)
            self._submit(blob, callback)
        else:
            callback(*self._from_other_thread(lambda finished: self._submit(blob, finished)))

    def _last_frame(self) -> _Frame | None:
        if self._pending:
            return self._pending[-1]
        return self._inflight[-1] if self._inflight else None

    def barrier(self) -> None:
        """Return once every write submitted before this call has been answered."""
        if self._in_hub():
            last = self._last_frame()
            if last is not None:
                last.done.wait()
            return

        def watch(finished: Callable[[bool, Any], None]) -> None:
            last = self._last_frame()
            if last is None:
                finished(True, None)
            else:
                last.done.rawlink(lambda _event: finished(True, None))

        self._from_other_thread(watch)

    def waiting(self) -> int:
        """Op lists submitted and not answered yet."""
        return sum(len(frame.blobs) for frames in (self._pending, self._inflight)
                   for frame in frames)

    # -- answers ----------------------------------------------------------------------------

    def _read_loop(self) -> None:
        buffer = bytearray()
        try:
            while True:
                try:
                    chunk = os.read(self._rep_r, _PIPE_SIZE)
                except BlockingIOError:
                    self._hub.wait(self._watcher)
                    continue
                if not chunk:
                    raise EOFError("end of file")
                buffer += chunk
                while len(buffer) >= HEADER.size:
                    (size,) = HEADER.unpack_from(buffer)
                    if len(buffer) < HEADER.size + size:
                        break
                    answer = pickle.loads(buffer[HEADER.size:HEADER.size + size])
                    del buffer[:HEADER.size + size]
                    self._answered(answer)
        except Exception as exc:  # noqa: BLE001 - any broken answer ends the child's use
            if self._closing and not self._inflight and not self._pending:
                return  # the child's end-of-file after close(): all answered
            status = self._reap(wait_s=_REAP_WAIT) if isinstance(exc, EOFError) else (
                self._kill_and_reap())
            self._fail(f"the database writer process exited ({status}: {exc!r})")
        finally:
            self._watcher.close()

    def _answered(self, outcomes: list[tuple[bool, Any]]) -> None:
        if not self._inflight or len(outcomes) != len(self._inflight[0].blobs):
            raise ValueError("an answer that matches no frame sent")
        frame = self._inflight.popleft()
        self.frames += 1
        self.lists += len(frame.blobs)
        self.largest = max(self.largest, len(frame.blobs))
        self._watcher.ref = bool(self._inflight or self._pending)  # answers still due
        frame.finish(outcomes, self._hub.loop.run_callback)
        if self._pending:
            self._wake.set()

    def _refuse(self, reason: str) -> None:
        """Refuse every write submitted from now on (the first reason is kept)."""
        if self._error is None:
            self._error = reason
            log.error("%s; writes fail until the store reopens the database", reason)

    def _fail(self, reason: str) -> None:
        self._refuse(reason)
        frames = list(self._inflight) + list(self._pending)
        self._inflight.clear()
        self._pending.clear()
        self._wake.set()  # the sender sees the error and ends
        for frame in frames:
            frame.finish([(False, StoreUnavailableError(reason))] * len(frame.blobs),
                         self._hub.loop.run_callback)

    def _kill(self) -> None:
        if not self._reaped:  # once reaped, the pid may name another process
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)

    def _kill_and_reap(self) -> str:
        self._kill()
        return self._reap(wait_s=_REAP_WAIT)

    def _reap(self, wait_s: float) -> str:
        """Collect the child's exit status, polling for up to ``wait_s`` seconds without
        blocking the hub."""
        import gevent

        deadline = time.monotonic() + wait_s
        while True:
            if self._reaped:
                return "already reaped"
            try:
                pid, status = self._waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self._reaped = True
                return "already reaped"
            if pid != 0:
                self._reaped = True
                break
            if time.monotonic() >= deadline:
                return "still running"
            gevent.sleep(0.005)
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit status {os.waitstatus_to_exitcode(status)}"

    def close(self) -> None:
        """Refuse new writes, wait for those submitted, then let the child close the
        database and exit (idempotent)."""
        if not self._in_hub():
            def work(finished: Callable[[bool, Any], None]) -> None:
                import gevent

                def run() -> None:
                    try:
                        self.close()
                    except BaseException as exc:  # noqa: BLE001 - raised in the waiting thread
                        finished(False, exc)
                        if not isinstance(exc, Exception):
                            raise
                    else:
                        finished(True, None)

                gevent.spawn(run)

            ok, value = self._from_other_thread(work)
            if not ok:
                raise value
            return
        if self._closing:
            self._sender.join()
            self._reader.join()
            return
        self._closing = True
        self._wake.set()
        self._sender.join()  # everything pending is written (or the writer failed)
        last = self._inflight[-1] if self._inflight else None
        if last is not None:
            last.done.wait()
        self._close_fd(self._req_w)  # the child sees end-of-file, closes the database, exits
        self._watcher.ref = True  # until its end-of-file
        self._reader.join(timeout=_REAP_WAIT)
        if not self._reader.dead:
            self._reader.kill()
        self._close_fd(self._rep_r)
        if self._reap(wait_s=_REAP_WAIT) == "still running":
            log.warning("the database writer process %d did not exit; killing it", self.pid)
            self._kill_and_reap()
