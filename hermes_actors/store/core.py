"""``StoreCore``: the persistence plumbing under :class:`~hermes_actors.store.SessionStore`.

Shape of a change: the caller takes the key's lock and decides with a pure function
(:mod:`~hermes_actors.store.lifecycle`); :meth:`StoreCore._commit` applies the resulting
operations as one backend transaction, then publishes the new entries in memory and marks
the mirror dirty. Memory is updated only after the backend accepted the change, so readers
never see state that a crash would lose. Locks are striped by key: changes to one key are
serialised (concurrent first messages create one entry and one ``sessions`` row), changes
to different keys are not, which leaves room for group commit in the database worker.

Degraded mode (§5): if ``state.db`` cannot be opened, or a write still fails after the
database's retries, the store logs one warning and switches to the
:class:`~hermes_actors.store.backends.files.backend.DegradedBackend`: ``sessions.json`` becomes canonical
and is written after every change, transcripts go to ``<session_id>.jsonl``. The failed
write is re-applied there, so it is not lost. On the next start with a working database
the degraded mirror wins over older rows and the JSONL transcripts are imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from hermes_actors._green import new_rlock, spawn
from hermes_actors.config import GatewayConfig
from hermes_actors.errors import StoreError, StoreUnavailableError
from hermes_actors.model.entry import SessionEntry, validate_session_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.model.timeutil import epoch, isoformat, utc_now
from hermes_actors.store.backends.files.backend import DegradedBackend
from hermes_actors.store.backends.files.jsonl import SUFFIX, JsonlTranscripts
from hermes_actors.store.backends.files.mirror import (
    MIRROR_NAME,
    MirrorWriter,
    read_mirror,
    render_mirror_text,
)
from hermes_actors.store.backends.sqlite.db import SessionDB
from hermes_actors.store.entrymap import EntryMap, NotFetched
from hermes_actors.store.loader import mirror_additions, parse_entry
from hermes_actors.store.ops import AppendMessage, CreateSession, DeleteRouting, PutRouting
from hermes_actors.store.transcript import normalize_message

__all__ = ["DEFAULT_MIRROR_INTERVAL", "StoreCore", "StoreStatistics"]

log = logging.getLogger("hermes_actors.store")

#: Seconds between coalesced ``sessions.json`` writes (SQLite mode).
DEFAULT_MIRROR_INTERVAL = 5.0
#: Key locks, striped by hash. A turn holds its key's stripe while its routing write
#: commits (milliseconds under load), so with many turns in flight a small table makes
#: unrelated sessions queue behind each other: at 64 stripes that contention cost a
#: quarter of the throughput at 10,000 sessions. 4,096 gevent locks take ~0.9 MB.
_STRIPES = 4096


class _SystemClock:
    """Real time."""

    def time(self) -> float:
        """Epoch seconds."""
        return time.time()

    def monotonic(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()


class StoreStatistics(NamedTuple):
    """A snapshot of the store, for ``stats()`` and metrics."""

    #: Routing entries held.
    sessions: int
    #: Whether the store runs without SQLite.
    degraded: bool
    #: Whether ``sessions.json`` has changes not yet written.
    mirror_dirty: bool
    #: ``sessions.json`` writes so far.
    mirror_writes: int
    #: Routing entries parsed from their stored JSON so far (the rest wait for first use).
    entries_parsed: int = 0


class StoreCore:
    """Backend choice, loading, commits, the mirror and degraded switching (see module doc).

    ``sessions_dir`` holds ``sessions.json`` (and JSONL transcripts in degraded mode); with
    ``db=None`` the store opens ``SessionDB(<sessions_dir>/../state.db)`` and closes it in
    :meth:`close`; a given ``db`` is used but never closed. ``clock`` is any object with
    ``time()`` and ``monotonic()``. ``mirror_interval`` is the coalescing period of the
    mirror (``None``: no timer; written on :meth:`flush` and :meth:`close`).
    """

    def __init__(
        self,
        sessions_dir: str | os.PathLike[str],
        config: GatewayConfig | None = None,
        has_active_processes_fn: Callable[[str], bool] | None = None,
        *,
        db: SessionDB | None = None,
        clock: Any = None,
        mirror_interval: float | None = DEFAULT_MIRROR_INTERVAL,
    ) -> None:
        #: The sessions directory (``sessions.json``, degraded-mode transcripts).
        self.sessions_dir = Path(sessions_dir)
        #: The gateway configuration (key switches, WhatsApp aliases, mirror switch).
        self.config = config or GatewayConfig()
        self._has_active_processes = has_active_processes_fn
        self._clock = clock or _SystemClock()
        self._stripes = [new_rlock() for _ in range(_STRIPES)]
        self._map_lock = threading.Lock()
        self._switch_lock = threading.Lock()
        #: Routing entries, parsed on first use from the JSON text each routing row holds;
        #: the mirror reuses those texts verbatim, so writing it never re-serialises.
        self._entries = EntryMap(parse_entry, self._fetch_entry, self._fetch_all_entries)
        self._degraded_since: str | None = None
        self._stale_db: SessionDB | None = None
        self._closed = False
        self._loaded = False
        self._transcripts = JsonlTranscripts(self.sessions_dir)
        try:
            self.sessions_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.error(
                "cannot create %s (%s); sessions will not survive a restart", self.sessions_dir, exc
            )
        self._owns_db = db is None
        failure = None
        if db is None:
            try:
                db = SessionDB(self.sessions_dir.parent / "state.db")
            except (StoreError, OSError) as exc:
                failure = exc
        #: The canonical database, or ``None`` in degraded mode.
        self.db: SessionDB | None = db
        self._backend: Any = db if db is not None else DegradedBackend(self._transcripts)
        self._mirror = MirrorWriter(
            self.sessions_dir / MIRROR_NAME, self._mirror_document, interval=mirror_interval
        )
        if failure is not None:
            self._announce_degraded(failure)
        self._load()

    # -- small helpers ----------------------------------------------------------------------

    @property
    def degraded(self) -> bool:
        """Whether the store runs without SQLite (routing from ``sessions.json``)."""
        return self.db is None

    def _ts(self) -> float:
        return float(self._clock.time())

    def _now(self) -> datetime:
        return utc_now(self._clock)

    def _key_lock(self, key: str) -> threading.RLock:
        return self._stripes[zlib.crc32(key.encode("utf-8")) % _STRIPES]

    @contextlib.contextmanager
    def _all_keys(self) -> Iterator[None]:
        held = 0
        try:
            for lock in self._stripes:  # a plain loop: an exit stack costs 3x more here
                lock.acquire()
                held += 1
            yield
        finally:
            for lock in reversed(self._stripes[:held]):
                lock.release()

    def _mirror_document(self) -> str:
        with self._map_lock:
            since = self._degraded_since
        try:
            texts = self._entries.texts()
        except StoreError as exc:  # never switch modes from inside the mirror's flush
            raise OSError(f"cannot read the routing rows ({exc})") from exc
        return render_mirror_text(texts, since)

    def _fetch_entry(self, key: str) -> str | None:
        """One routing row's text from the database (the entry map's lazy read)."""
        backend = self._backend  # one snapshot: the database, or the degraded backend
        if not isinstance(backend, SessionDB):
            with self._switch_lock:  # a switch in progress fills the map first
                pass
            raise NotFetched(key)
        try:
            return backend.routing_entry(key)
        except StoreUnavailableError as exc:
            self._switch_to_degraded(exc, backend)  # completes the map if it can
            raise NotFetched(key) from exc

    def _fetch_all_entries(self) -> list[tuple[str, str]]:
        """Every routing row's text from the database (for the mirror and bulk passes);
        raises ``StoreError`` when it cannot be read. Degraded: all texts are in memory."""
        backend = self._backend
        return backend.load_routing() if isinstance(backend, SessionDB) else []

    def _complete_entries(self, db: SessionDB | None) -> None:
        """Before running without the database, read every routing text not yet in memory:
        from the failing database if it still reads, else from ``sessions.json``."""
        missing = self._entries.fill({})
        if not missing:
            return
        if db is not None:
            try:
                missing = self._entries.fill(dict(db.load_routing()))
            except StoreError:
                pass
        if missing:
            mirror = read_mirror(self.sessions_dir / MIRROR_NAME, now=self._ts())
            missing = self._entries.fill({
                k: to_json(v) for k, v in mirror.entries.items()
                if not str(k).startswith("_") and isinstance(v, dict)})
        if missing:
            log.error("%d routing entries could not be read from state.db or %s; those "
                      "sessions start fresh at their next message", missing, MIRROR_NAME)

    def _mirror_changed(self) -> None:
        if self.degraded:
            self._mirror.mark_dirty()
            self._mirror.flush()
        elif self.config.write_sessions_json:
            self._mirror.mark_dirty()

    def _announce_degraded(self, exc: BaseException) -> None:
        self._degraded_since = isoformat(self._now())
        log.warning(
            "state.db cannot be used (%s): running in DEGRADED mode. Routing is kept in %s "
            "(written on every change), transcripts in <session_id>%s files; the inbox and "
            "delivery ledger are in memory only. Fix the database and restart to leave this "
            "mode.",
            exc, self.sessions_dir / MIRROR_NAME, SUFFIX,
        )  # fmt: skip

    def _switch_to_degraded(self, exc: BaseException, failed_backend: Any) -> None:
        with self._switch_lock:
            if self._backend is not failed_backend:
                return
            self._stale_db, self.db = self.db, None
            self._backend = DegradedBackend(self._transcripts, previous=self._stale_db)
            self._announce_degraded(exc)
            if self._loaded:
                self._complete_entries(self._stale_db)
        self._mirror.mark_dirty()
        if self._loaded:  # during loading the entries are not in memory yet: flushed after
            self._mirror.flush()

    def _apply(self, ops: list[Any]) -> list[Any]:
        backend = self._backend
        try:
            return backend.apply(ops)
        except StoreUnavailableError as exc:
            return self._fail_over(exc, backend, ops)

    def _fail_over(self, exc: StoreUnavailableError, backend: Any, ops: list[Any]) -> list[Any]:
        """Switch away from the failed ``backend`` and apply ``ops`` in degraded mode."""
        self._switch_to_degraded(exc, backend)
        return self._backend.apply(ops)

    def _apply_later(self, ops: list[Any], on_done: Callable[[], None]) -> None:
        """Apply ``ops`` without waiting (routing is never among them); ``on_done()`` once
        they are durable or have failed (logged). A database that fails is switched away
        from and the ops re-applied in degraded mode, off the caller and off the hub."""
        backend = self._backend
        later = getattr(backend, "apply_later", None)
        if later is None:
            try:
                self._apply(ops)
            except Exception:  # noqa: BLE001 - logged; on_done is the only report
                log.exception("a deferred write failed")
            on_done()
            return

        def finished(ok: bool, value: Any) -> None:
            if ok or not isinstance(value, StoreUnavailableError):
                if not ok:
                    log.error("a deferred write failed: %s", value)
                on_done()
                return

            def fall_back() -> None:  # may block: not in the hub's callback
                try:
                    self._fail_over(value, backend, ops)
                except Exception:  # noqa: BLE001 - logged; the caller is gone
                    log.exception("a deferred write failed in degraded mode too")
                finally:
                    on_done()

            spawn(fall_back, "deferred-write")

        try:
            later(ops, finished)
        except StoreError as exc:  # closed meanwhile
            finished(False, exc)

    def _commit(
        self, ops: list[Any], *, put: list[SessionEntry] = (), delete: list[str] = ()
    ) -> list[Any]:
        """Apply ``ops`` plus routing upserts/deletes as one transaction, then publish."""
        rows = [(entry, to_json(entry.to_dict())) for entry in put]
        all_ops = list(ops) + [
            PutRouting(e.session_key, text, epoch(e.updated_at) if e.updated_at else self._ts())
            for e, text in rows
        ]
        if delete:
            all_ops.append(DeleteRouting(tuple(delete)))
        results = self._apply(all_ops) if all_ops else []
        with self._map_lock:
            for entry, text in rows:
                self._entries.put(entry.session_key, entry, text)
            for key in delete:
                self._entries.pop(key)
        if rows or delete:
            self._mirror_changed()
        return results

    def _create_op(self, entry: SessionEntry) -> CreateSession:
        origin = entry.origin.to_dict() if entry.origin is not None else None
        started = epoch(entry.created_at) if entry.created_at else self._ts()
        return CreateSession(entry.session_id, entry.session_key, origin, started)

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        mirror = read_mirror(self.sessions_dir / MIRROR_NAME, now=self._ts())
        mirror_wins = mirror.degraded_since is not None
        keys: dict[str, None] = {}
        texts: dict[str, str] = {}
        if self.db is not None:
            try:
                if mirror_wins:  # every row is compared with the (newer) mirror
                    texts = dict(self.db.load_routing())
                else:  # keys only, plus the rows recovery needs; the rest on first use
                    keys = self.db.load_routing_keys()
                    texts = dict(self.db.load_routing_flagged())
            except StoreUnavailableError as exc:
                self._switch_to_degraded(exc, self._backend)
                keys, texts = {}, {}
        known: dict[str, Any] = texts if mirror_wins else keys
        added, skipped = mirror_additions(known, mirror.entries, mirror_wins=mirror_wins)
        for key, reason in skipped:
            log.warning("skipping session entry %r: %s", key, reason)
        # Database rows stay text until used; entries taken from the mirror are parsed
        # now, serialised and committed.
        for key, entry in added.items():
            texts[key] = to_json(entry.to_dict())
        with self._map_lock:
            self._entries.load(keys, texts, added)
        if self.db is not None and added:
            restored = list(added.values())
            log.warning("restoring %d routing entries from %s", len(restored), MIRROR_NAME)
            self._commit([self._create_op(e) for e in restored], put=restored)
        if self.db is not None:
            self._import_jsonl_transcripts()
        elif self._stale_db is not None:  # the database failed while loading
            self._complete_entries(self._stale_db)
        self._loaded = True
        if self.degraded or self.config.write_sessions_json:
            self._mirror.mark_dirty()
        if self.degraded:
            self._mirror.flush()

    def _import_jsonl_transcripts(self) -> None:
        """Move transcripts written in degraded mode into the database (idempotent)."""
        for session_id in self._transcripts.session_ids():
            try:
                validate_session_id(session_id)
                have = {
                    (m["role"], m["content"], m["timestamp"])
                    for m in self.db.load_messages(session_id)
                }
                ops = []
                for record in self._transcripts.records(session_id):
                    msg = normalize_message(record, self._ts())
                    if (msg["role"], msg["content"], msg["timestamp"]) not in have:
                        ops.append(
                            AppendMessage(
                                session_id,
                                msg,
                                record.get("turn_token"),
                                bool(record.get("is_reply")),
                            )
                        )
                if ops:
                    self.db.apply(ops)
                path = self._transcripts.path(session_id)
                os.replace(path, path.with_name(path.name + ".imported"))
                log.warning("imported %d messages of %s from %s", len(ops), session_id, path)
            except (StoreError, ValueError, OSError) as exc:
                log.warning("cannot import transcript %s%s: %s", session_id, SUFFIX, exc)

    def statistics(self) -> StoreStatistics:
        """Counts and flags describing the store now."""
        return StoreStatistics(
            len(self._entries), self.degraded, self._mirror.dirty, self._mirror.writes,
            self._entries.parsed,
        )

    # -- lifecycle --------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write ``sessions.json`` now if it has pending changes; ``True`` when up to date."""
        return self._mirror.flush()

    def close(self) -> None:
        """Flush the mirror and close the database if this store opened it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._mirror.close(flush=self.degraded or self.config.write_sessions_json)
        if self._owns_db:
            for db in (self.db, self._stale_db):
                if db is not None:
                    with contextlib.suppress(StoreError):
                        db.close()
