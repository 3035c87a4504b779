"""Declare a node's parameters from a frozen config dataclass and freeze their values into it.

    @dataclass(frozen=True)
    class PolicyConfig:
        rate_hz: float = param(50.0, "control rate (Hz)")
        bundle_dir: str = "runs/bundles"  # where bundles are kept

    cfg = freeze_parameters(node, PolicyConfig)

One parameter per field (nested dataclasses become ``outer.inner`` names), each declared with
a description: the field's ``metadata["description"]`` (what :func:`param` sets), else the
field's trailing ``#`` comment, else the ``#`` comment lines directly above the field, so the
same dataclasses stay plain for ROS-free tools. The defaults are the class's, or those of an
instance passed as ``defaults`` (a preset). An optional field (``int | None``) is a parameter
of its type that stays unset while the default is None. An override from ``-p`` or
``--params-file`` that names no field, or whose type does not fit (an int is accepted for a
float), raises :class:`ParameterError` naming the parameter and where the value came from.
Works on both backends.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, TypeVar

from vnd_ros.parameter import ParameterType
from vnd_ros.runtime import BACKEND, Parameter, ParameterDescriptor, node_parameter_overrides

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a parameter config: a frozen dataclass

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
    default: Any  # None only for an optional field left unset
    description: str
    length: int | None = None  # items of a fixed-length tuple field (None: any number)
    optional: bool = False  # the field is 'X | None': the parameter may stay unset


def freeze_parameters(
    node: Any,
    config_cls: type[T],
    namespace: str = "",
    *,
    defaults: T | None = None,
    declared_elsewhere: Collection[str] = (),
) -> T:
    """Declare one parameter per field of ``config_cls`` on ``node`` and return the values.

    Args:
        node: a Node of either backend.
        config_cls: a frozen dataclass; fields typed bool, int, float, str, list[...] /
            tuple[..., ...] of those, ``X | None`` of those, or nested frozen dataclasses.
        namespace: prefix of the parameter names ('' for none).
        defaults: an instance of ``config_cls`` whose values are the defaults (None: the
            class's own field defaults).
        declared_elsewhere: parameter names another config of the node declares (see
            :func:`parameter_names`): overrides of those are not refused here.

    Raises:
        ParameterError: an override is undeclared or mistyped (names it and its source).
        TypeError: the dataclass is not frozen, a field type is unsupported or a field has
            no description.
    """
    prefix = f"{namespace}." if namespace else ""
    specs = _specs(config_cls, prefix, defaults)
    overrides = node_parameter_overrides(node)
    known = {s.name for s in specs}
    _reject_undeclared(node, overrides, known, known | set(declared_elsewhere), prefix)
    values: dict[str, Any] = {}
    for spec in specs:
        override = overrides.get(spec.name)
        if override is not None:
            checked = _check_type(spec, override.value, override.source)
            _prepare_rclpy_override(node, spec.name, checked)
        descriptor = ParameterDescriptor(description=spec.description, type=int(_ptype(spec)))
        parameter = node.declare_parameter(spec.name, _declared_default(spec), descriptor)
        value = parameter.value
        values[spec.name] = tuple(value) if spec.is_tuple and value is not None else value
    return _build(config_cls, prefix, values)


def parameter_names(config_cls: type, namespace: str = "") -> frozenset[str]:
    """Names of the parameters :func:`freeze_parameters` declares for ``config_cls``."""
    return frozenset(s.name for s in _specs(config_cls, f"{namespace}." if namespace else ""))


def _specs(config_cls: type, prefix: str, defaults: Any = None) -> list[_Spec]:
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls!r} is not a dataclass")
    params = getattr(config_cls, "__dataclass_params__", None)  # set by @dataclass
    if params is None or not params.frozen:
        raise TypeError(f"{config_cls.__name__} must be a frozen dataclass (frozen=True)")
    hints = typing.get_type_hints(config_cls)
    comments = _field_comments(config_cls)
    specs: list[_Spec] = []
    for f in dataclasses.fields(config_cls):
        hint = hints[f.name]
        name = prefix + f.name
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:  # a parameter is declared with its default
            raise TypeError(f"{config_cls.__name__}.{f.name}: no default value")
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            specs.extend(_specs(hint, name + ".", default))
            continue
        description = f.metadata.get("description") or comments.get(f.name)
        if not description:
            raise TypeError(
                f"{config_cls.__name__}.{f.name}: no description (use param(default, "
                f"'...') or a '# comment' after or above the field)"
            )
        element, is_sequence, length, optional = _unpack_hint(hint, config_cls, f.name)
        spec_hint = (element,) if is_sequence else element
        is_tuple = is_sequence and typing.get_origin(_strip_none(hint)) is tuple
        specs.append(_Spec(name, spec_hint, is_tuple, default, description, length, optional))
    return specs


def _strip_none(hint: Any) -> Any:
    """``X`` of an ``X | None`` annotation; any other annotation unchanged."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _unpack_hint(hint: Any, cls: type, name: str) -> tuple[type, bool, int | None, bool]:
    """(scalar type, is a sequence, fixed tuple length, is optional) of a field annotation."""
    inner = _strip_none(hint)
    optional = inner is not hint
    origin = typing.get_origin(inner)
    if inner in _SCALARS:
        return inner, False, None, optional
    if origin in (list, tuple):
        all_args = typing.get_args(inner)
        args = [a for a in all_args if a is not Ellipsis]
        if len(set(args)) == 1 and args[0] in _SCALARS:
            fixed = origin is tuple and Ellipsis not in all_args
            return args[0], True, len(args) if fixed else None, optional
    raise TypeError(f"{cls.__name__}.{name}: unsupported parameter type {hint!r}")


@functools.cache
def _field_comments(config_cls: type) -> dict[str, str]:
    """Description of each field from the class source: its trailing '# comment', else the
    '#' comment lines directly above it, joined into one line."""
    try:
        source = inspect.getsource(config_cls)
    except (OSError, TypeError):
        return {}
    source = textwrap.dedent(source)  # a class defined inside a function is indented
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    line_comments = {tok.start[0]: tok for tok in tokens if tok.type == tokenize.COMMENT}
    lines = source.splitlines()
    (class_def,) = ast.parse(source).body
    comments: dict[str, str] = {}
    for stmt in getattr(class_def, "body", []):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        end = stmt.end_lineno or stmt.lineno
        trailing = [line_comments[n] for n in range(stmt.lineno, end + 1) if n in line_comments]
        if trailing:
            comments[stmt.target.id] = trailing[0].string.lstrip("#").strip()
            continue
        above: list[str] = []
        line = stmt.lineno - 1
        while line >= 1 and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, lines[line - 1].strip().lstrip("#").strip())
            line -= 1
        if above:
            comments[stmt.target.id] = " ".join(above)
    return comments


