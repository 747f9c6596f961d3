"""``scripts/http_instructions.py``: its runs per load, clear refusals (one turn from two
runs: ``test_callgrind``)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("http_instructions")


def test_every_load_has_its_raw_bound_with_the_same_runs(script):
    for name in ("long-poll", "sse"):
        assert script.RUNS[f"{name}-raw"] == script.RUNS[name]
        (size_a, messages_a), (size_b, messages_b) = script.RUNS[name]
        assert size_a * messages_a < size_b * messages_b


def test_without_valgrind_it_says_so(script, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert script.main([]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_tree_that_is_no_checkout_is_refused(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main([str(tmp_path)])
    assert "is not a checkout of this project" in capsys.readouterr().err
