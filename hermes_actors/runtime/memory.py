"""The memory probe and budget of the agent cache's memory pass (§11, §17.30, §17.42).

Why it reads files instead of asking psutil: the figure that gets a gateway killed is its
cgroup's, not the process's. Under cgroup v2 a service unit's ``memory.high``/``memory.max``
covers the gateway *and* the tools it spawns, so the measurement is that cgroup's
``memory.stat`` ``anon``. Without a v2 limit the process's own anonymous RSS is read from
``/proc/self/status`` (``RssAnon``): one small read, where psutil's ``memory_full_info()``
walks every mapping and gets slow with many threads. psutil is only the fallback off Linux.

Every path is taken under ``root`` so tests build a fake ``/sys/fs/cgroup`` + ``/proc``
tree in a temporary directory (the test machine may be on either cgroup version).

Limit lookup order, first usable value wins: the process's own v2 cgroup (``0::<path>`` in
``/proc/self/cgroup``) ``memory.high`` then ``memory.max``; the root cgroup's
``memory.high`` then ``memory.max``; cgroup v1 ``memory.limit_in_bytes`` of the process's
own v1 cgroup (the ``memory:`` line) then of the v1 mount root. ``max``, or a value of
2^62 bytes or more (v1 reports "unlimited" as a page-rounded ``LLONG_MAX``), means no limit
there; missing or unreadable files are skipped.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "AUTO_FLOOR_BYTES",
    "AUTO_FRACTION",
    "MB",
    "UNLIMITED_BYTES",
    "CgroupLimit",
    "MemoryProbe",
    "malloc_trim",
    "resolve_budget",
    "total_ram_bytes",
]

log = logging.getLogger("hermes_actors.memory")

#: One MB: 2^20 bytes, everywhere (§17.42).
MB = 1 << 20
#: A limit at or above this many bytes means "unlimited".
UNLIMITED_BYTES = 1 << 62
#: The share of the limit (or of total RAM) an ``auto`` budget takes.
AUTO_FRACTION = 0.65
#: An ``auto`` budget under this disables the memory pass (§17.30).
AUTO_FLOOR_BYTES = 512 * MB


class CgroupLimit(NamedTuple):
    """Which limit applies to this process, and where it was found."""

    #: The limit in bytes.
    limit_bytes: int
    #: The file the limit was read from.
    source: Path
    #: The cgroup v2 directory whose ``memory.stat`` measures usage, or None under v1.
    v2_dir: Path | None


class MemoryProbe:
    """Reads the memory limit and anonymous memory of this process under ``root``."""

    def __init__(self, root: str | Path = "/") -> None:
        #: The filesystem root the ``sys`` and ``proc`` paths are taken under.
        self.root = Path(root)

    # -- limit ----------------------------------------------------------------------------

    def limit(self) -> CgroupLimit | None:
        """The limit that applies (value, source file, v2 cgroup), or None when uncapped."""
        for path, v2_dir in self._limit_candidates():
            value = _read_limit(path)
            if value is not None:
                return CgroupLimit(value, path, v2_dir)
        return None

    def limit_bytes(self) -> int | None:
        """The memory limit in bytes, or None when no cgroup caps this process."""
        found = self.limit()
        return None if found is None else found.limit_bytes

    def _limit_candidates(self) -> list[tuple[Path, Path | None]]:
        cg = self.root / "sys/fs/cgroup"
        v2_own, v1_own = self._own_cgroups()
        out: list[tuple[Path, Path | None]] = []
        v2_dirs = [cg / v2_own.lstrip("/")] if v2_own is not None else []
        if cg not in v2_dirs:
            v2_dirs.append(cg)
        for d in v2_dirs:
            out += [(d / "memory.high", d), (d / "memory.max", d)]
        v1 = cg / "memory"
        if v1_own is not None and v1_own.strip("/"):
            out.append((v1 / v1_own.lstrip("/") / "memory.limit_in_bytes", None))
        out.append((v1 / "memory.limit_in_bytes", None))
        return out

    def _own_cgroups(self) -> tuple[str | None, str | None]:
        """The v2 path (``0::``) and the v1 memory path (``N:memory:``) of this process."""
        text = _read_text(self.root / "proc/self/cgroup")
        v2 = v1 = None
        for line in (text or "").splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            hierarchy, controllers, path = parts
            if hierarchy == "0" and controllers == "":
                v2 = path
            elif "memory" in controllers.split(","):
                v1 = path
        return v2, v1

    # -- usage ----------------------------------------------------------------------------

    def anon_bytes(self) -> int:
        """Anonymous memory in bytes: the v2 cgroup's ``anon`` if a v2 limit applies, else
        this process's ``RssAnon`` (psutil's RSS off Linux)."""
        found = self.limit()
        if found is not None and found.v2_dir is not None:
            anon = _read_stat(found.v2_dir / "memory.stat", "anon")
            if anon is not None:
                return anon
        status = _read_text(self.root / "proc/self/status")
        for line in (status or "").splitlines():
            if line.startswith("RssAnon:"):
                try:
                    return int(line.split()[1]) * 1024  # the kernel writes kB
                except (IndexError, ValueError):
                    break
        return _psutil_rss()

    def total_ram_bytes(self) -> int:
        """Total RAM: ``MemTotal`` of ``proc/meminfo`` under the root, else psutil's."""
        return total_ram_bytes(self.root)


