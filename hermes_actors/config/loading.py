"""Loading the configuration: a file or mapping, ``HERMES_*`` environment overrides,
defaults; one generic walker over the sections validates the tree, names the dotted key in
every error and collects unknown and legacy keys."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from hermes_actors.config._parsers import _fail
from hermes_actors.config.sections import GatewayConfig
from hermes_actors.errors import ConfigError, ConfigWarning

# -- loading --------------------------------------------------------------------------------

#: Legacy reset settings: accepted, ignored, reported. No timer ever cuts a conversation.
_LEGACY_TOP = ("session_reset", "session_idle_minutes", "session_reset_hour",
               "SESSION_IDLE_MINUTES", "SESSION_RESET_HOUR", "idle_minutes", "reset_hour")
_LEGACY_ENV = ("SESSION_IDLE_MINUTES", "SESSION_RESET_HOUR")

#: Environment overrides: variable -> dotted key.
ENV_OVERRIDES = {
    "HERMES_HOME": "home",
    "HERMES_BUSY_INPUT_MODE": "busy_input_mode",
    "HERMES_AGENT_KIND": "agent.kind",
    "HERMES_AGENT_TIMEOUT": "agent.timeout",
    "HERMES_AUTO_CONTINUE_FRESHNESS": "agent.auto_continue_freshness",
    "HERMES_RESTART_DRAIN_TIMEOUT": "restart_drain_timeout",
    "HERMES_AGENT_CACHE_MAX_SIZE": "agent.agent_cache.max_size",
    "HERMES_AGENT_CACHE_IDLE_TTL_SECS": "agent.agent_cache.idle_ttl_secs",
    "HERMES_AGENT_CACHE_MEMORY_HIGH_MB": "agent.agent_cache.memory_high_mb",
    "HERMES_REDACT_PII": "privacy.redact_pii",
    "HERMES_RETENTION_DAYS": "retention.days",
    "HERMES_HTTP_HOST": "http.host",
    "HERMES_HTTP_PORT": "http.port",
    "HERMES_HTTP_TOKEN": "http.token",
    "HERMES_HTTP_ADMIN_TOKEN": "http.admin_token",
    "HERMES_HTTP_MAX_CONNECTIONS": "http.max_connections",
    "HERMES_STORE_BACKEND": "store.backend",
    "HERMES_STORE_DSN": "store.dsn",
    "HERMES_STORE_POOL_SIZE": "store.pool_size",
    "HERMES_STORE_SYNCHRONOUS": "store.synchronous",
    "HERMES_CLUSTER_ENABLED": "cluster.enabled",
    "HERMES_CLUSTER_SHARDS": "cluster.shards",
    "HERMES_CLUSTER_LEASE_TTL": "cluster.lease_ttl",
    "HERMES_CLUSTER_HEARTBEAT": "cluster.heartbeat",
}


def _read_source(source: Any) -> dict[str, Any]:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {str(path)!r} cannot be read: {exc}") from None
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"config file {str(path)!r} is not valid YAML: {_yaml_problem(exc)}") from None
        except (ValueError, RecursionError) as exc:  # an int of 4,300 digits, deep nesting
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: "
                              f"{type(exc).__name__}: {_one_line(str(exc))}") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"config file {str(path)!r} must hold a mapping at the top level, "
                f"not {type(data).__name__}"
            )
        return data
    raise ConfigError(
        f"config source must be a file path, a mapping or None, not {type(source).__name__}"
    )


def _yaml_problem(exc: Exception) -> str:
    """A YAML error on one line: ``line L, column C: <problem> (<context> at line ...)``."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return _one_line(str(exc))
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, where = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        text += f" ({context}{at})"
    return _one_line(text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Put an environment value at ``dotted``; a section the file holds that is not a
    mapping stays an error (the override does not replace it)."""
    *parents, leaf = dotted.split(".")
    node = tree
    for depth, part in enumerate(parents):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            key = ".".join(parents[:depth + 1])
            raise _fail(key, "a mapping", child)
        node = child
    node[leaf] = value


def _build(cls: type, data: Any, prefix: str, unknown: list[str], ignored: list[str]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise _fail(prefix.rstrip("."), "a mapping", data)
    by_name = {f.name: f for f in fields(cls) if "parse" in f.metadata or "section" in f.metadata}
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        dotted = prefix + key
        if not prefix and key in _LEGACY_TOP:
            if isinstance(value, Mapping) and value:
                ignored.extend(f"{dotted}.{sub}" for sub in value)
            else:
                ignored.append(dotted)
            continue
        spec = by_name.get(key)
        if spec is None:
            unknown.append(dotted)
            continue
        if "section" in spec.metadata:
            kwargs[key] = _build(spec.metadata["section"], value, dotted + ".", unknown, ignored)
        elif isinstance(value, _EnvValue):
            try:
                kwargs[key] = spec.metadata["parse"](dotted, str(value))
            except ConfigError as exc:
                raise ConfigError(f"environment variable {value.var}: {exc}") from None
        else:
            kwargs[key] = spec.metadata["parse"](dotted, value)
    return cls(**kwargs)


def load_config(source: Any = None, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Build a :class:`GatewayConfig` from a YAML path or mapping, ``env`` and the defaults.

    ``env`` defaults to ``os.environ``. Invalid values raise :class:`ConfigError` naming the
    key (and the variable, for env values); unknown and legacy keys are listed on the result
    and warned about once each with :class:`ConfigWarning`.
    """
    if isinstance(source, GatewayConfig):
        return source
    env = os.environ if env is None else env
    tree = _deep_copy(_read_source(source))
    for var, dotted in ENV_OVERRIDES.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        _set_dotted(tree, dotted, _EnvValue(var, raw))
    unknown: list[str] = []
    ignored: list[str] = []
    config = _build(GatewayConfig, tree, "", unknown, ignored)
    ignored.extend(var for var in _LEGACY_ENV if env.get(var) not in (None, ""))
    ignored_t = tuple(dict.fromkeys(ignored))
    unknown_t = tuple(dict.fromkeys(unknown))
    for key in ignored_t:
        warnings.warn(
            f"config key {key!r} is ignored: conversations are never cut by timers; "
            "use /new or /reset",
            ConfigWarning,
            stacklevel=2,
        )
    for key in unknown_t:
        warnings.warn(f"unknown config key {key!r} is ignored", ConfigWarning, stacklevel=2)
    return replace(config, ignored_keys=ignored_t, unknown_keys=unknown_t)


def require_config(config: Any, owner: str) -> GatewayConfig | None:
    """``config`` when it is a :class:`GatewayConfig` or ``None``; a mapping or a path given
    where ``load_config(...)`` was meant is a :class:`ConfigError` saying so (it would fail
    later, deep inside, as an AttributeError)."""
    if config is not None and not isinstance(config, GatewayConfig):
        raise ConfigError(
            f"{owner}(config=...) takes a GatewayConfig or None, not "
            f"{type(config).__name__}: build it with load_config(<mapping or YAML path>)")
    return config


class _EnvValue(str):
    """A string from the environment that remembers its variable, for error messages."""

    var: str

    def __new__(cls, var: str, raw: str) -> _EnvValue:
        obj = super().__new__(cls, raw)
        obj.var = var
        return obj


def _deep_copy(data: Mapping[str, Any], prefix: str = "",
               within: tuple[int, ...] = ()) -> dict[str, Any]:
    """A copy of the nested mappings; a mapping inside itself (a YAML alias to an
    enclosing node, ``http: &a {x: *a}``) is a ConfigError naming where it recurs."""
    within = (*within, id(data))
    copy = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if id(value) in within:
                raise ConfigError(f"config key {dotted!r}: expected a value, got a reference "
                                  "to a mapping that contains it (a YAML alias cycle)")
            value = _deep_copy(value, dotted + ".", within)
        copy[key] = value
    return copy
