"""The mirror assembled from each entry's JSON text is the same document as the dict form,
and each entry's text is exactly its encoded dict."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_actors.model.timeutil import from_epoch, isoformat
from hermes_actors.store.backends.files.mirror import (
    ENTRIES_PER_CHUNK,
    mirror_chunks,
    render_mirror,
    render_mirror_rows,
    render_mirror_text,
)
from hermes_actors.store.routing import FLAG_FIELDS, RoutingFlags, full_entry_text


class TestMirrorText:
    """``render_mirror_text`` parses to exactly what ``render_mirror`` builds, in order."""

    ROWS = {
        "agent:main:telegram:dm:1": {"session_id": "a", "display_name": "Zoë \"quoted\""},
        "agent:main:discord:group:ü/7": {"session_id": "b", "metadata": {"k": [1, None]}},
    }

    def test_same_document(self):
        texts = {k: json.dumps(v, ensure_ascii=False) for k, v in self.ROWS.items()}
        for since in (None, "2026-01-01T00:00:00+00:00"):
            text = render_mirror_text(texts, since)
            assert json.loads(text) == render_mirror(self.ROWS, since)
            assert list(json.loads(text)) == list(render_mirror(self.ROWS, since))

    def test_a_degraded_mirror_lists_the_keys_it_changed_third(self):
        texts = {k: json.dumps(v, ensure_ascii=False) for k, v in self.ROWS.items()}
        since, changed = "2026-01-01T00:00:00+00:00", ["agent:main:telegram:dm:1"]
        doc = json.loads(render_mirror_text(texts, since, changed))
        assert doc == render_mirror(self.ROWS, since, changed)
        assert list(doc)[:3] == ["_README", "_degraded_since", "_degraded_changed"]
        assert doc["_degraded_changed"] == changed

    def test_empty_mirror_is_an_object_with_the_readme(self):
        assert list(json.loads(render_mirror_text({}))) == ["_README"]

    def test_chunks_are_the_same_document(self):
        rows = {f"agent:main:telegram:dm:{n}": (json.dumps({"session_id": f"s{n}"}),
                                                RoutingFlags(updated_at=float(n)))
                for n in range(ENTRIES_PER_CHUNK * 2 + 3)}
        for since in (None, "2026-01-01T00:00:00+00:00"):
            chunks = list(mirror_chunks(rows, since))
            assert len(chunks) == 3  # (head + 1,026 entries + close) in pieces of 512
            assert b"".join(chunks).decode() == render_mirror_rows(rows, since)
            assert list(json.loads(b"".join(chunks)))[-1] == f"agent:main:telegram:dm:{len(rows) - 1}"

    def test_one_entry_a_line(self):
        texts = {k: json.dumps(v) for k, v in self.ROWS.items()}
        assert len(render_mirror_text(texts).splitlines()) == 2 + 1 + len(texts)


class TestFullEntryText:
    """An entry's mirror text is its stored text with the flags written in, byte for byte
    as ``to_dict()`` JSON-encoded would give them."""

    @staticmethod
    def reference(text: str, flags: RoutingFlags) -> str:
        data = json.loads(text)
        for name, value in flags._asdict().items():
            data[name] = (isoformat(from_epoch(value))
                          if name in ("active_turn_started_at", "updated_at")
                          and value is not None else value)
        return json.dumps(data, ensure_ascii=False)

    @given(
        fields=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=3),
        token=st.none() | st.text(max_size=12),
        started=st.none() | st.floats(0, 4e9),
        booleans=st.tuples(st.booleans(), st.booleans(), st.booleans()),
        updated=st.none() | st.floats(0, 4e9),
    )
    @settings(max_examples=200, deadline=None)
    def test_same_text_as_encoding_the_dict(self, fields, token, started, booleans, updated):
        fields = {k: v for k, v in fields.items() if k not in FLAG_FIELDS}
        text = json.dumps(fields, ensure_ascii=False)
        flags = RoutingFlags(token, started, *booleans, updated)
        assert full_entry_text(text, flags) == self.reference(text, flags)

    def test_a_text_that_is_not_an_object_is_refused(self):
        with pytest.raises(ValueError, match="JSON object"):
            full_entry_text("[1]", RoutingFlags())