def total_ram_bytes(root: str | Path = "/") -> int:
    """Total RAM in bytes: ``<root>/proc/meminfo`` ``MemTotal``, or psutil's figure."""
    text = _read_text(Path(root) / "proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                break
    import psutil

    return int(psutil.virtual_memory().total)


def resolve_budget(
    setting: float | str | None, probe: Any, *, total_ram: int | None = None
) -> int | None:
    """The memory budget in bytes for a ``memory_high_mb`` setting, or None (pass disabled).

    ``setting`` is ``"auto"``, a number of MB taken literally, or None/0/``off`` (disabled).
    ``auto`` is 65 % of ``probe.limit_bytes()``, or of total RAM when uncapped (``total_ram``
    if given, else the probe's ``total_ram_bytes()`` if it has one, else this machine's);
    an ``auto`` budget under 512 MB disables the pass. The floor never applies to a number.
    """
    if setting is None or setting is False:
        return None
    if isinstance(setting, str):
        text = setting.strip().lower()
        if text == "auto":
            return _auto_budget(probe, total_ram)
        if text in ("", "off", "false", "no", "none", "0"):
            return None
        setting = float(text)
    mb = float(setting)
    return int(mb * MB) if mb > 0 else None


def _auto_budget(probe: Any, total_ram: int | None) -> int | None:
    base = probe.limit_bytes()
    if base is None:
        if total_ram is not None:
            base = total_ram
        elif callable(getattr(probe, "total_ram_bytes", None)):
            base = probe.total_ram_bytes()
        else:
            base = total_ram_bytes()
    budget = int(base * AUTO_FRACTION)
    return budget if budget >= AUTO_FLOOR_BYTES else None


def malloc_trim() -> bool:
    """Return freed heap arenas to the OS (glibc ``malloc_trim(0)``); a no-op elsewhere.

    True when glibc reported memory released. Never raises.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):  # musl or no libc.so.6: nothing to trim with
        return False
    except Exception:  # noqa: BLE001 - trimming is an optimisation, never a failure
        log.debug("malloc_trim failed", exc_info=True)
        return False


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _read_limit(path: Path) -> int | None:
    """A limit file's value in bytes, or None when missing, unlimited or unparsable."""
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    if not text or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        log.debug("ignoring unparsable memory limit %s: %r", path, text)
        return None
    return value if 0 < value < UNLIMITED_BYTES else None


def _read_stat(path: Path, field: str) -> int | None:
    text = _read_text(path)
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == field:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _psutil_rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)
