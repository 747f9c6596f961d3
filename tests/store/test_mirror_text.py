"""The mirror assembled from each entry's JSON text is the same document as the dict form."""

from __future__ import annotations

import json

from hermes_actors.store.backends.files.mirror import render_mirror, render_mirror_text


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

    def test_empty_mirror_is_an_object_with_the_readme(self):
        assert list(json.loads(render_mirror_text({}))) == ["_README"]

    def test_one_entry_a_line(self):
        texts = {k: json.dumps(v) for k, v in self.ROWS.items()}
        assert len(render_mirror_text(texts).splitlines()) == 2 + 1 + len(texts)
