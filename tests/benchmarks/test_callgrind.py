"""``benchmarks.callgrind``: the pieces the instruction scripts share (one turn from two
runs, the check of the checkouts to measure), and the refusals every script makes through
them before anything runs under callgrind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.callgrind import checkouts, per_turn, script_parser

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["http_instructions", "start_instructions", "turn_instructions"]


def test_one_turn_is_the_difference_over_the_extra_turns():
    # start-up and shutdown (the fixed 800) cancel out
    assert per_turn((3000, 800 + 3000 * 5), (9000, 800 + 9000 * 5)) == 5
    with pytest.raises(ValueError):
        per_turn((9000, 1), (3000, 2))
    with pytest.raises(ValueError):
        per_turn((300, 1), (300, 2))


def test_the_checkouts_are_this_one_then_the_others_each_checked(tmp_path, capsys):
    parser = script_parser("Counts something.\n\nMore words.")
    args = parser.parse_args([str(ROOT)])
    assert parser.description == "Counts something."
    assert checkouts(parser, ROOT, args.trees) == [ROOT, ROOT]
    with pytest.raises(SystemExit) as refused:
        checkouts(parser, ROOT, [tmp_path])
    assert refused.value.code == 2
    assert f"{tmp_path} is not a checkout of this project" in capsys.readouterr().err


@pytest.mark.parametrize("name", SCRIPTS)
def test_without_valgrind_a_script_says_so(load_script, name, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda program: None)
    assert load_script(name).main([]) == 2
    assert capsys.readouterr().err == f"{name}: valgrind is not installed (apt install valgrind)\n"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_refuses_a_folder_that_is_no_checkout(load_script, name, tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_script(name).main([str(tmp_path)])
    assert "is not a checkout of this project" in capsys.readouterr().err
