"""gevent's plugins, found without importing :mod:`importlib.metadata`.

``gevent.monkey.patch_all()`` announces what it patches to plugins it looks up through
package entry points (``importlib.metadata.entry_points(group="gevent.plugins…")``; gevent
itself declares one). Importing :mod:`importlib.metadata` costs 30–45 ms on the machines this
project runs on (it pulls in the ``email`` package), a twentieth of a crash recovery of
100,000 sessions, for a question ~15 small text files answer in about a millisecond.

:func:`read_plugins` reads the ``entry_points.txt`` of every distribution on ``sys.path`` as
``importlib.metadata`` finds them: ``*.dist-info`` and ``*.egg-info`` folders, in
``sys.path`` order, the first of a (normalised) name winning. Where ``sys.path`` holds what
that reading does not cover (a zip file, an ``.egg``, a finder of distributions other than
the standard one), it answers ``None`` and the caller asks :mod:`importlib.metadata`.

:func:`stand_in` is a module to put in ``sys.modules["importlib.metadata"]`` for the length
of the patching (:func:`standing_in`): its ``entry_points(group=…)`` answers from that
reading, and anything else asked of it imports the real module and answers from there.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

__all__ = ["PluginEntryPoint", "read_plugins", "stand_in", "standing_in"]

#: The entry-point groups gevent asks about.
GROUP_PREFIX = "gevent.plugins."
_SUFFIXES = (".dist-info", ".egg-info")
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?(\[.*\]\s*)?$")


class PluginEntryPoint(NamedTuple):
    """One entry point, as much of ``importlib.metadata.EntryPoint`` as gevent uses."""

    name: str
    value: str
    group: str

    def load(self) -> Any:
        """The object the entry point names (``module:attr.path``)."""
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(f"malformed entry point {self.value!r}")
        found: Any = importlib.import_module(match.group("module"))
        for part in filter(None, (match.group("attr") or "").split(".")):
            found = getattr(found, part)
        return found


def read_plugins(path: Iterable[str] | None = None
                 ) -> dict[str, tuple[PluginEntryPoint, ...]] | None:
    """gevent's entry points by group, read from the distributions on ``path`` (default
    ``sys.path``); ``None`` when ``path`` or ``sys.meta_path`` holds what this reading does
    not cover (see the module doc)."""
    finders = [f for f in sys.meta_path if hasattr(f, "find_distributions")]
    if any(f is not _path_finder() for f in finders):
        return None
    groups: dict[str, list[PluginEntryPoint]] = {}
    seen: set[str] = set()
    for entry in sys.path if path is None else path:
        folder = entry or "."
        if not os.path.isdir(folder):
            if os.path.exists(folder):
                return None  # a zip file on the path: importlib.metadata reads those
            continue
        if folder.endswith(".egg"):
            return None
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if not name.lower().endswith(_SUFFIXES):
                continue
            # (``name-version.dist-info``: the name as importlib.metadata takes it)
            distribution = _normalised(os.path.splitext(name)[0].partition("-")[0])
            if distribution in seen:
                continue
            seen.add(distribution)
            for point in _entry_points(os.path.join(folder, name, "entry_points.txt")):
                if point.group.startswith(GROUP_PREFIX):
                    groups.setdefault(point.group, []).append(point)
    return {group: tuple(points) for group, points in groups.items()}


def stand_in(plugins: dict[str, tuple[PluginEntryPoint, ...]]) -> types.ModuleType:
    """A stand-in for ``importlib.metadata`` answering ``entry_points(group=…)`` from
    ``plugins``; any other question imports the real module (putting it in ``sys.modules``
    in the stand-in's place) and is answered there."""
    module = types.ModuleType("importlib.metadata")

    def real() -> types.ModuleType:
        _withdraw(module)
        return importlib.import_module("importlib.metadata")

    def entry_points(**params: Any) -> Any:
        if params.keys() == {"group"} and str(params["group"]).startswith(GROUP_PREFIX):
            return plugins.get(params["group"], ())
        return real().entry_points(**params)

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's own attribute hook
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(real(), name)

    module.__dict__.update(entry_points=entry_points, __getattr__=__getattr__)
    return module


@contextlib.contextmanager
def standing_in(plugins: dict[str, tuple[PluginEntryPoint, ...]]) -> Iterator[None]:
    """:func:`stand_in` as ``importlib.metadata`` for the length of the ``with``."""
    module = stand_in(plugins)
    sys.modules["importlib.metadata"] = module
    try:
        yield
    finally:
        _withdraw(module)


def _withdraw(module: types.ModuleType) -> None:
    """Take the stand-in ``module`` out of ``sys.modules`` and off the ``importlib``
    package (an import of ``importlib.metadata`` meanwhile may have put it there)."""
    if sys.modules.get("importlib.metadata") is module:
        del sys.modules["importlib.metadata"]
    package = sys.modules["importlib"]
    if package.__dict__.get("metadata") is module:
        del package.__dict__["metadata"]


def _path_finder() -> Any:
    from importlib.machinery import PathFinder

    return PathFinder


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _entry_points(path: str) -> list[PluginEntryPoint]:
    """The entry points of one ``entry_points.txt`` (none when it is missing)."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    points, group = [], None
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif group is not None and "=" in line:
            name, _, value = line.partition("=")
            points.append(PluginEntryPoint(name.strip(), value.strip(), group))
    return points
