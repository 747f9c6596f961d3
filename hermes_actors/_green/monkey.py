"""``patch_all()``: gevent's monkey-patching for the processes that run under gevent (the
standalone gateway, the benchmarks' children), with the package metadata read once.

gevent announces every module it patches to plugins it finds through package entry points,
and each announcement asks ``importlib.metadata.entry_points`` again, which reads the
metadata of every installed distribution: 25 reads of each of ~50 distributions on a test
install, ~30 ms of the 96 ms ``patch_all`` took, close to a tenth of a crash recovery of
100,000 sessions. Importing ``importlib.metadata`` at all costs another 30–45 ms (the
``email`` package). So the plugins are read once, straight from the distributions'
``entry_points.txt`` (:mod:`hermes_actors._green.plugins`), and a stand-in answers gevent
from that reading for the length of the call; where that reading cannot be trusted (a zip
on ``sys.path``), or ``importlib.metadata`` is imported already, the real entry points are
read once instead. Either way gevent finds the same plugins.

Neither this module nor its package imports ``threading`` (or anything that does) at import
time: the patching must come first.

It also turns off gevent's greenlet-tree tracking (``track_greenlet_tree``) unless
``GEVENT_TRACK_GREENLET_TREE`` says otherwise: with it on, every new greenlet records the
greenlet that spawned it and walks the spawner's Python stack (a line-number lookup per
frame), which was 0.5 % of a turn's instructions, and keeps that record for the greenlet's
life (session actors live as long as their session). Nothing here reads it; it serves
``gevent.util.GreenletTree`` reports.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["patch_all"]


def patch_all() -> None:
    """``gevent.monkey.patch_all()`` with its defaults, entry points read once."""
    import gevent
    from gevent import monkey

    from hermes_actors._green.plugins import read_plugins, standing_in

    if "GEVENT_TRACK_GREENLET_TREE" not in os.environ:
        gevent.config.track_greenlet_tree = False

    from hermes_actors._versions import in_tested_range

    if not in_tested_range("gevent", gevent.__version__):  # the stand-in's lookup untested
        monkey.patch_all()
        return
    plugins = None if "importlib.metadata" in sys.modules else read_plugins()
    if plugins is None:
        _patch_reading_once(monkey)
        return
    with standing_in(plugins):
        monkey.patch_all()


def _patch_reading_once(monkey: Any) -> None:
    """``monkey.patch_all()`` with the real entry points, read once."""
    from importlib import metadata

    real = metadata.entry_points
    everything = real()

    def entry_points(**params: Any) -> Any:
        return everything.select(**params) if params else everything

    metadata.entry_points = entry_points
    try:
        monkey.patch_all()
    finally:
        metadata.entry_points = real
