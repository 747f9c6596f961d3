"""``sessions.json``: the human-readable mirror of the routing table (§5, §17.14).

With SQLite the mirror is a convenience, so writes are *coalesced*: a change only marks it
dirty and a background timer (or ``flush()``/``close()``) writes the whole file at most once
per interval. Rewriting it on every change would make the cost of one change grow with the
number of sessions, which is what the reference gateway did. In degraded mode the mirror is
the routing store, and the files backend writes it after every change.

The file is one JSON object: ``"_README"`` first, then ``session_key -> entry``. A
``"_degraded_since"`` key marks a mirror written while ``state.db`` was unusable; the next
start with a working database treats it as newer than the database. Keys starting with
``_`` are never entries. A file that is not a JSON object is copied aside
(``sessions.json.corrupt-<UTC time>``) and treated as empty: the gateway must start.
"""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, NamedTuple

from hermes_actors._green import off_the_hub
from hermes_actors.model.jsontext import to_json
from hermes_actors.store.backends.files.atomic import atomic_write_bytes, atomic_write_json
from hermes_actors.store.routing import RoutingFlags, full_entry_text

#: A JSON string literal of ``str`` (as ``json.dumps(..., ensure_ascii=False)``, faster).
_quote = encode_basestring

__all__ = [
    "CHANGED_KEY",
    "DEGRADED_KEY",
    "ENTRIES_PER_CHUNK",
    "MIRROR_NAME",
    "README",
    "MirrorContents",
    "MirrorWriter",
    "read_mirror",
    "render_mirror",
    "mirror_chunks",
    "render_mirror_rows",
    "render_mirror_text",
]

log = logging.getLogger(__name__)

#: File name of the mirror inside the sessions directory.
MIRROR_NAME = "sessions.json"
#: The first key's value: what this file is.
README = (
    "This file is a readable mirror of the routing table in state.db (session_key -> "
    "SessionEntry). state.db is canonical and this file is rewritten from it; only in "
    "degraded mode (no usable state.db) is this file the routing store."
)
#: Present while the mirror is canonical (degraded mode): ISO time the mode began.
DEGRADED_KEY = "_degraded_since"
#: The reserved key of a degraded-mode mirror listing the keys whose routing was written in
#: degraded mode: only those win over the database's rows at the next start (the others are
#: copies of what the mirror held when degraded mode began, which may lag the database).
CHANGED_KEY = "_degraded_changed"
#: Entries rendered and written at a time by :func:`mirror_chunks`.
ENTRIES_PER_CHUNK = 512


class MirrorContents(NamedTuple):
    """What :func:`read_mirror` found."""

    #: ``session_key -> raw entry data``; reserved ``_`` keys already removed.
    entries: dict[str, Any]
    #: The ``_degraded_since`` marker, if the mirror was written in degraded mode.
    degraded_since: str | None
    #: Whether the file existed but was not a JSON object (a copy was kept aside).
    corrupt: bool
    #: The ``_degraded_changed`` keys, or ``None`` (not a degraded mirror, or one written
    #: before the key existed: then every entry may win).
    changed: frozenset[str] | None = None


def _keep_aside(path: Path, now: float) -> Path | None:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        shutil.copyfile(path, aside)
    except OSError:
        return None
    return aside


