"""The pure eviction planners of §11, without actors, clocks or threads."""

from __future__ import annotations

from hermes_actors.runtime.eviction import (
    IN_USE,
    PRESSURE_CHECK_GROWTH_BYTES,
    PROTECTED,
    UNPERSISTED,
    CacheItem,
    EvictionPlan,
    Skipped,
    describe_skipped,
    plan_idle,
    plan_lru,
    plan_memory,
    protected_count,
    should_check_pressure,
)


def items(spec: str) -> list[CacheItem]:
    """One item per character, LRU first: ``.`` evictable, ``u`` in use, ``p`` unpersisted.

    Keys are ``k0``, ``k1``, ...; ``last_used`` is the position.
    """
    return [
        CacheItem(f"k{i}", float(i), in_use=c == "u", persisted=c != "p")
        for i, c in enumerate(spec)
    ]


class TestPlanLru:
    """The LRU cap releases the least recently used evictable entries, only as many as needed."""

    def test_under_or_at_cap_releases_nothing(self):
        assert plan_lru(items("..."), 3) == EvictionPlan()
        assert plan_lru([], 1) == EvictionPlan()

    def test_least_recently_used_first(self):
        assert plan_lru(items("....."), 3).victims == ("k0", "k1")

    def test_in_use_and_unpersisted_are_skipped_without_using_up_the_batch(self):
        plan = plan_lru(items("up..."), 4)
        assert plan.victims == ("k2",)
        assert plan.skipped == (Skipped("k0", IN_USE), Skipped("k1", UNPERSISTED))

    def test_nothing_evictable_leaves_the_cache_over_its_cap(self):
        plan = plan_lru(items("uu"), 1)
        assert plan.victims == ()
        assert [s.reason for s in plan.skipped] == [IN_USE, IN_USE]


class TestPlanIdle:
    """The idle TTL releases every evictable entry unused for the TTL, counted from last use."""

    def test_only_entries_idle_for_the_ttl(self):
        # last_used 0..4; at now=10 with ttl 7, entries used at 0..3 are idle (10-3 >= 7).
        assert plan_idle(items("....."), now=10, idle_ttl=7).victims == ("k0", "k1", "k2", "k3")

    def test_recently_used_entries_survive(self):
        recent = [CacheItem("old", 0.0), CacheItem("fresh", 99.0)]
        assert plan_idle(recent, now=100, idle_ttl=10).victims == ("old",)

    def test_idle_but_in_use_or_unpersisted_are_kept_and_reported(self):
        plan = plan_idle(items("up."), now=100, idle_ttl=1)
        assert plan.victims == ("k2",)
        assert {s.reason for s in plan.skipped} == {IN_USE, UNPERSISTED}

    def test_zero_or_none_ttl_disables(self):
        assert plan_idle(items("..."), now=1e9, idle_ttl=0) == EvictionPlan()
        assert plan_idle(items("..."), now=1e9, idle_ttl=None) == EvictionPlan()


class TestPlanMemory:
    """The memory pass sheds LRU first in batches, protecting at most half the cache."""

    def test_lru_first_up_to_the_batch(self):
        plan = plan_memory(items("." * 30), protect_recent=8, max_evictions=16)
        assert plan.victims == tuple(f"k{i}" for i in range(16))

    def test_protected_tail_is_never_chosen(self):
        plan = plan_memory(items("." * 10), protect_recent=8, max_evictions=16)
        # At most half of 10 is protected: k5..k9.
        assert plan.victims == ("k0", "k1", "k2", "k3", "k4")
        assert plan.skipped == tuple(Skipped(f"k{i}", PROTECTED) for i in range(5, 10))

    def test_protection_is_at_most_half_the_cache(self):
        assert protected_count(4, 8) == 2
        assert protected_count(1, 8) == 0
        assert protected_count(100, 8) == 8
        assert plan_memory(items("...."), 8, 16).victims == ("k0", "k1")

    def test_a_small_cache_of_huge_transcripts_can_still_shed(self):
        assert plan_memory(items("."), protect_recent=8, max_evictions=16).victims == ("k0",)
        assert plan_memory(items(".."), protect_recent=8, max_evictions=16).victims == ("k0",)

    def test_protect_recent_zero_lets_anything_go(self):
        assert plan_memory(items("..."), 0, 16).victims == ("k0", "k1", "k2")

    def test_skipped_candidates_do_not_use_up_the_batch(self):
        plan = plan_memory(items("upu.p..." + "." * 8), protect_recent=0, max_evictions=3)
        assert plan.victims == ("k3", "k5", "k6")
        assert [s.reason for s in plan.skipped] == [IN_USE, UNPERSISTED, IN_USE, UNPERSISTED]

    def test_in_use_and_unpersisted_are_never_chosen(self):
        plan = plan_memory(items("upupup"), protect_recent=0, max_evictions=16)
        assert plan.victims == ()
        assert len(plan.skipped) == 6

    def test_blocked_reason_wins_over_protection_in_the_report(self):
        plan = plan_memory(items(".u"), protect_recent=1, max_evictions=16)
        assert plan.victims == ("k0",)
        plan = plan_memory(items("uu"), protect_recent=1, max_evictions=16)
        assert [s.reason for s in plan.skipped] == [IN_USE, IN_USE]


class TestDescribeSkipped:
    """The reason line names each kind of blocker with its count."""

    def test_counts_by_reason(self):
        plan = plan_memory(items("uup.."), protect_recent=2, max_evictions=16)
        assert plan.victims == ()
        assert describe_skipped(plan) == (
            "2 mid-turn, 1 not yet persisted, 2 protected as most recently used"
        )

    def test_empty_cache(self):
        assert describe_skipped(EvictionPlan()) == "no agent is cached"


class TestShouldCheckPressure:
    """A turn that grew its transcript by the threshold or more triggers a pressure check."""

    def test_threshold(self):
        assert not should_check_pressure(PRESSURE_CHECK_GROWTH_BYTES - 1)
        assert should_check_pressure(PRESSURE_CHECK_GROWTH_BYTES)