def _ptype(spec: _Spec) -> ParameterType:
    if isinstance(spec.hint, tuple):
        return _ARRAYS[spec.hint[0]]
    return _SCALARS[spec.hint]


def _declared_default(spec: _Spec) -> Any:
    """The default as declare_parameter takes it; an unset optional field keeps its type."""
    if spec.default is not None:
        return list(spec.default) if isinstance(spec.default, tuple) else spec.default
    if BACKEND == "rclpy":  # pragma: no cover - rclpy takes the type as the value
        return Parameter.Type(int(_ptype(spec)))
    return None  # the dds node types it from the descriptor


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
            if not isinstance(value, list) or spec.length not in (None, len(value)):
                raise ValueError
            return [_check_scalar(spec.hint[0], item) for item in value]
        return _check_scalar(spec.hint, value)
    except ValueError:
        if isinstance(spec.hint, tuple):
            count = f"{spec.length} " if spec.length is not None else ""
            expected = f"list of {count}{spec.hint[0].__name__}"
        else:
            expected = spec.hint.__name__
        raise ParameterError(
            f"parameter '{spec.name}' from {source}: expected {expected}, "
            f"got {_type_word(value)} {value!r}"
        ) from None


def _reject_undeclared(
    node: Any, overrides: dict, declared: set[str], accepted: set[str], prefix: str
) -> None:
    for name, override in overrides.items():
        if prefix and not name.startswith(prefix):
            continue  # another config of the node owns this namespace
        if name in accepted or name in _IMPLICIT_PARAMETERS or name.startswith(_IMPLICIT_PREFIXES):
            continue
        if node.has_parameter(name):
            continue
        close = difflib.get_close_matches(name, accepted, n=3, cutoff=0.75)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        # a nested name lists its own section (a config of many sections has many names)
        section = name.rpartition(".")[0]
        siblings = {n for n in accepted if n.rpartition(".")[0] == section} if section else set()
        known = ", ".join(sorted(siblings or declared))
        raise ParameterError(
            f"parameter '{name}' from {override.source} is not declared by node "
            f"'{node.get_fully_qualified_name()}' ({hint}declared: {known})"
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
