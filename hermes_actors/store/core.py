"""``StoreCore``: the persistence plumbing the parts of :class:`~hermes_actors.store.SessionStore`
share: the backend, the routing entries in memory, the key locks, commits and fail-over.

Shape of a change: a part takes the key's lock and decides with a pure function
(:mod:`~hermes_actors.store.lifecycle`); :meth:`StoreCore.commit` applies the resulting
operations as one backend transaction, then publishes the new entries in memory and marks
the mirror dirty. Memory is updated only after the backend accepted the change, so readers
never see state that a crash would lose. A changed entry is written as its flag columns
alone when nothing else of it changed (a turn's start and end), else as a whole row
(:mod:`~hermes_actors.store.routing`). Locks are striped by key: changes to one key are
serialised (concurrent first messages create one entry and one ``sessions`` row), changes
to different keys are not, which leaves room for group commit in the backend.

Applying ops, and switching to degraded mode (a local database) or reporting an outage (a
database server) when the backend fails, is the part :class:`~hermes_actors.store.failover.
FailOver` (the base class); importing what degraded mode left at the next start is
:mod:`~hermes_actors.store.degraded_import`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from hermes_actors._green import brief_lock, new_rlock
from hermes_actors.cluster.shards import ShardSet
from hermes_actors.errors import (
    StoreError,
    StoreUnavailableError,
    StoreUnreachableError,
)
from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.timeutil import SystemClock, epoch, isoformat, utc_now
from hermes_actors.store.backends.files.backend import FilesBackend
from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
from hermes_actors.store.backends.files.mirror import (
    MIRROR_NAME,
    MirrorWriter,
    mirror_chunks,
    read_mirror,
)
from hermes_actors.store.degraded_import import import_degraded_journal, import_jsonl_transcripts
from hermes_actors.store.entrymap import EntryMap, NotFetched
from hermes_actors.store.factory import open_backend
from hermes_actors.store.failover import FailOver
from hermes_actors.store.fencing import ShardFence
from hermes_actors.store.loader import mirror_additions
from hermes_actors.store.ops import (
    CreateSession,
    DeleteConversations,
    DeleteRouting,
    Op,
    OutboxAppend,
    PutRouting,
    SetRoutingFlags,
)
from hermes_actors.store.protocol import Backend, ShardReads
from hermes_actors.store.routing import (
    RoutingRow,
    entry_text,
    flags_of,
    parse_row,
    same_text,
)

__all__ = ["DEFAULT_MIRROR_INTERVAL", "StoreCore", "StoreStatistics", "SystemClock"]

log = logging.getLogger("hermes_actors.store")

#: Seconds between coalesced ``sessions.json`` writes (SQLite mode).
DEFAULT_MIRROR_INTERVAL = 5.0
#: Key locks, striped by hash. A turn holds its key's stripe while its routing write
#: commits (milliseconds under load), so with many turns in flight a small table makes
#: unrelated sessions queue behind each other: at 64 stripes that contention cost a
#: quarter of the throughput at 10,000 sessions. 4,096 gevent locks take ~0.9 MB.
_STRIPES = 4096


class StoreStatistics(NamedTuple):
    """A snapshot of the store, for ``stats()`` and metrics."""

    #: Routing entries held.
    sessions: int
    #: Whether the store runs without its database.
    degraded: bool
    #: Whether ``sessions.json`` has changes not yet written.
    mirror_dirty: bool
    #: ``sessions.json`` writes so far.
    mirror_writes: int
    #: Routing entries parsed from their stored JSON so far (the rest wait for first use).
    entries_parsed: int = 0


class StoreCore(FailOver):
    """Backend choice, loading, commits, the mirror and degraded switching (module doc).

    ``sessions_dir`` holds ``sessions.json`` (and JSONL transcripts in degraded mode); its
    parent is the home. With ``backend=None`` the store opens the one ``config.store``
    names and closes it in :meth:`close`; a given backend is used but never closed.
    ``clock`` is any object with ``time()`` and ``monotonic()``. ``mirror_interval`` is the
    coalescing period of the mirror (``None``: no timer; written on :meth:`flush` and
    :meth:`close`).
    """

    def __init__(self, sessions_dir: str | os.PathLike[str], config: Any, *,
                 backend: Backend | None, clock: Any,
                 mirror_interval: float | None,
                 on_outage: Callable[[BaseException], None] | None = None) -> None:
        #: The sessions directory (``sessions.json``, degraded-mode transcripts).
        self.sessions_dir = Path(sessions_dir)
        #: The home: the parent of the sessions directory.
        self.home = self.sessions_dir.parent
        #: The gateway configuration.
        self.config = config
        self.clock = clock = clock or SystemClock()
        #: ``ts()``: now, epoch seconds; ``now()``: now, an aware UTC datetime; both from
        #: the store's clock. Read about eight times a turn: on the system clock they are
        #: C calls, not a Python frame around each.
        if type(clock) is SystemClock:
            self.ts: Callable[[], float] = clock.time
            self.now: Callable[[], datetime] = functools.partial(datetime.now, timezone.utc)
        else:
            self.ts = lambda: float(clock.time())
            self.now = lambda: utc_now(clock)
        self._stripes = [new_rlock() for _ in range(_STRIPES)]
        self._map_lock = brief_lock()
        super().__init__(on_outage)
        #: A cluster node's fence on its writes (``None``: not a cluster node, no fence).
        self.fence: ShardFence | None = None
        #: A cluster node's notice of a new inbox row (``session_key -> NotifyShard``),
        #: added to each accept (``None``: not a cluster node).
        self.announce: Callable[[str], Op] | None = None
        #: A cluster node's notice of an outbox append (``OutboxAppend -> NotifyOutbox``),
        #: added to each append (``None``: not a cluster node).
        self.outbox_notice: Callable[[OutboxAppend], Op] | None = None
        #: Routing entries, parsed on first use from the rows the backend holds; the
        #: mirror reuses the stored texts, so writing it never re-serialises an entry.
        self.entries = EntryMap(self._fetch_row, self._fetch_all_rows)
        self._closed = False
        self._entries_loaded = False
        #: Keys whose conversations are being deleted: left out of the mirror (:meth:`forget`).
        self._withheld: frozenset[str] = frozenset()
        self.transcripts = JsonlTranscripts(self.sessions_dir)
        try:
            self.sessions_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.error("cannot create %s (%s); sessions will not survive a restart",
                      self.sessions_dir, exc)
        #: A backend the caller gave (used, never closed).
        self._given = backend
        failure: BaseException | None = None
        if backend is None:
            try:
                backend = open_backend(self.home, config)
            except StoreUnreachableError:
                raise  # a database server: no local stand-in (see the error's docstring)
            except (StoreError, OSError) as exc:
                failure = exc
        #: Backends that failed and were switched away from (closed at the end).
        self._failed: list[Backend] = []
        self.backend: Backend = backend if backend is not None else FilesBackend(
            self.home, self.transcripts, since=isoformat(self.now()))
        #: The id of the gateway node this store belongs to (stable per home).
        self.node_id = self.backend.node_id()
        self._mirror = MirrorWriter(self.sessions_dir / MIRROR_NAME, self._mirror_document,
                                    interval=mirror_interval if not self.degraded else None)
        if failure is not None:
            self._announce_degraded(failure)
        self._load()

    # -- small helpers ----------------------------------------------------------------------

    @property
    def degraded(self) -> bool:
        """Whether the store runs on the files backend (routing from ``sessions.json``)."""
        return self.backend.kind == "files"

    def key_lock(self, key: str) -> Any:
        """The (striped, re-entrant) lock of ``key``."""
        return self._stripes[zlib.crc32(key.encode("utf-8")) % _STRIPES]

    @contextlib.contextmanager
    def all_keys(self) -> Iterator[None]:
        """Hold every key lock (passes over all entries)."""
        held = 0
        try:
            for lock in self._stripes:  # a plain loop: an exit stack costs 3x more here
                lock.acquire()
                held += 1
            yield
        finally:
            for lock in reversed(self._stripes[:held]):
                lock.release()

    def _mirror_document(self) -> Callable[[], Iterable[bytes]]:
        """A snapshot of the rows (immutable tuples), rendered by the mirror writer off the
        hub."""
        try:
            rows = self.entries.rows()
        except StoreError as exc:  # never switch modes from inside the mirror's flush
            raise OSError(f"cannot read the routing rows ({exc})") from exc
        withheld = self._withheld
        if withheld:  # conversations being deleted (:meth:`forget`)
            rows = {key: row for key, row in rows.items() if key not in withheld}
        return functools.partial(mirror_chunks, rows)

    # -- lazy routing reads -----------------------------------------------------------------

    def _fetch_row(self, key: str) -> RoutingRow | None:
        """One routing row from the backend (the entry map's lazy read)."""
        backend = self.backend  # one snapshot: a switch may happen meanwhile
        try:
            return backend.routing_row(key)
        except StoreUnavailableError as exc:
            self._switch_to_degraded(exc, backend)  # completes the map if it can
            raise NotFetched(key) from exc

    def _fetch_all_rows(self) -> list[RoutingRow]:
        """Every routing row from the backend (for the mirror and bulk passes); raises
        ``StoreError`` when they cannot be read."""
        return self.backend.routing_rows()

    # -- commits ----------------------------------------------------------------------------

    def commit(self, ops: list[Op], *, put: list[SessionEntry] | tuple[()] = (),
               delete: list[str] | tuple[()] = (), whole: bool = False) -> list[Any]:
        """Apply ``ops`` plus routing upserts/deletes as one transaction, then publish.

        An entry that differs from the published one in its flags only is written as its
        flag columns (the common case: a turn's start and end); any other, and every entry
        with ``whole``, as a whole row.
        """
        rows = []
        routing: list[Op] = []
        for entry in put:
            key = entry.session_key
            flags = flags_of(entry)
            old_text = None if whole else self.entries.text_of(key)
            old = self.entries.get(key) if old_text is not None else None
            if old is not None and old_text is not None and same_text(old, entry):
                text = old_text
                routing.append(SetRoutingFlags(key, *flags))
            else:
                text = entry_text(entry)
                routing.append(PutRouting(key, text, *flags))
            rows.append((entry, text, flags))
        all_ops = [*ops, *routing]
        if delete:
            all_ops.append(DeleteRouting(tuple(delete)))
        results = self.apply(all_ops) if all_ops else []
        with self._map_lock:
            for entry, text, flags in rows:
                self.entries.put(entry.session_key, entry, text, flags)
            for key in delete:
                self.entries.pop(key)
        if (rows or delete) and not self.degraded and self.config.write_sessions_json:
            self._mirror.mark_dirty()
        return results

    def forget(self, ops: list[Op], keys: Iterable[str], *,
               before_commit: Callable[[], None] | None = None) -> list[Any]:
        """Apply ``ops``, a delete of ``keys``' conversations (the callers hold their key
        locks), so that a crash anywhere leaves all of it or none of it, then forget their
        entries. ``sessions.json`` is rewritten without the keys *before* the transaction:
        a mirror entry the database lacks is restored at the next start, so a mirror still
        holding a key after the commit would bring the deleted conversation's routing back,
        while a mirror lacking a key the database still has is simply rewritten.
        ``before_commit()`` runs between the two (a crash point of the tests)."""
        doomed = frozenset(keys)
        mirrored = not self.degraded and self.config.write_sessions_json
        with self._map_lock:
            self._withheld = self._withheld | doomed
        try:
            if mirrored:
                self._mirror.mark_dirty()
                if not self._mirror.flush():
                    raise StoreError(f"cannot rewrite {MIRROR_NAME} without the deleted "
                                     "conversations (see the warning above); nothing deleted")
            if before_commit is not None:
                before_commit()
            results = self.apply(ops)
        except BaseException:
            with self._map_lock:
                self._withheld = self._withheld - doomed
            if mirrored:
                self._mirror.mark_dirty()  # the keys are back in it at the next write
            raise
        with self._map_lock:
            for key in doomed:
                self.entries.pop(key)
            self._withheld = self._withheld - doomed
        return results

    def refresh_entries(self, belongs: Callable[[str], bool]) -> int:
        """:meth:`SessionStore.refresh_entries`: the keys ``belongs`` picks are read from the
        backend again and replace what memory held of them."""
        def question(backend: Backend) -> list[RoutingRow]:
            if isinstance(belongs, ShardSet) and isinstance(backend, ShardReads):
                return backend.shard_routing_rows(belongs.total, sorted(belongs.wanted))
            return [row for row in backend.routing_rows() if belongs(row.session_key)]

        rows = self.read(question)
        with self._map_lock:
            return self.entries.replace_where(belongs, rows)

    def stored_entries(self, key: str | None = None) -> list[SessionEntry]:
        """The entries as the backend holds them now (every one, or ``key``'s), read and
        parsed without touching memory: another writer (a cluster node) may own them."""
        if key is None:
            rows = self.read(lambda backend: backend.routing_rows())
        else:
            row = self.read(lambda backend: backend.routing_row(key))
            rows = [] if row is None else [row]
        out = []
        for row in rows:
            try:
                out.append(parse_row(row.session_key, row.entry, row.flags))
            except ValueError:
                continue
        return out

    def create_op(self, entry: SessionEntry) -> CreateSession:
        """The ``sessions`` row of a new entry."""
        origin = entry.origin.to_dict() if entry.origin is not None else None
        started = epoch(entry.created_at) if entry.created_at else self.ts()
        return CreateSession(entry.session_id, entry.session_key, origin, started,
                             entry.prev_session_id)

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        backend = self.backend
        if self.degraded:  # the files backend read sessions.json itself
            self.entries.load(backend.routing_keys(), backend.routing_rows())
            self._entries_loaded = True
            return
        mirror = read_mirror(self.sessions_dir / MIRROR_NAME, now=self.ts())
        mirror_wins = mirror.degraded_since is not None
        try:
            keys = backend.routing_keys()
            # every row is compared with a (newer) degraded mirror; else only the rows
            # recovery needs are read now, the rest on first use
            rows = backend.routing_rows() if mirror_wins else backend.routing_flagged()
        except StoreUnavailableError as exc:
            self._switch_to_degraded(exc, backend)
            self._load()
            return
        known = {row.session_key: row for row in rows} if mirror_wins else keys
        added, skipped = mirror_additions(known, mirror.entries, mirror_wins=mirror_wins,
                                          winners=mirror.changed)
        for key, reason in skipped:
            log.warning("skipping session entry %r: %s", key, reason)
        with self._map_lock:
            self.entries.load(keys, rows, {k: (e, entry_text(e)) for k, e in added.items()})
        self._entries_loaded = True
        if added:
            restored = list(added.values())
            log.warning("restoring %d routing entries from %s", len(restored), MIRROR_NAME)
            # whole rows: the backend lacks them, or holds older ones
            self.commit([self.create_op(e) for e in restored], put=restored, whole=True)
        if self.degraded:  # the restore failed over
            return
        self._finish_deletes(import_degraded_journal(self.backend, self.home, self.node_id))
        import_jsonl_transcripts(self.backend, self.transcripts, self.ts)
        if mirror_wins:
            self._retire_degraded_mirror()
        elif self.config.write_sessions_json:
            self._mirror.mark_dirty()

    def _retire_degraded_mirror(self) -> None:
        """The degraded mirror is imported: its marker must not make it win again at a later
        start. Rewritten now from the database (or, with the mirror off, set aside as
        ``sessions.json.imported``) before anything is served."""
        path = self.sessions_dir / MIRROR_NAME
        try:
            if self.config.write_sessions_json:
                self._mirror.mark_dirty()
                if not self._mirror.flush():
                    raise OSError("the rewrite failed (logged above)")
            else:
                os.replace(path, path.with_name(path.name + ".imported"))
        except OSError as exc:
            log.warning("the imported degraded-mode %s could not be retired (%s): the next "
                        "start compares it with the database again", MIRROR_NAME, exc)

    def _finish_deletes(self, ops: list[Op]) -> None:
        """Conversations degraded mode deleted (``DeleteConversations``, now applied to the
        database as well): a copy of their routing the degraded mirror restored is dropped,
        and transcript files a crash left behind are removed before they could be imported."""
        deletes = [op for op in ops if isinstance(op, DeleteConversations)]
        if not deletes:
            return
        # (a key that got a new session after its delete keeps that one)
        gone = {sid for op in deletes for sid in op.session_ids}
        keys = [key for op in deletes for key in op.session_keys
                if (entry := self.entries.get(key)) is not None and entry.session_id in gone]
        if keys:
            with self._map_lock:
                for key in keys:
                    self.entries.pop(key)
            self.backend.apply([DeleteRouting(tuple(keys))])
        self.transcripts.discard(gone)
        self._mirror.mark_dirty()

    def statistics(self) -> StoreStatistics:
        """Counts and flags describing the store now (``mirror_*``: the coalesced mirror of
        a database; in degraded mode the files backend writes it at every change)."""
        return StoreStatistics(len(self.entries), self.degraded, self._mirror.dirty,
                               self._mirror.writes, self.entries.parsed)

    # -- lifecycle --------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write ``sessions.json`` now if it has pending changes; ``True`` when up to date."""
        if self.degraded:
            return True  # the files backend writes it at every change
        return self._mirror.flush()

    def close(self) -> None:
        """Flush the mirror and close the backends this store opened (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._mirror.close(flush=not self.degraded and self.config.write_sessions_json)
        for backend in (*self._failed, self.backend):
            if backend is not self._given:
                with contextlib.suppress(StoreError):
                    backend.close()
