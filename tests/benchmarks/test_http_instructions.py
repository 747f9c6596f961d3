"""``scripts/http_instructions.py``: its runs per load (one turn from two runs and the
refusals the scripts share: ``test_callgrind``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("http_instructions")


def test_every_load_has_its_raw_bound_with_the_same_runs(script):
    for name in ("long-poll", "sse"):
        assert script.RUNS[f"{name}-raw"] == script.RUNS[name]
        (size_a, messages_a), (size_b, messages_b) = script.RUNS[name]
        assert size_a * messages_a < size_b * messages_b
