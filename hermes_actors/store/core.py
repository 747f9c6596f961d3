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

Degraded mode (§5): if the backend cannot be opened (except a database server that cannot
be reached: :class:`~hermes_actors.errors.StoreUnreachableError` is raised to the host, as
no files in one home can stand in for a shared database), or a read or write still fails after
its retries (:class:`~hermes_actors.errors.StoreUnavailableError`), the store logs one
warning and switches to the :class:`~hermes_actors.store.backends.files.backend.FilesBackend`:
``sessions.json`` becomes canonical and is written after every change, transcripts go to
``<session_id>.jsonl``. The failed write is re-applied there, so it is not lost. On the next
start with a working database the degraded mirror wins over older rows and the JSONL
transcripts are imported.

Outage (a database server, ``Backend.local`` false): when it fails while running there is no
local stand-in either. The failing call raises :class:`~hermes_actors.errors.
StoreUnavailableError` (nothing is written anywhere else), and the first such failure is
reported once to ``on_outage``: the gateway then refuses new messages, and its host replaces
it once the server is back (the standalone process does: :mod:`hermes_actors.process.
standalone`), whose start recovers from the database exactly as after a crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from hermes_actors._green import brief_lock, new_rlock, spawn
from hermes_actors.cluster.shards import ShardSet
from hermes_actors.errors import (
    FencedError,
    StoreError,
    StoreUnavailableError,
    StoreUnreachableError,
)
from hermes_actors.model.entry import SessionEntry, validate_session_id
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.ids import new_id
from hermes_actors.model.timeutil import SystemClock, epoch, isoformat, utc_now
from hermes_actors.store.backends.files.backend import FilesBackend
from hermes_actors.store.backends.files.journal import (
    IMPORTED_JOURNAL,
    JOURNAL_NAME,
    DegradedJournal,
    applied_count,
    import_marker,
)
from hermes_actors.store.backends.files.jsonl import SUFFIX, JsonlTranscripts
from hermes_actors.store.backends.files.mirror import (
    MIRROR_NAME,
    MirrorWriter,
    mirror_chunks,
    read_mirror,
)
from hermes_actors.store.entrymap import EntryMap, NotFetched
from hermes_actors.store.factory import open_backend
from hermes_actors.store.fencing import ShardFence
from hermes_actors.store.loader import mirror_additions
from hermes_actors.store.ops import (
    AcceptEvent,
    AppendMessage,
    ConsumeEvents,
    CreateSession,
    DeleteConversations,
    DeleteRouting,
    ListId,
    NodeValue,
    Op,
    OutboxAppend,
    PutRouting,
    SetRoutingFlags,
)
from hermes_actors.store.protocol import Backend, ShardReads
from hermes_actors.store.routing import (
    NO_FLAGS,
    RoutingRow,
    entry_text,
    flags_from_data,
    flags_of,
    parse_row,
    same_text,
)
from hermes_actors.store.transcript import normalize_message

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


