"""``HomeLock``: one gateway per home, enforced with ``flock`` on ``<home>/gateway.lock``.

Two gateways on one home would each "recover" the other's running turns, deliver the same
replies twice and write ``.clean_shutdown`` into a home that is still live (after which a
crash of the first looks like a clean stop and its interrupted turns are never resumed), so
``Gateway.start()`` takes this lock before it touches anything, for every kind of host. ``flock`` is held by the open file and released
by the kernel when the process ends in any way, so a crash never leaves a stale lock to clean
up; the pid written into the file is only there to name the holder in the refusal. The file
is never deleted: unlinking a locked file would let a third process lock a fresh inode while
the first still runs.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from hermes_actors.errors import HermesActorsError, HomeInUseError

__all__ = ["LOCK_NAME", "HomeLock"]

#: The lock file inside the home.
LOCK_NAME = "gateway.lock"


class HomeLock:
    """An exclusive, non-blocking lock on ``<home>/gateway.lock`` (a context manager)."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        #: The lock file.
        self.path = Path(home) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> HomeLock:
        """Take the lock, or raise :class:`HomeInUseError` naming the holder's pid."""
        if self._fd is not None:
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise HermesActorsError(f"cannot open the lock file {self.path}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise HomeInUseError(
                f"the home {str(self.path.parent)!r} is in use by a running gateway ({who}); "
                "stop that gateway first, or use another home (--home)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (idempotent); the file stays."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> HomeLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