def read_mirror(path: Path, *, now: float, keep_corrupt_copy: bool = True) -> MirrorContents:
    """Read the mirror tolerantly: missing → empty; corrupt → warning, copy aside, empty.

    ``keep_corrupt_copy=False`` (read-only callers such as the CLI) creates no file.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return MirrorContents({}, None, False)
    except OSError as exc:
        log.warning("cannot read %s (%s); starting without it", path, exc)
        return MirrorContents({}, None, False)
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        aside = _keep_aside(path, now) if keep_corrupt_copy else None
        kept = f" (a copy was kept at {aside})" if aside else ""
        log.warning("%s is not a JSON object; treating it as empty%s", path, kept)
        return MirrorContents({}, None, True)
    since = data.get(DEGRADED_KEY)
    changed = data.get(CHANGED_KEY)
    entries = {k: v for k, v in data.items() if not str(k).startswith("_")}
    return MirrorContents(entries, since if isinstance(since, str) else None, False,
                          frozenset(map(str, changed)) if isinstance(changed, list) else None)


def _head(degraded_since: str | None, changed: Iterable[str] | None) -> dict[str, Any]:
    head: dict[str, Any] = {"_README": README}
    if degraded_since is not None:
        head[DEGRADED_KEY] = degraded_since
        if changed is not None:
            head[CHANGED_KEY] = sorted(changed)
    return head


def render_mirror(rows: dict[str, Any], degraded_since: str | None = None,
                  changed: Iterable[str] | None = None) -> dict[str, Any]:
    """The mirror document: ``_README`` first, the degraded marker (and the keys changed in
    degraded mode) if any, then entries."""
    doc = _head(degraded_since, changed)
    doc.update(rows)
    return doc


def _document_pieces(entries: Iterable[tuple[str, str]], degraded_since: str | None,
                     changed: Iterable[str] | None = None) -> Iterator[str]:
    """The mirror's text in pieces: the opening with the reserved keys, then each entry
    (``key, JSON text``) on a line of its own, then the close."""
    yield "{\n" + ",\n".join(_quote(key) + ": " + to_json(value)
                              for key, value in _head(degraded_since, changed).items())
    for key, text in entries:
        yield ",\n" + _quote(key) + ": " + text
    yield "\n}\n"


def render_mirror_text(rows: dict[str, str], degraded_since: str | None = None,
                       changed: Iterable[str] | None = None) -> str:
    """The mirror document as JSON text, from each entry's JSON text: one entry a line.

    The same document as :func:`render_mirror`, assembled from text the store already has
    (each routing row's JSON), so a write costs one join instead of serialising every entry
    again. That matters at 100,000 sessions.
    """
    return "".join(_document_pieces(rows.items(), degraded_since, changed))


def _entries_of(rows: Mapping[str, tuple[str, RoutingFlags]]) -> Iterator[tuple[str, str]]:
    for key, (text, flags) in rows.items():
        yield key, full_entry_text(text, flags)


def render_mirror_rows(rows: Mapping[str, tuple[str, RoutingFlags]],
                       degraded_since: str | None = None,
                       changed: Iterable[str] | None = None) -> str:
    """:func:`render_mirror_text` of stored routing rows (``key -> (text, flags)``): each
    whole entry assembled from its stored text and flag columns."""
    return "".join(_document_pieces(_entries_of(rows), degraded_since, changed))


def mirror_chunks(rows: Mapping[str, tuple[str, RoutingFlags]],
                  degraded_since: str | None = None,
                  changed: Iterable[str] | None = None) -> Iterator[bytes]:
    """:func:`render_mirror_rows` as UTF-8 chunks of :data:`ENTRIES_PER_CHUNK` entries, to
    be written as they come: at 100,000 sessions one join and one encode of the 80 MB text
    held the interpreter lock for ~50 ms each, a stall for every other thread."""
    pieces = _document_pieces(_entries_of(rows), degraded_since, changed)
    while chunk := list(itertools.islice(pieces, ENTRIES_PER_CHUNK)):
        yield "".join(chunk).encode("utf-8")


class MirrorWriter:
    """Writes the mirror when dirty: on ``flush()``, on ``close()``, and every ``interval``
    seconds from a daemon timer (``interval=None``: no timer, flush explicitly).

    ``document()`` is called at write time to build the JSON object, its finished JSON
    text, or a *render*: a function of no arguments that returns the UTF-8 text as an
    iterable of chunks (:func:`mirror_chunks`), which runs with the write, off the gevent hub (:func:`~hermes_actors._green.off_the_hub`). A burst
    of changes costs one write. A failed write (e.g. ``ENOSPC``) leaves the old file
    intact, is logged, and is retried at the next flush.

    Why a render: at 100,000 sessions the text is 80 MB and assembling it takes 0.2-0.7 s
    of pure Python; in the hub that froze every actor for as long, at every interval while
    traffic kept the mirror dirty. ``document()`` itself runs in the caller (the hub) and
    should only take a snapshot of immutable rows for the render.
    """

    def __init__(
        self, path: Path,
        document: Callable[[], dict[str, Any] | str | Callable[[], Iterable[bytes]]],
        *, interval: float | None
    ) -> None:
        #: Where the mirror is written.
        self.path = path
        #: Successful writes so far.
        self.writes = 0
        self._document = document
        self._dirty = False
        self._writing = False
        self._failing = False
        self._flush_lock = threading.Lock()
        self._written = threading.Condition()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if interval is not None:
            self._timer = threading.Thread(
                target=self._run, args=(float(interval),), name="hermes-mirror", daemon=True
            )
            self._timer.start()

    @property
    def dirty(self) -> bool:
        """Whether a change has not been written yet."""
        return self._dirty

    def mark_dirty(self) -> None:
        """Note a change; the next flush writes it."""
        self._dirty = True

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.flush()

    def flush(self) -> bool:
        """Write the mirror now if dirty; ``True`` when the file is up to date afterwards."""
        with self._flush_lock:
            if not self._dirty:
                return True
            self._writing = True
            self._dirty = False
            try:
                document = self._document()
                if callable(document):
                    off_the_hub(self._write_rendered, document)
                elif isinstance(document, str):
                    off_the_hub(atomic_write_bytes, self.path, document.encode("utf-8"))
                else:
                    atomic_write_json(self.path, document)
            except (OSError, TypeError, ValueError) as exc:
                self._dirty = True
                if not self._failing:
                    log.warning("cannot write %s (%s); will retry", self.path, exc)
                self._failing = True
                return False
            finally:
                self._writing = False
            if self._failing:
                log.warning("%s is written again", self.path)
            self._failing = False
            with self._written:
                self.writes += 1
                self._written.notify_all()
            return True

    def _write_rendered(self, render: Callable[[], Iterable[bytes]]) -> None:
        atomic_write_bytes(self.path, render())

    def wait_clean(self, timeout: float | None = None) -> bool:
        """Block until every change so far is written (by the timer or a flush); ``False`` on
        timeout. A flush clears the dirty flag before it snapshots, so once the flag is
        clear and the write is done, the file holds every earlier change."""
        with self._written:
            return self._written.wait_for(lambda: not self._dirty and not self._writing, timeout)

    def close(self, *, flush: bool = True) -> None:
        """Stop the timer and write pending changes (unless ``flush=False``)."""
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join()
        if flush:
            self.flush()
