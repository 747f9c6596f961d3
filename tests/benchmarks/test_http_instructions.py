"""``scripts/http_instructions.py``: instructions per HTTP turn from two runs, clear refusals."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("http_instructions")


def test_one_turn_is_the_difference_over_the_extra_turns(script):
    assert script.per_turn((300, 500 + 300 * 7), (900, 500 + 900 * 7)) == 7
    with pytest.raises(ValueError):
        script.per_turn((900, 1), (300, 2))


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
