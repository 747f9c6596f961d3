"""A node's state as files in its home (§5, §17.23, §17.24): the files backend's format.

``.clean_shutdown`` (written at the end of a graceful stop), ``restart_counts.json``
(``{session_key: consecutive restarts}``) and ``restart_storm.json`` (``{"boots": [...]}``)
hold, as JSON, the values a SQL backend keeps in its ``node_state`` table under the same
names; ``node_id`` holds the node's id. The files backend reads and writes them; the SQLite
backend imports what it finds (from degraded mode, or from a build that kept the state in
files) and removes the files.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from hermes_actors._green import off_the_hub
from hermes_actors.store.backends.files.atomic import atomic_write_bytes

__all__ = [
    "HOME_FILES",
    "NODE_ID_FILE",
    "read_home_files",
    "read_node_id_file",
    "remove_home_files",
    "write_home_file",
    "write_node_id_file",
]

log = logging.getLogger(__name__)

#: State value name -> the file that holds it in the home.
HOME_FILES = {
    "clean_shutdown": ".clean_shutdown",
    "restart_counts": "restart_counts.json",
    "restart_storm": "restart_storm.json",
}
#: The file that holds the node's id.
NODE_ID_FILE = "node_id"


def read_home_files(home: Path) -> dict[str, str]:
    """The state values found in ``home`` (name -> JSON text); an unreadable file is skipped
    with a warning (its value starts from empty, as a missing one does)."""
    found = {}
    for name, filename in HOME_FILES.items():
        path = home / filename
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot read %s (%s): starting from empty", path, exc)
            continue
        try:
            json.loads(text)
        except ValueError:
            if name != "clean_shutdown":  # its presence is the marker, whatever it holds
                log.warning("unreadable %s: starting from empty", path)
                continue
            text = "{}"
        found[name] = text.strip()
    return found


def write_home_file(home: Path, name: str, value: str | None) -> None:
    """Write (or, with ``None``, remove) the file of state value ``name``, atomically."""
    path = home / HOME_FILES[name]
    if value is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    off_the_hub(atomic_write_bytes, path, (value + "\n").encode("utf-8"))


def remove_home_files(home: Path, names: dict[str, str]) -> None:
    """Remove the files of ``names`` (after their values were imported elsewhere)."""
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (home / HOME_FILES[name]).unlink()


def import_home_files(home: Path, put: Callable[[dict[str, str]], None], where: str) -> None:
    """The node state a files backend (degraded mode, or a build before the state moved
    into the database) left in ``home``: ``put`` stores the values (one transaction), then
    the files are removed. Idempotent: a crash between the two imports the same again."""
    found = read_home_files(home)
    if not found:
        return
    put(found)
    remove_home_files(home, found)
    log.info("imported %s from the home into %s", ", ".join(sorted(found)), where)


def read_node_id_file(home: Path) -> str | None:
    """The node id kept in ``home``, or ``None``."""
    try:
        text = (home / NODE_ID_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def write_node_id_file(home: Path, node_id: str) -> None:
    """Keep ``node_id`` in ``home``."""
    atomic_write_bytes(home / NODE_ID_FILE, (node_id + "\n").encode("utf-8"))
