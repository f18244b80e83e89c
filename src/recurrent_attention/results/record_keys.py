"""What makes two runs the same configuration, read from their ``summary.json`` / ``failed.json``.

New records carry ``config_id`` (hash of the resolved config without the seed) and ``run_id`` (with
it). Older summaries carry neither, so a fallback key is derived from what they do record: task,
model, preset, compat, setting and the command-line overrides minus the seed. Overrides are parsed
with Hydra's own override grammar, so ``task.lr=0.5`` and ``task.lr=5e-1`` (or the same overrides in
another order) give the same key.

The fallback cannot see defaults it did not record: ``task.max_epochs=15`` typed on a task whose
default is 15 still counts as a different config from leaving it out (a value the record's
``setting`` holds, such as the horizon, is compared as resolved). Runs from the current
``train.py`` do not have that gap, because their ``config_id`` hashes the resolved config.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from recurrent_attention.runs.identity import IGNORED_KEYS

# Overrides already recorded as their own summary fields (compared there, not twice).
IDENTITY_OVERRIDES = {"model", "task", "preset", "seed", "task.compat"}
# Summary fields (besides the overrides) that tell configs apart.
DESCRIPTION_FIELDS = ("task", "model", "preset", "compat")
# Each ``setting`` field a record can hold and the key it is read from (the tasks' and experiments'
# ``setting:`` blocks in conf/, held to them by a test): the setting is that key's value as run,
# so typing the key (``task.pred_len=96`` where the horizon is 96) adds nothing to a description.
SETTING_SOURCES = {
    "horizon": "task.pred_len",
    "head": "task.head",
    "format": "task.format",
    "seg_len": "task.seg_len",
    "n_layers": "model.n_layers",
    "target_return": "task.target_return",
    "data_path": "task.datamodule.path",
    "protocol": "task.protocol",
    "n_frames": "task.n_frames",
    "memory_token": "model.memory_token",
    "recurrent_positions": "model.recurrent_positions",
    "reset_positions": "model.reset_positions",
}

_PARSER = OverridesParser.create()


def canonical(value: Any) -> Any:
    """One spelling per value: integral floats become ints, containers are canonicalised inside."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def _result_override(key: str) -> bool:
    """Not a naming field, and not one of the keys a run's hash ignores (``runs.identity``)."""
    ignored = any(key == k or key.startswith((f"{k}.", f"{k}/")) for k in IGNORED_KEYS)
    return key not in IDENTITY_OVERRIDES and not ignored


def normalise_overrides(overrides: Iterable[str]) -> dict[str, Any]:
    """Overrides that change a run's numbers, as {key: parsed value}, sorted by key.

    ``+key=v`` and ``++key=v`` count as ``key=v``; ``~key`` is kept as ``{"~key": None}``. A string
    Hydra cannot parse is kept verbatim (it could not have come from a run Hydra started).
    """
    parsed: dict[str, Any] = {}
    for text in overrides:
        try:
            (override,) = _PARSER.parse_overrides([text])
        except HydraException:
            key, _, raw = text.partition("=")
            parsed[key.lstrip("+")] = raw
            continue
        key = override.key_or_group + (f"@{override.package}" if override.package else "")
        if override.is_delete():
            key = f"~{key}"
        if _result_override(key.lstrip("~")):
            parsed[key] = canonical(override.value())
    return dict(sorted(parsed.items()))


def describe(record: Mapping[str, Any]) -> dict[str, Any]:
    """The config behind a record, seed removed, as flat ``{name: value}`` for keys and labels.

    Values as resolved where the record holds them: an override whose value the record's
    ``setting`` holds (:data:`SETTING_SOURCES`) is left out, so typing a value and leaving it at
    the default that has it describe one config.
    """
    setting = record.get("setting") or {}
    described = {field: record.get(field) for field in DESCRIPTION_FIELDS}
    described.update({f"setting.{k}": v for k, v in setting.items()})
    recorded = {SETTING_SOURCES[name] for name in setting if name in SETTING_SOURCES}
    overrides = normalise_overrides(record.get("overrides") or [])
    described.update({k: v for k, v in overrides.items() if k not in recorded})
    return canonical(described)


def _short_hash(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def config_key(record: Mapping[str, Any]) -> str | None:
    """``config_id`` where the record has one, else ``legacy-<hash of describe(record)>``.

    None for a ``failed.json`` that names no config (written before failures recorded one).
    """
    if record.get("config_id"):
        return str(record["config_id"])
    if record.get("task") is None and record.get("model") is None:
        return None
    return f"legacy-{_short_hash(describe(record))}"


def run_key(record: Mapping[str, Any], path: str) -> str:
    """``run_id`` where the record has one, else its config key plus the seed (or, lacking both, its path)."""
    if record.get("run_id"):
        return str(record["run_id"])
    key = config_key(record)
    return f"{key}-seed{record.get('seed')}" if key else f"path:{path}"


def show(value: Any) -> str:
    """A value as one would type it in an override (strings bare, the rest as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)
