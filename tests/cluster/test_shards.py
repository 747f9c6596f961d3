"""The shard of a session key: stable (known answers, across processes), in range, spread."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.cluster.shards import MAX_SHARDS, check_shard_count, shard_of

#: Answers that must never change: the mapping is part of every cluster's database.
KNOWN = [
    ("agent:main:telegram:dm:42", 64, 52),
    ("agent:main:telegram:dm:42", 4096, 116),
    ("agent:main:webhook:dm:1", 64, 60),
    ("agent:main:webhook:dm:1", 4096, 2364),
    ("", 64, 2),
    ("", 4096, 1090),
    ("agent:main:whatsapp:group:ünïcødé:7", 7, 5),
    ("agent:main:whatsapp:group:ünïcødé:7", 4096, 3573),
]

keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


class TestShardOf:
    @pytest.mark.parametrize(("key", "shards", "expected"), KNOWN)
    def test_known_answers(self, key, shards, expected):
        assert shard_of(key, shards) == expected

    def test_the_same_in_another_process_with_another_hash_seed(self):
        code = ("from hermes_actors.cluster.shards import shard_of; "
                f"print([shard_of(k, s) for k, s, _ in {KNOWN!r}])")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"PYTHONHASHSEED": "12345"}, check=True).stdout
        assert out.strip() == str([expected for _, _, expected in KNOWN])

    @given(keys, st.integers(1, MAX_SHARDS))
    def test_always_in_range(self, key, shards):
        assert 0 <= shard_of(key, shards) < shards

    def test_keys_spread_over_the_shards(self):
        counts = collections.Counter(shard_of(f"agent:main:webhook:dm:{i}", 64)
                                     for i in range(12_800))
        assert len(counts) == 64
        assert 120 < min(counts.values()) and max(counts.values()) < 280  # mean 200

    @pytest.mark.parametrize("bad", [0, -1, MAX_SHARDS + 1, True, 1.5, "64"])
    def test_a_bad_shard_count_is_refused(self, bad):
        with pytest.raises(ValueError, match="a shard count is an integer from 1 to 4096"):
            check_shard_count(bad)
