"""Typed dataclass configs loaded from YAML, with errors that name the file and the field."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class ConfigError(ValueError):
    """A configuration file or mapping is missing a field or has a malformed one."""


def repo_root() -> Path:
    """Root of the source checkout (holds ``config/`` and ``launch/``)."""
    return Path(__file__).resolve().parents[4]


def config_dir() -> Path:
    """The ``config/`` folder; ``VND_CONFIG_DIR`` overrides it (e.g. an installed share dir)."""
    import os

    return Path(os.environ.get("VND_CONFIG_DIR", repo_root() / "config"))


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a missing file or a syntax error raises :class:`ConfigError`."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from err


def resolve_named(kind: str, name_or_path: str | Path) -> Path:
    """``config/<kind>/<name>.yaml`` for a bare name, else the path itself."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return candidate
    path = config_dir() / kind / f"{name_or_path}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (config_dir() / kind).glob("*.yaml"))
        raise ConfigError(f"unknown {kind[:-1]} '{name_or_path}' (known: {', '.join(known)})")
    return path


def _convert(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, where)
    if origin in (types.UnionType, typing.Union):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _convert(value, members[0], where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(hint)
        item_hint = args[0] if args else Any
        if origin is tuple and len(args) > 1 and args[1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{where}: expected {len(args)} values, got {len(value)}")
            return tuple(
                _convert(v, h, f"{where}[{i}]")
                for i, (v, h) in enumerate(zip(value, args, strict=True))
            )
        items = [_convert(v, item_hint, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def from_mapping(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from ``data``; unknown, missing or mistyped fields raise.

    ``where`` prefixes every error (e.g. ``config/vehicles/x.yaml: inertia_kgm2``).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown field '{unknown[0]}' (known: {', '.join(fields)})")
    kwargs = {}
    for name, field in fields.items():
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], f"{where}: {name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}: missing field '{name}'")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from err
    return obj


def load_dataclass(cls: type[T], path: Path, section: str | None = None) -> T:
    """Load ``cls`` from the YAML file ``path`` (optionally from one top-level ``section``)."""
    data = read_yaml(path)
    if section is not None:
        if not isinstance(data, dict) or section not in data:
            raise ConfigError(f"{path}: missing section '{section}'")
        data = data[section]
    return from_mapping(cls, data, str(path))
