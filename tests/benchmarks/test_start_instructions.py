"""``scripts/start_instructions.py``: clear refusals before anything runs under callgrind."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("start_instructions")


def test_without_valgrind_it_says_so(script, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert script.main([]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
@pytest.mark.parametrize("args, says", [
    (["--markers", "1"], "--markers: at least 2 and at most --sessions"),
    (["--sessions", "10", "--markers", "20"], "--markers: at least 2 and at most --sessions"),
])
def test_bad_sizes_are_refused(script, capsys, args, says):
    with pytest.raises(SystemExit):
        script.main(args)
    assert says in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_folder_that_is_no_checkout_is_refused(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main([str(tmp_path)])
    assert "is not a checkout of this project" in capsys.readouterr().err
