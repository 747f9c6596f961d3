"""The machine line of a report: cores, RAM, CPU, Python, SQLite and library versions."""

from __future__ import annotations

import os
import platform
import sqlite3
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["describe", "machine_line"]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def describe() -> dict[str, Any]:
    """The machine as a JSON-ready dict."""
    ram = _ram_bytes()
    return {
        "cores": os.cpu_count(),
        "ram_gib": None if ram is None else round(ram / 2**30, 1),
        "cpu": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "gevent": _version("gevent"),
        "pykka": _version("pykka"),
        "peewee": _version("peewee"),
    }


def machine_line(info: dict[str, Any]) -> str:
    """One line: ``2 cores, 23.4 GiB RAM, <cpu>; Python 3.11.7, SQLite 3.40.1, ...``."""
    return (
        f"{info['cores']} cores, {info['ram_gib']} GiB RAM, {info['cpu']}; {info['os']}; "
        f"Python {info['python']}, SQLite {info['sqlite']}, gevent {info['gevent']}, "
        f"pykka {info['pykka']}, peewee {info['peewee']}"
    )
