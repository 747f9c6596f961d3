"""``scripts/turn_instructions.py``: instructions per turn from two sizes, clear refusals."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("turn_instructions")


def test_one_turn_is_the_difference_over_the_extra_turns(script):
    # start-up and shutdown (the fixed 800) cancel out
    assert script.per_turn((3000, 800 + 3000 * 5), (9000, 800 + 9000 * 5)) == 5
    with pytest.raises(ValueError):
        script.per_turn((9000, 1), (3000, 2))


def test_without_valgrind_it_says_so(script, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert script.main([]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_bad_sizes_and_trees_are_refused(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main(["--sessions", "300", "100"])
    assert "SMALL must be positive and below LARGE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main([str(tmp_path)])
    assert "is not a checkout of this project" in capsys.readouterr().err
