"""A transcript's tail is read without reading the transcript (``GET /v1/sessions/<key>``
shows the last messages of sessions that may hold thousands)."""

from __future__ import annotations

from hermes_actors.store.backends.sqlite import db as sqlite_db
from hermes_actors.store.backends.sqlite.db import SessionDB

from .conformance.ops import SID, T0, message, session


def test_sqlite_reads_only_the_tail_rows(tmp_path, monkeypatch):
    backend = SessionDB(tmp_path / "state.db")
    try:
        backend.apply([session(), *(message(f"m{n}", ts=T0 + n) for n in range(3000))])
        built = []
        real = sqlite_db.public_message

        def counting(*args, **kwargs):
            built.append(args[1])
            return real(*args, **kwargs)

        monkeypatch.setattr(sqlite_db, "public_message", counting)
        tail = backend.load_tail(SID, 5)
        assert [m["content"] for m in tail] == ["m2995", "m2996", "m2997", "m2998", "m2999"]
        assert len(built) == 5, f"{len(built)} rows read for a tail of 5"
    finally:
        backend.close()
