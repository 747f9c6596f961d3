"""The memory probe and budget (§11, §17.30, §17.42) against fake cgroup v1/v2 trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_actors.runtime.memory import (
    MB,
    UNLIMITED_BYTES,
    MemoryProbe,
    malloc_trim,
    resolve_budget,
)
from hermes_actors.testing import FakeMemoryProbe

GB = 1024 * MB
V1_UNLIMITED = "9223372036854771712"  # LLONG_MAX rounded down to a page, as v1 reports it


class Tree:
    """A fake ``/sys/fs/cgroup`` + ``/proc`` tree under a temporary root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, text: str) -> Tree:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return self

    def own(self, v2: str | None = "/", v1_memory: str | None = None) -> Tree:
        lines = []
        if v1_memory is not None:
            lines.append(f"4:memory:{v1_memory}")
            lines.append("3:cpu,cpuacct:/")
        if v2 is not None:
            lines.append(f"0::{v2}")
        return self.write("proc/self/cgroup", "\n".join(lines) + "\n")

    def status(self, rss_anon_kb: int) -> Tree:
        return self.write("proc/self/status",
                          f"Name:\tpython\nRssAnon:\t{rss_anon_kb:>8} kB\nRssFile:\t  1716 kB\n")

    def probe(self) -> MemoryProbe:
        return MemoryProbe(self.root)


@pytest.fixture
def tree(tmp_path) -> Tree:
    return Tree(tmp_path)


SVC = "sys/fs/cgroup/system.slice/hermes.service"


class TestLimitLookup:
    """The limit comes from the own v2 cgroup, then the v2 root, then cgroup v1."""

    def test_own_cgroup_memory_high_first(self, tree):
        tree.own("/system.slice/hermes.service")
        tree.write(f"{SVC}/memory.high", "1073741824\n").write(f"{SVC}/memory.max", "2147483648\n")
        tree.write("sys/fs/cgroup/memory.high", "536870912\n")
        limit = tree.probe().limit()
        assert limit.limit_bytes == GB
        assert limit.source == tree.root / SVC / "memory.high"
        assert limit.v2_dir == tree.root / SVC

    def test_own_memory_max_when_high_is_max(self, tree):
        tree.own("/system.slice/hermes.service")
        tree.write(f"{SVC}/memory.high", "max\n").write(f"{SVC}/memory.max", "2147483648\n")
        assert tree.probe().limit_bytes() == 2 * GB

    def test_root_cgroup_when_own_cgroup_is_unlimited(self, tree):
        tree.own("/system.slice/hermes.service")
        tree.write(f"{SVC}/memory.high", "max\n").write(f"{SVC}/memory.max", "max\n")
        tree.write("sys/fs/cgroup/memory.high", "max\n")
        tree.write("sys/fs/cgroup/memory.max", "3221225472\n")
        limit = tree.probe().limit()
        assert limit.limit_bytes == 3 * GB
        assert limit.v2_dir == tree.root / "sys/fs/cgroup"

    def test_root_cgroup_when_own_cgroup_files_are_missing(self, tree):
        tree.own("/docker/abc")  # a host path that does not exist inside the container
        tree.write("sys/fs/cgroup/memory.high", "1073741824\n")
        assert tree.probe().limit_bytes() == GB

    def test_own_cgroup_is_root(self, tree):
        tree.own("/").write("sys/fs/cgroup/memory.max", "1073741824\n")
        assert tree.probe().limit_bytes() == GB

    def test_cgroup_v1_mount_root(self, tree):
        tree.own(v2="/", v1_memory="/")
        tree.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n")
        limit = tree.probe().limit()
        assert limit.limit_bytes == GB
        assert limit.v2_dir is None

    def test_cgroup_v1_own_path_before_the_mount_root(self, tree):
        tree.own(v2=None, v1_memory="/process_api/abc")
        tree.write("sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", "2147483648\n")
        tree.write("sys/fs/cgroup/memory/memory.limit_in_bytes", V1_UNLIMITED + "\n")
        assert tree.probe().limit_bytes() == 2 * GB

    def test_v2_wins_over_v1(self, tree):
        tree.own("/").write("sys/fs/cgroup/memory.max", "1073741824\n")
        tree.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n")
        assert tree.probe().limit_bytes() == GB

    @pytest.mark.parametrize("value", [str(UNLIMITED_BYTES), str(UNLIMITED_BYTES + 4096),
                                       V1_UNLIMITED])
    def test_sentinel_and_larger_mean_unlimited(self, tree, value):
        tree.own(v2="/", v1_memory="/")
        tree.write("sys/fs/cgroup/memory/memory.limit_in_bytes", value)
        assert tree.probe().limit_bytes() is None

    def test_just_under_the_sentinel_is_a_limit(self, tree):
        tree.own(v2=None, v1_memory="/")
        tree.write("sys/fs/cgroup/memory/memory.limit_in_bytes", str(UNLIMITED_BYTES - 1))
        assert tree.probe().limit_bytes() == UNLIMITED_BYTES - 1

    def test_all_max_is_uncapped(self, tree):
        tree.own("/").write("sys/fs/cgroup/memory.high", "max").write(
            "sys/fs/cgroup/memory.max", "max")
        assert tree.probe().limit_bytes() is None

    def test_empty_tree_is_uncapped(self, tree):
        assert tree.probe().limit() is None

    def test_garbage_is_skipped(self, tree):
        tree.own("/").write("sys/fs/cgroup/memory.high", "lots\n")
        tree.write("sys/fs/cgroup/memory.max", "1073741824\n")
        assert tree.probe().limit_bytes() == GB


