"""``scripts/turn_instructions.py``: clear refusals (one turn from two sizes:
``test_callgrind``)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("turn_instructions")


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
