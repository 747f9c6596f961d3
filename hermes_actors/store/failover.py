"""``FailOver``: how a store applies its writes to its backend, and what it does when the
backend fails (§5). The base of :class:`~hermes_actors.store.core.StoreCore`, which owns the
backend, the routing entries and the mirror this part switches.

Degraded mode: if a read or write of a *local* database (SQLite) still fails after its
retries (:class:`~hermes_actors.errors.StoreUnavailableError`), the store logs one warning
and switches to the :class:`~hermes_actors.store.backends.files.backend.FilesBackend`:
``sessions.json`` becomes canonical and is written after every change, transcripts go to
``<session_id>.jsonl``. The failed write is re-applied there, so it is not lost; deferred
writes (:meth:`FailOver.apply_later`) that failed before it are re-applied first, in their
order.

Outage (a database server, ``Backend.local`` false): there is no local stand-in. The
failing call raises, nothing is written anywhere else, and the first such failure is
reported once to ``on_outage`` (the gateway then refuses new messages; its host replaces
it once the server is back).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from hermes_actors._green import new_rlock, spawn
from hermes_actors.errors import FencedError, StoreError, StoreUnavailableError
from hermes_actors.model.ids import new_id
from hermes_actors.model.timeutil import isoformat
from hermes_actors.store.backends.files.backend import FilesBackend
from hermes_actors.store.backends.files.journal import JOURNAL_NAME
from hermes_actors.store.backends.files.jsonl import SUFFIX, JsonlTranscripts
from hermes_actors.store.backends.files.mirror import MIRROR_NAME, MirrorWriter, read_mirror
from hermes_actors.store.entrymap import EntryMap
from hermes_actors.store.fencing import ShardFence
from hermes_actors.store.ops import ListId, Op
from hermes_actors.store.protocol import Backend
from hermes_actors.store.routing import (
    NO_FLAGS,
    RoutingRow,
    entry_text,
    flags_from_data,
    flags_of,
    parse_row,
)

__all__ = ["FailOver"]

log = logging.getLogger("hermes_actors.store")


class FailOver:
    """Applying ops with fail-over (module doc); ``on_outage(exc)`` hears of the first
    failure of a database server."""

    # what the store sets up (StoreCore.__init__)
    backend: Backend
    fence: ShardFence | None
    entries: EntryMap
    home: Path
    sessions_dir: Path
    node_id: str
    transcripts: JsonlTranscripts
    ts: Callable[[], float]
    now: Callable[[], datetime]
    _mirror: MirrorWriter
    _entries_loaded: bool
    _failed: list[Backend]

    def __init__(self, on_outage: Callable[[BaseException], None] | None) -> None:
        self._switch_lock = threading.Lock()
        #: Deferred writes that failed with the database, ``(ops, on_done)`` in submission
        #: order: re-applied in degraded mode before any write submitted after them.
        self._deferred: deque[tuple[list[Op], Callable[[], None]]] = deque()
        self._fallback_lock = new_rlock()
        #: The failure that began an outage of a database server (``None``: no outage).
        self.outage: BaseException | None = None
        self._on_outage = on_outage

    def _complete_entries(self, failed: Backend | None) -> Mapping[str, tuple[str, Any]]:
        """Before running without the database: every routing row, read from the failing
        backend for keys not in memory yet if it still reads, else from ``sessions.json``."""
        if self.entries.missing() and failed is not None:
            with contextlib.suppress(StoreError):
                self.entries.fill(failed.routing_rows())
        if self.entries.missing():
            mirror = read_mirror(self.sessions_dir / MIRROR_NAME, now=self.ts())
            rows = []
            for key, data in mirror.entries.items():
                flags = flags_from_data(data) if isinstance(data, dict) else NO_FLAGS
                try:
                    entry = parse_row(key, data, flags)
                except ValueError:
                    continue
                rows.append(RoutingRow(key, entry_text(entry), flags_of(entry)))
            self.entries.fill(rows)
        if self.entries.missing():
            log.error("%d routing entries could not be read from the database or %s; those "
                      "sessions start fresh at their next message", self.entries.missing(),
                      MIRROR_NAME)
        return self.entries.rows()

    def _announce_degraded(self, exc: BaseException) -> None:
        log.warning(
            "the session database cannot be used (%s): running in DEGRADED mode. Routing is "
            "kept in %s (written on every change), transcripts in <session_id>%s files; the "
            "inbox, the delivery ledger and the outbox are journaled in %s. Fix the database "
            "and restart to leave this mode.",
            exc, self.sessions_dir / MIRROR_NAME, SUFFIX, self.home / JOURNAL_NAME,
        )  # fmt: skip

    def _report_outage(self, exc: BaseException) -> None:
        """The database server failed: report it once (see the module doc)."""
        with self._switch_lock:
            if self.outage is not None:
                return
            self.outage = exc
        log.warning("the session database cannot be used (%s): new messages are refused "
                    "until it is back", exc)
        if self._on_outage is not None:
            self._on_outage(exc)

    def _switch_to_degraded(self, exc: BaseException, failed: Backend) -> None:
        """Fail over from ``failed`` to the files backend (a ``local`` one); for a database
        server, report the outage and re-raise ``exc`` instead."""
        if not failed.local:
            self._report_outage(exc)
            raise exc
        with self._switch_lock:
            if self.backend is not failed:
                return
            self._mirror.close(flush=False)  # the files backend writes sessions.json now
            rows = None
            if self._entries_loaded:  # hand over every row (else it reads sessions.json)
                rows = [RoutingRow(key, text, flags) for key, (text, flags)
                        in self._complete_entries(failed).items()]
            self._failed.append(failed)
            self.backend = FilesBackend(self.home, self.transcripts, previous=failed,
                                        node_id=self.node_id, rows=rows,
                                        since=isoformat(self.now()))
            self._announce_degraded(exc)

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops`` as one transaction (failing over to degraded mode if need be); on a
        cluster node, conditioned on the tenure of the shards they write for (``fence``)."""
        backend = self.backend
        fence = self.fence
        if fence is None:
            if backend.local:  # an id, so a replay after an unknown outcome applies once
                ops = [ListId(new_id(), self.ts()), *ops]
                try:
                    return backend.apply(ops)[1:]
                except StoreUnavailableError as exc:
                    return self._fail_over(exc, backend, ops)[1:]
            try:
                return backend.apply(ops)
            except StoreUnavailableError as exc:
                return self._fail_over(exc, backend, ops)
        guarded = fence.guard(ops)
        try:
            results = backend.apply(guarded)
        except StoreUnavailableError as exc:
            return self._fail_over(exc, backend, ops)
        except FencedError as exc:
            fence.refused(exc)
            raise
        return results[len(guarded) - len(ops):]

    def read(self, question: Callable[[Backend], Any]) -> Any:
        """Ask the backend ``question(backend)``, asking the files backend instead if the
        database fails meanwhile."""
        backend = self.backend
        try:
            return question(backend)
        except StoreUnavailableError as exc:
            self._switch_to_degraded(exc, backend)
            return question(self.backend)

    def _fail_over(self, exc: StoreUnavailableError, backend: Backend, ops: list[Op]
                   ) -> list[Any]:
        """Switch away from the failed ``backend`` and apply ``ops`` in degraded mode, after
        the deferred writes that failed before them."""
        with self._fallback_lock:
            self._switch_to_degraded(exc, backend)
            self._apply_deferred()
            return self.backend.apply(ops)

    def _apply_deferred(self, outage: StoreUnavailableError | None = None) -> None:
        """Re-apply the failed deferred writes, oldest first (under ``_fallback_lock``); in an
        ``outage`` of a database server there is no stand-in: they fail (logged)."""
        while self._deferred:
            ops, on_done = self._deferred.popleft()
            try:
                if outage is not None:
                    raise outage
                self.backend.apply(ops)
            except StoreUnavailableError as exc:  # an outage (reported): no stand-in
                log.error("a deferred write failed: %s", exc)
            except Exception:  # noqa: BLE001 - logged; the caller is gone
                log.exception("a deferred write failed in degraded mode too")
            finally:
                on_done()

    def apply_later(self, ops: list[Op], on_done: Callable[[], None]) -> None:
        """Apply ``ops`` without waiting (routing is never among them); ``on_done()`` once
        they are durable or have failed (logged). A database that fails is switched away
        from and the ops re-applied in degraded mode, off the caller and off the hub."""
        backend = self.backend
        fence = self.fence
        if fence is not None:
            try:
                guarded = fence.guard(ops)
            except FencedError as exc:
                log.warning("a deferred write was not sent: %s", exc)
                on_done()
                return
        elif backend.local:  # an id, so a replay after an unknown outcome applies once
            guarded = ops = [ListId(new_id(), self.ts()), *ops]
        else:
            guarded = ops

        def finished(ok: bool, value: Any) -> None:
            if ok or not isinstance(value, StoreUnavailableError):
                if not ok:
                    if fence is not None and isinstance(value, FencedError):
                        fence.refused(value)
                    log.error("a deferred write failed: %s", value)
                on_done()
                return

            self._deferred.append((ops, on_done))  # in the order the writer failed them

            def fall_back() -> None:  # may block: not in the hub's callback
                with self._fallback_lock:
                    try:
                        self._switch_to_degraded(value, backend)
                    except StoreUnavailableError as exc:  # an outage (reported): no stand-in
                        self._apply_deferred(exc)
                    else:
                        self._apply_deferred()

            spawn(fall_back, "deferred-write")

        try:
            backend.apply_later(guarded, finished)
        except StoreError as exc:  # closed meanwhile
            finished(False, exc)
