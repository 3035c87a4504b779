"""Declare a node's parameters from a frozen config dataclass and freeze their values into it.

    @dataclass(frozen=True)
    class PolicyConfig:
        rate_hz: float = param(50.0, "control rate (Hz)")
        bundle_dir: str = "runs/bundles"  # where bundles are kept

    cfg = freeze_parameters(node, PolicyConfig)

One parameter per field (nested dataclasses become ``outer.inner`` names), each declared with
a description: the field's ``metadata["description"]`` (what :func:`param` sets) or else the
field's trailing ``#`` comment, so the same dataclasses stay plain for ROS-free tools. An
override from ``-p`` or ``--params-file`` that names no field, or whose type does not fit
(an int is accepted for a float), raises :class:`ParameterError` naming the parameter and
where the value came from. Works on both backends.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import tokenize
import types
import typing
from typing import Any, TypeVar

from vnd_ros.parameter import ParameterType
from vnd_ros.runtime import ParameterDescriptor, node_parameter_overrides

T = TypeVar("T")

# Parameters every node may receive without declaring them in its config.
_IMPLICIT_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})
_IMPLICIT_PREFIXES = ("qos_overrides.",)
_SCALARS: dict[type, ParameterType] = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}
_ARRAYS: dict[type, ParameterType] = {
    bool: ParameterType.PARAMETER_BOOL_ARRAY,
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
    str: ParameterType.PARAMETER_STRING_ARRAY,
}


class ParameterError(ValueError):
    """A parameter override that names no declared parameter or has the wrong type."""


def param(default: Any, description: str) -> Any:
    """A dataclass field with ``default`` and a parameter ``description``.

    Lists are accepted as defaults and copied per instance.
    """
    metadata = {"description": description}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str  # full parameter name ('namespace.field' or 'outer.inner')
    hint: Any  # scalar type, or (element type,) for a list / tuple field
    is_tuple: bool  # the field is a tuple: the list value is converted back
    default: Any
    description: str


def freeze_parameters(node: Any, config_cls: type[T], namespace: str = "") -> T:
    """Declare one parameter per field of ``config_cls`` on ``node`` and return the values.

    Args:
        node: a Node of either backend.
        config_cls: a frozen dataclass; fields typed bool, int, float, str, list[...] /
            tuple[..., ...] of those, or nested frozen dataclasses.
        namespace: prefix of the parameter names ('' for none).

    Raises:
        ParameterError: an override is undeclared or mistyped (names it and its source).
        TypeError: the dataclass is not frozen, a field type is unsupported or a field has
            no description.
    """
    prefix = f"{namespace}." if namespace else ""
    specs = _specs(config_cls, prefix)
    overrides = node_parameter_overrides(node)
    _reject_undeclared(node, overrides, {s.name for s in specs}, prefix)
    values: dict[str, Any] = {}
    for spec in specs:
        override = overrides.get(spec.name)
        if override is not None:
            checked = _check_type(spec, override.value, override.source)
            _prepare_rclpy_override(node, spec.name, checked)
        descriptor = ParameterDescriptor(description=spec.description, type=int(_ptype(spec)))
        parameter = node.declare_parameter(spec.name, _ros_value(spec.default), descriptor)
        value = parameter.value
        values[spec.name] = tuple(value) if spec.is_tuple else value
    return _build(config_cls, prefix, values)


def _specs(config_cls: type, prefix: str) -> list[_Spec]:
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls!r} is not a dataclass")
    if not config_cls.__dataclass_params__.frozen:
        raise TypeError(f"{config_cls.__name__} must be a frozen dataclass (frozen=True)")
    hints = typing.get_type_hints(config_cls)
    comments = _field_comments(config_cls)
    specs: list[_Spec] = []
    for f in dataclasses.fields(config_cls):
        hint = hints[f.name]
        name = prefix + f.name
        if dataclasses.is_dataclass(hint):
            specs.extend(_specs(hint, name + "."))
            continue
        description = f.metadata.get("description") or comments.get(f.name)
        if not description:
            raise TypeError(
                f"{config_cls.__name__}.{f.name}: no description (use param(default, "
                f"'...') or a trailing '# comment')"
            )
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        element, is_sequence, is_tuple = _unpack_hint(hint, config_cls, f.name)
        spec_hint = (element,) if is_sequence else element
        specs.append(_Spec(name, spec_hint, is_tuple, default, description))
    return specs


def _unpack_hint(hint: Any, cls: type, name: str) -> tuple[type, bool, bool]:
    """(scalar type, is a sequence, is a tuple) of a supported field annotation."""
    origin = typing.get_origin(hint)
    if hint in _SCALARS:
        return hint, False, False
    if origin in (list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if len(set(args)) == 1 and args[0] in _SCALARS:
            return args[0], True, origin is tuple
    if origin in (types.UnionType, typing.Union):
        raise TypeError(f"{cls.__name__}.{name}: optional fields cannot be ROS parameters")
    raise TypeError(f"{cls.__name__}.{name}: unsupported parameter type {hint!r}")


@functools.cache
def _field_comments(config_cls: type) -> dict[str, str]:
    """Trailing '# comment' of each 'name: type = ...' line in the class body."""
    try:
        source = inspect.getsource(config_cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    line_field: dict[int, str] = {}
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, tok in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if tok.type == tokenize.NAME and nxt.type == tokenize.OP and nxt.string == ":":
            line_field.setdefault(tok.start[0], tok.string)
        if tok.type == tokenize.COMMENT and tok.start[0] in line_field:
            comments[line_field[tok.start[0]]] = tok.string.lstrip("#").strip()
    return comments


def _ptype(spec: _Spec) -> ParameterType:
    if isinstance(spec.hint, tuple):
        return _ARRAYS[spec.hint[0]]
    return _SCALARS[spec.hint]


def _ros_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _type_word(value: Any) -> str:
    return type(value).__name__


def _check_scalar(kind: type, value: Any) -> Any:
    """``value`` as ``kind`` or raise ValueError; bool is never an int, int widens to float."""
    if isinstance(value, bool) and kind is not bool:
        raise ValueError
    if kind is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, kind):
        raise ValueError
    return value


def _check_type(spec: _Spec, value: Any, source: str) -> Any:
    """Override ``value`` converted to the field type; ParameterError when it does not fit."""
    try:
        if isinstance(spec.hint, tuple):
            if not isinstance(value, list):
                raise ValueError
            return [_check_scalar(spec.hint[0], item) for item in value]
        return _check_scalar(spec.hint, value)
    except ValueError:
        expected = f"list of {spec.hint[0].__name__}" if isinstance(spec.hint, tuple) else spec.hint
        expected = getattr(expected, "__name__", expected)
        raise ParameterError(
            f"parameter '{spec.name}' from {source}: expected {expected}, "
            f"got {_type_word(value)} {value!r}"
        ) from None


def _reject_undeclared(node: Any, overrides: dict, declared: set[str], prefix: str) -> None:
    for name, override in overrides.items():
        if prefix and not name.startswith(prefix):
            continue  # another config of the node owns this namespace
        if name in declared or name in _IMPLICIT_PARAMETERS or name.startswith(_IMPLICIT_PREFIXES):
            continue
        if node.has_parameter(name):
            continue
        known = ", ".join(sorted(declared))
        raise ParameterError(
            f"parameter '{name}' from {override.source} is not declared by node "
            f"'{node.get_fully_qualified_name()}' (declared: {known})"
        )


def _prepare_rclpy_override(node: Any, name: str, checked: Any) -> None:
    """rclpy refuses an int override for a double parameter: store the checked value."""
    stored = getattr(node, "_parameter_overrides", None)  # rclpy only; the dds node checks
    if isinstance(stored, dict) and name in stored:  # pragma: no cover - rclpy backend only
        stored[name] = type(stored[name])(name, value=checked)


def _build(config_cls: type[T], prefix: str, values: dict[str, Any]) -> T:
    hints = typing.get_type_hints(config_cls)
    kwargs = {}
    for f in dataclasses.fields(config_cls):
        name = prefix + f.name
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = _build(hints[f.name], name + ".", values)
        else:
            kwargs[f.name] = values[name]
    return config_cls(**kwargs)