class TestAnonMeasurement:
    """Under a v2 limit the cgroup's ``anon`` counts (children included); else RssAnon."""

    def test_v2_memory_stat_anon_of_the_limiting_cgroup(self, tree):
        tree.own("/system.slice/hermes.service").status(rss_anon_kb=1000)
        tree.write(f"{SVC}/memory.max", "2147483648\n")
        tree.write(f"{SVC}/memory.stat", "anon 734003200\nfile 1000\nanon_thp 0\n")
        tree.write("sys/fs/cgroup/memory.stat", "anon 999\n")
        assert tree.probe().anon_bytes() == 734003200

    def test_root_cgroup_stat_when_the_root_limit_applies(self, tree):
        tree.own("/").status(rss_anon_kb=1000)
        tree.write("sys/fs/cgroup/memory.high", "1073741824\n")
        tree.write("sys/fs/cgroup/memory.stat", "file 5\nanon 4096\n")
        assert tree.probe().anon_bytes() == 4096

    def test_rss_anon_when_uncapped(self, tree):
        tree.own("/").status(rss_anon_kb=152)
        tree.write("sys/fs/cgroup/memory.max", "max").write("sys/fs/cgroup/memory.stat",
                                                           "anon 999999\n")
        assert tree.probe().anon_bytes() == 152 * 1024

    def test_rss_anon_under_a_v1_limit(self, tree):
        tree.own(v2="/", v1_memory="/").status(rss_anon_kb=2048)
        tree.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824")
        assert tree.probe().anon_bytes() == 2 * MB

    def test_rss_anon_when_the_v2_stat_is_missing(self, tree):
        tree.own("/").status(rss_anon_kb=10)
        tree.write("sys/fs/cgroup/memory.max", "1073741824")
        assert tree.probe().anon_bytes() == 10 * 1024

    def test_psutil_fallback_without_proc(self, tree):
        assert tree.probe().anon_bytes() > 0

    def test_real_machine_probe_works(self):
        probe = MemoryProbe()
        assert probe.anon_bytes() > 0
        assert probe.total_ram_bytes() > 0
        limit = probe.limit_bytes()
        assert limit is None or 0 < limit < UNLIMITED_BYTES


class TestResolveBudget:
    """``auto`` is 65 % of the limit or of RAM with a 512 MB floor; numbers are literal MB."""

    def test_auto_is_65_percent_of_the_cgroup_limit(self, tree):
        tree.own("/").write("sys/fs/cgroup/memory.max", str(4 * GB))
        assert resolve_budget("auto", tree.probe()) == int(4 * GB * 0.65)

    def test_auto_uses_total_ram_when_uncapped(self, tree):
        tree.own("/").write("sys/fs/cgroup/memory.max", "max")
        tree.write("proc/meminfo", "MemTotal:       8388608 kB\nMemFree: 1 kB\n")
        assert resolve_budget("auto", tree.probe()) == int(8 * GB * 0.65)

    def test_auto_total_ram_can_be_given(self):
        assert resolve_budget("auto", FakeMemoryProbe(), total_ram=2 * GB) == int(2 * GB * 0.65)

    def test_auto_with_a_probe_without_total_ram_uses_the_machine(self):
        budget = resolve_budget("auto", FakeMemoryProbe())
        assert budget is None or budget >= 512 * MB

    def test_auto_under_the_floor_disables(self):
        # 700 MB * 0.65 = 455 MB: under the floor although the limit itself is above it.
        assert resolve_budget("auto", FakeMemoryProbe(limit_mb=700)) is None
        assert resolve_budget("AUTO", FakeMemoryProbe(limit_mb=800)) == int(800 * MB * 0.65)

    def test_floor_compares_the_computed_budget(self):
        limit = 512 * MB / 0.65
        assert resolve_budget("auto", FakeMemoryProbe(limit_mb=(limit + 8) / MB)) >= 512 * MB
        assert resolve_budget("auto", FakeMemoryProbe(limit_mb=(limit - 8) / MB)) is None

    def test_a_number_is_taken_literally_without_the_floor(self):
        probe = FakeMemoryProbe(limit_mb=100)
        assert resolve_budget(300, probe) == 300 * MB
        assert resolve_budget(1.5, probe) == int(1.5 * MB)
        assert resolve_budget("64", probe) == 64 * MB

    @pytest.mark.parametrize("setting", [None, 0, 0.0, False, "off", "false", "0"])
    def test_disabled(self, setting):
        assert resolve_budget(setting, FakeMemoryProbe(limit_mb=10_000)) is None


class TestMallocTrim:
    """Trimming never raises, whatever the C library."""

    def test_returns_a_bool(self):
        assert malloc_trim() in (True, False)
