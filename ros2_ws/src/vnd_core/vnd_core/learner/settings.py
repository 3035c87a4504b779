"""The learner's configuration between processes: the preset table, the typed file the worker
reads, and dotted-name overrides.

A :class:`~vnd_core.learner.config.LearnerConfig` is one of the presets of
:data:`LEARNER_PRESETS` with some fields replaced. Fields are named as the learner node's ROS
parameters name them: ``min_new_ticks`` at the top, ``trainer.iterations`` inside a section.
The node writes the effective configuration as a YAML file (:func:`write_config_file`) that
names every field; the worker reads it back with :func:`read_config_file`, which refuses a
file with an unknown, missing or mistyped field, so both sides agree on every value.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from vnd_core.config_io import ConfigError, from_mapping, read_yaml
from vnd_core.learner.config import LearnerConfig

# The one table of learner presets; the learner node's `preset` parameter and `vnd eval
# --learner-preset` choose from it.
LEARNER_PRESETS: dict[str, Callable[..., LearnerConfig]] = {
    "quick": LearnerConfig.quick,
    "standard": LearnerConfig.standard,
    "full": LearnerConfig.full,
}
CONFIG_FILE_FORMAT = "vnd-learner-config-1"  # the `format` key of a config file


def learner_preset(name: str) -> LearnerConfig:
    """The LearnerConfig of preset ``name``; ValueError naming the known presets."""
    try:
        return LEARNER_PRESETS[name]()
    except KeyError:
        known = ", ".join(LEARNER_PRESETS)
        raise ValueError(f"unknown learner preset {name!r} (known: {known})") from None


def config_mapping(config: Any) -> dict[str, Any]:
    """Every field of dataclass ``config`` as plain YAML/JSON values (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {dotted name: value}, e.g. ``{"trainer.iterations": 30}``."""
    flat: dict[str, Any] = {}
    for name, value in mapping.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[prefix + name] = value
    return flat


def checked_config(config: LearnerConfig, where: str) -> LearnerConfig:
    """``config`` rebuilt from its own mapping: field types (tuple lengths too) and every
    section's ``validate()`` checked; :class:`ConfigError` prefixed by ``where``."""
    return from_mapping(LearnerConfig, config_mapping(config), where)


def with_overrides(
    config: LearnerConfig, overrides: Mapping[str, Any], where: str
) -> LearnerConfig:
    """``config`` with dotted-name fields replaced, e.g. ``{"trainer.iterations": 100}``.

    Values are checked against the field types (an int is accepted for a float) and the
    result is validated. Raises :class:`ConfigError` naming an unknown or mistyped field.
    """
    data = config_mapping(config)
    for name, value in overrides.items():
        section, key = data, name.split(".")
        for part in key[:-1]:
            if not isinstance(section.get(part), dict):
                raise ConfigError(f"{where}: LearnerConfig has no section {part!r} (in {name!r})")
            section = section[part]
        if key[-1] not in section or isinstance(section[key[-1]], dict):
            raise ConfigError(f"{where}: LearnerConfig has no field {name!r}")
        section[key[-1]] = value
    return from_mapping(LearnerConfig, data, where)


def parse_assignments(items: Sequence[str], flag: str = "--learner-param") -> dict[str, Any]:
    """``NAME=VALUE`` command-line items as {dotted name: YAML-typed value}.

    ValueError names the item of ``flag`` that has no ``=`` or no valid YAML value.
    """
    changes: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE")
        try:
            changes[name.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{flag} {item!r}: value is not YAML: {err}") from None
    return changes


def _missing_fields(cls: type, data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields of ``cls`` (and its sections) that ``data`` leaves out."""
    hints = typing.get_type_hints(cls)
    missing: list[str] = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        if f.name not in data:
            missing.append(name)
        elif dataclasses.is_dataclass(hints[f.name]) and isinstance(data[f.name], dict):
            missing.extend(_missing_fields(hints[f.name], data[f.name], name + "."))
    return missing


def write_config_file(path: Path, config: LearnerConfig, preset: str) -> Path:
    """Write ``config`` (validated first) to ``path`` as YAML, atomically; returns ``path``.

    ``preset`` is recorded for the reader of the file; the file holds every field, so the
    worker needs no preset table to rebuild the configuration.
    """
    config = checked_config(config, "learner configuration")
    document = {"format": CONFIG_FILE_FORMAT, "preset": preset, "learner": config_mapping(config)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(document, sort_keys=False))
    os.replace(temporary, path)
    return path


def read_config_file(path: Path) -> LearnerConfig:
    """The LearnerConfig of a file :func:`write_config_file` wrote.

    Raises :class:`ConfigError` naming the file and the unknown, missing or mistyped field.
    """
    document = read_yaml(path)
    if not isinstance(document, dict) or document.get("format") != CONFIG_FILE_FORMAT:
        raise ConfigError(f"{path}: not a learner config file (format {CONFIG_FILE_FORMAT})")
    data = document.get("learner")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: 'learner' must map the LearnerConfig fields")
    missing = _missing_fields(LearnerConfig, data)
    if missing:
        raise ConfigError(f"{path}: missing field(s) {', '.join(missing)}")
    return from_mapping(LearnerConfig, data, f"{path}: learner")
