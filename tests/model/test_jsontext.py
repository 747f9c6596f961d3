"""``to_json`` writes exactly what ``json.dumps(value, ensure_ascii=False)`` writes."""

from __future__ import annotations

import json
import math

import pytest

from hermes_actors.model.jsontext import to_json

VALUES = [
    "plain", 'quo"te \\ back\nslash é 山田 👨\u200d👩', "", 0, -7, 2**70, 1.5, 1e-300,
    math.inf, -math.inf, None, True, False, [], {}, [1, [2, [3]]], (1, "two"),
    {"nested": {"list": [None, {"x": 1.25}]}, "ü": "ß"}, {7: "int key", 2.5: "float key",
                                                        None: "null key", False: "bool key"},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_same_text_as_json_dumps(value):
    assert to_json(value) == json.dumps(value, ensure_ascii=False)


def test_nan_is_written_as_json_dumps_writes_it():
    assert to_json(math.nan) == json.dumps(math.nan, ensure_ascii=False) == "NaN"


@pytest.mark.parametrize("value", [{"a": object()}, {(1, 2): "tuple key"}, {1, 2}])
def test_same_error_as_json_dumps(value):
    with pytest.raises(TypeError) as ours:
        to_json(value)
    with pytest.raises(TypeError) as theirs:
        json.dumps(value, ensure_ascii=False)
    assert str(ours.value) == str(theirs.value)


def test_circular_reference_is_a_value_error():
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        to_json(loop)


def test_a_failed_call_leaves_nothing_behind_for_the_next():
    value = {"fine": [1], "bad": object()}
    with pytest.raises(TypeError):
        to_json(value)
    del value["bad"]
    # The same dict again: a circular-reference mark left by the failed call would reject it.
    assert to_json(value) == '{"fine": [1]}'