class StoreCore:
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
        self._switch_lock = threading.Lock()
        #: Deferred writes that failed with the database, ``(ops, on_done)`` in submission
        #: order: re-applied in degraded mode before any write submitted after them.
        self._deferred: deque[tuple[list[Op], Callable[[], None]]] = deque()
        self._fallback_lock = new_rlock()
        #: The failure that began an outage of a database server (``None``: no outage).
        self.outage: BaseException | None = None
        self._on_outage = on_outage
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

    # -- degraded mode ----------------------------------------------------------------------

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
        self._import_degraded_journal()
        self._import_jsonl_transcripts()
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

    def _import_degraded_journal(self) -> None:
        """Apply what degraded mode journaled (inbox, ledger, outbox and ``sessions``
        changes), once (see :mod:`~hermes_actors.store.backends.files.journal`)."""
        journal = DegradedJournal(self.home)
        try:
            name, ops = journal.read()
            if name is None:
                return
            done = applied_count(self.backend.node_values(self.node_id).get(IMPORTED_JOURNAL),
                                 name, len(ops))
            if done < len(ops):  # (a degraded run after a crash may have appended more)
                self._check_outbox_cursors(ops[done:])
                # the marker first: a list at the end whose id the database has (ListId)
                # is skipped, with nothing after it
                self.backend.apply([NodeValue(
                    self.node_id, IMPORTED_JOURNAL, import_marker(name, len(ops))),
                    *self._onto_held_events(ops[done:])])
            self._finish_deletes(ops[done:])
            journal.retire()
            log.warning("imported %d changes of degraded mode from %s", len(ops) - done,
                        journal.path)
        except (StoreError, OSError) as exc:
            log.warning("cannot import %s: %s", journal.path, exc)

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
        for op in deletes:
            for session_id in op.session_ids:
                try:
                    self.transcripts.remove(session_id)
                except (OSError, ValueError) as exc:
                    log.warning("cannot remove the transcript file of %s: %s", session_id, exc)
        self._mirror.mark_dirty()

    def _check_outbox_cursors(self, ops: list[Op]) -> None:
        """Say so loudly if degraded mode's outbox cursors are not all above the database's:
        drawn above the clock, they are unless the clock was set back (or a copy of an old
        database came back). They are imported unchanged all the same: never numbered
        anew (a reader would read a reply twice); one a row here already has fails the
        import, which is then retried at every start."""
        cursors = [op.cursor for op in ops if type(op) is OutboxAppend and op.cursor is not None]
        if not cursors:
            return
        head = self.backend.outbox_head()
        if min(cursors) <= head:
            log.error("degraded mode's outbox cursors (from %d) are not above the database's "
                      "highest (%d): was the clock set back? Clients may miss those replies",
                      min(cursors), head)

    def _onto_held_events(self, ops: list[Op]) -> list[Op]:
        """A message degraded mode accepted whose ingress key an unconsumed event of the
        database holds (accepted before the failure, then retried by its client or
        redelivered by its platform) is that event: its consumption in degraded mode (it
        was answered) consumes the database's copy too, which is otherwise replayed and
        answered a second time."""
        keys = {op.ingress_key for op in ops if isinstance(op, AcceptEvent) and op.ingress_key}
        if not keys:
            return ops
        holders = {}
        for _, payload in self.backend.pending_inbox():
            try:
                event = MessageEvent.from_dict(payload)
            except (KeyError, TypeError, ValueError):
                continue
            if event.ingress_key in keys:
                holders[event.ingress_key] = event.event_id
        same = {op.event_id: holders[op.ingress_key] for op in ops
                if isinstance(op, AcceptEvent) and op.ingress_key in holders}
        return [dataclasses.replace(op, event_ids=tuple(same.get(i, i) for i in op.event_ids))
                if isinstance(op, ConsumeEvents) and same.keys() & set(op.event_ids) else op
                for op in ops]

    def _import_jsonl_transcripts(self) -> None:
        """Move transcripts written in degraded mode into the database (idempotent)."""
        for session_id in self.transcripts.session_ids():
            try:
                validate_session_id(session_id)
                have = {
                    (m["role"], m["content"], m["timestamp"])
                    for m in self.backend.load_messages(session_id)
                }
                ops: list[Op] = []
                for record in self.transcripts.records(session_id):
                    msg = normalize_message(record, self.ts())
                    if (msg["role"], msg["content"], msg["timestamp"]) not in have:
                        ops.append(AppendMessage(session_id, msg, record.get("turn_token"),
                                                 bool(record.get("is_reply"))))
                if ops:
                    self.backend.apply(ops)
                path = self.transcripts.path(session_id)
                os.replace(path, path.with_name(path.name + ".imported"))
                log.warning("imported %d messages of %s from %s", len(ops), session_id, path)
            except (StoreError, ValueError, OSError) as exc:
                log.warning("cannot import transcript %s%s: %s", session_id, SUFFIX, exc)

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
