"""``ros2 run``-compatible command-line arguments for the dds backend (and provenance for both).

Recognised inside ``--ros-args ... [--]`` sections (several sections allowed, as in rcl):

- ``-p/--param [node:]name:=value``: a parameter override, the value typed by YAML rules;
- ``--params-file FILE``: ``node_name: {ros__parameters: {...}}`` with node keys written as
  ``node``, ``/ns/node``, ``/**``, ``/**/node`` or ``/ns/*``. A key without a leading '/' is
  made absolute, as rcl does, so ``node:`` matches a node in the root namespace only;
- ``-r/--remap [node:]from:=to``, including ``__node:=name`` and ``__ns:=/ns``;
- ``--log-level LEVEL`` or ``--log-level logger:=LEVEL``;
- ``-e/--enclave VALUE`` and the rcl logging switches are accepted and ignored.

Files and flags apply in command-line order: later ones override earlier ones. Within one
file, entries that match the node through a wildcard apply before entries naming it exactly.
Every error raises :class:`RosArgsError` naming the flag, or the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vnd_ros.names import (
    InvalidNameError,
    fully_qualified_name,
    normalize_namespace,
    resolve_topic_name,
    validate_node_name,
)

ROS_ARGS_FLAG = "--ros-args"
END_FLAG = "--"
LOG_LEVELS = ("debug", "info", "warn", "warning", "error", "fatal", "unset")
PARAMS_KEY = "ros__parameters"
# rcl logging switches that take no value; accepted so `ros2 run` command lines keep working
# (the rosout pair is not ignored: the dds backend honours it).
_IGNORED_SWITCHES = frozenset(
    {
        "--enable-stdout-logs",
        "--disable-stdout-logs",
        "--enable-external-lib-logs",
        "--disable-external-lib-logs",
    }
)
_IGNORED_WITH_VALUE = frozenset({"-e", "--enclave", "--log-config-file", "--log-file-name"})


class RosArgsError(ValueError):
    """A malformed ``--ros-args`` section or parameters file."""


@dataclass(frozen=True)
class ParamOverride:
    """One parameter value from the command line, with where it came from."""

    value: Any  # YAML-typed value: bool, int, float, str or a homogeneous list of those
    source: str  # e.g. "-p flag 'gain:=2'" or "params.yaml:12"


@dataclass(frozen=True)
class _ParamRule:
    node_pattern: str  # absolute pattern such as '/**', '/ns/node' (may contain * and **)
    name: str  # parameter name, nested keys joined by '.'
    override: ParamOverride
    wildcard: bool  # the pattern contains '*': applied before exact entries of the same file
    origin: int  # position of the flag or file on the command line


@dataclass(frozen=True)
class Remap:
    """A ``-r [node:]from:=to`` rule."""

    from_name: str  # '__node', '__ns' or a topic name as written (relative, '~/' or absolute)
    to_name: str
    node: str | None  # only nodes with this name, or every node when None
    source: str  # the flag as written, for error messages


@dataclass
class RosArgs:
    """Parsed ROS arguments of one process."""

    remaps: list[Remap] = field(default_factory=list)
    params_files: list[Path] = field(default_factory=list)
    log_level: str | None = None  # default logger level, lower case
    logger_levels: dict[str, str] = field(default_factory=dict)  # logger name -> level
    rosout_logs: bool = True  # --enable/--disable-rosout-logs: log lines also on /rosout
    unparsed: list[str] = field(default_factory=list)  # the non-ROS arguments, in order
    _rules: list[_ParamRule] = field(default_factory=list)

    def node_name(self, default: str) -> str:
        """Node name after ``__node`` remaps (a global rule or one scoped to ``default``)."""
        name = default
        for rule in self.remaps:
            if rule.from_name in ("__node", "__name") and rule.node in (None, default):
                name = rule.to_name
        return validate_node_name(name)

    def namespace(self, default: str | None, node_name: str) -> str:
        """Node namespace after ``__ns`` remaps; absolute, e.g. '/' or '/uav1'."""
        namespace = default
        for rule in self.remaps:
            if rule.from_name == "__ns" and rule.node in (None, node_name):
                namespace = rule.to_name
        return normalize_namespace(namespace)

    def resolve_topic(self, topic: str, namespace: str, node_name: str) -> str:
        """Fully qualified topic ``topic`` of node ``node_name`` after the first matching remap."""
        resolved = resolve_topic_name(topic, namespace, node_name)
        for rule in self.remaps:
            if rule.from_name.startswith("__") or rule.node not in (None, node_name):
                continue
            try:
                match = resolve_topic_name(rule.from_name, namespace, node_name) == resolved
                if match:
                    return resolve_topic_name(rule.to_name, namespace, node_name)
            except InvalidNameError as err:
                raise RosArgsError(f"remap '{rule.source}': {err}") from err
        return resolved

    def parameter_overrides(self, namespace: str, node_name: str) -> dict[str, ParamOverride]:
        """Parameter overrides that apply to the node ``namespace``/``node_name``, by name."""
        fqn = fully_qualified_name(namespace, node_name)
        matching = [r for r in self._rules if _node_pattern_matches(r.node_pattern, fqn)]
        matching.sort(key=lambda r: (r.origin, not r.wildcard))
        return {rule.name: rule.override for rule in matching}


def parse_ros_args(argv: Sequence[str]) -> RosArgs:
    """Parse the ROS arguments in ``argv`` (program name excluded or included, both work).

    Raises :class:`RosArgsError` naming the offending flag, file or line.
    """
    parsed = RosArgs()
    args = list(argv)
    i = 0
    in_ros = False
    while i < len(args):
        arg = args[i]
        if arg == ROS_ARGS_FLAG:
            in_ros = True
        elif not in_ros:
            parsed.unparsed.append(arg)
        elif arg == END_FLAG:
            in_ros = False
        else:
            i = _parse_flag(parsed, args, i)
        i += 1
    return parsed


def remove_ros_args(argv: Sequence[str]) -> list[str]:
    """``argv`` without its ``--ros-args`` sections (like rclpy.utilities.remove_ros_args)."""
    return parse_ros_args(argv).unparsed


def _flag_value(args: list[str], i: int) -> str:
    if i + 1 >= len(args) or args[i + 1] in (END_FLAG, ROS_ARGS_FLAG):
        raise RosArgsError(f"--ros-args: flag '{args[i]}' needs a value")
    return args[i + 1]


def _parse_flag(parsed: RosArgs, args: list[str], i: int) -> int:
    """Apply the flag at ``args[i]``; returns the index of its last token."""
    flag = args[i]
    if flag in ("--enable-rosout-logs", "--disable-rosout-logs"):
        parsed.rosout_logs = flag == "--enable-rosout-logs"
        return i
    if flag in _IGNORED_SWITCHES:
        return i
    if flag in _IGNORED_WITH_VALUE:
        _flag_value(args, i)
        return i + 1
    if flag in ("-p", "--param"):
        _add_param_flag(parsed, _flag_value(args, i), origin=i)
    elif flag == "--params-file":
        path = Path(_flag_value(args, i))
        parsed.params_files.append(path)
        parsed._rules.extend(load_params_file(path, origin=i))
    elif flag in ("-r", "--remap"):
        parsed.remaps.append(_parse_remap(_flag_value(args, i)))
    elif flag == "--log-level":
        _parse_log_level(parsed, _flag_value(args, i))
    else:
        raise RosArgsError(f"--ros-args: unknown flag '{flag}'")
    return i + 1


def _split_rule(text: str, flag: str) -> tuple[str | None, str, str]:
    """'[node:]lhs:=rhs' -> (node, lhs, rhs)."""
    if ":=" not in text:
        raise RosArgsError(f"{flag} '{text}': expected 'name:=value'")
    lhs, rhs = text.split(":=", 1)
    node = None
    if ":" in lhs:
        node, lhs = lhs.split(":", 1)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", node):
            raise RosArgsError(f"{flag} '{text}': invalid node name prefix '{node}'")
    if not lhs:
        raise RosArgsError(f"{flag} '{text}': empty name before ':='")
    return node, lhs, rhs


def _add_param_flag(parsed: RosArgs, text: str, origin: int) -> None:
    node, name, raw = _split_rule(text, "-p")
    source = f"-p flag '{text}'"
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as err:
        raise RosArgsError(f"{source}: value is not valid YAML: {err}") from err
    value = _check_value(value, source)
    pattern = "/**" if node is None else "/**/" + node
    parsed._rules.append(
        _ParamRule(pattern, name, ParamOverride(value, source), node is None, origin)
    )


def _parse_remap(text: str) -> Remap:
    node, lhs, rhs = _split_rule(text, "-r")
    if not rhs:
        raise RosArgsError(f"-r '{text}': empty replacement after ':='")
    try:
        if lhs in ("__node", "__name"):
            validate_node_name(rhs)
        elif lhs == "__ns":
            if not rhs.startswith("/"):
                raise RosArgsError(f"-r '{text}': __ns must be absolute (start with '/')")
            normalize_namespace(rhs)
        elif lhs.startswith("__"):
            raise RosArgsError(f"-r '{text}': unsupported special name '{lhs}'")
        else:
            for name in (lhs, rhs):
                resolve_topic_name(name, "/", "n")  # syntax check with a placeholder node
    except InvalidNameError as err:
        raise RosArgsError(f"-r '{text}': {err}") from err
    return Remap(lhs, rhs, node, f"-r {text}")


def _parse_log_level(parsed: RosArgs, text: str) -> None:
    if ":=" in text:
        logger, level = text.split(":=", 1)
    else:
        logger, level = "", text
    level = level.lower()
    if level not in LOG_LEVELS:
        raise RosArgsError(f"--log-level '{text}': level must be one of {', '.join(LOG_LEVELS)}")
    if logger:
        parsed.logger_levels[logger] = level
    else:
        parsed.log_level = level


def _check_value(value: Any, source: str) -> Any:
    """A parameter value as rcl allows it: scalar or homogeneous list (ints promote to float)."""
    scalar = (bool, int, float, str)
    if isinstance(value, scalar):
        return value
    if isinstance(value, list):
        if not value:
            return value
        found = [_kind(v) for v in value]
        if None in found:
            raise RosArgsError(f"{source}: list items must be bool, int, float or string")
        kinds = {k for k in found if k is not None}
        if kinds == {"int", "float"}:
            return [float(v) for v in value]
        if len(kinds) > 1:
            raise RosArgsError(f"{source}: list mixes types {sorted(kinds)}")
        return value
    raise RosArgsError(f"{source}: unsupported value {value!r} (use a scalar or a list of scalars)")


def _kind(value: Any) -> str | None:
    for kind, cls in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(value, cls):
            return kind
    return None


def load_params_file(path: Path, origin: int = 0) -> list[_ParamRule]:
    """Parameter rules of a ``ros__parameters`` YAML file, each with its file:line source."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise RosArgsError(f"--params-file {path}: cannot read: {err.strerror}") from err
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as err:
        raise RosArgsError(f"--params-file {path}: invalid YAML: {err}") from err
    finally:
        loader.dispose()
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise RosArgsError(f"{path}:{root.start_mark.line + 1}: top level must map node names")
    rules: list[_ParamRule] = []
    for key_node, node_body in root.value:
        pattern = _node_key(key_node, path)
        where = f"{path}:{key_node.start_mark.line + 1}"
        params = _ros_parameters(node_body, where, path)
        for name, value_node in _flatten(params, "", path):
            source = f"{path}:{value_node.start_mark.line + 1}"
            value = _check_value(loader.construct_object(value_node, deep=True), source)
            override = ParamOverride(value, source)
            rules.append(_ParamRule(pattern, name, override, "*" in pattern, origin))
    return rules


def _node_key(key_node: yaml.Node, path: Path) -> str:
    key = str(key_node.value)
    where = f"{path}:{key_node.start_mark.line + 1}"
    if not key:
        raise RosArgsError(f"{where}: empty node name")
    pattern = key if key.startswith("/") else "/" + key
    for token in pattern.strip("/").split("/"):
        if token not in ("*", "**") and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", token):
            raise RosArgsError(f"{where}: invalid node name key '{key}'")
    return pattern


def _ros_parameters(body: yaml.Node, where: str, path: Path) -> yaml.MappingNode:
    if not isinstance(body, yaml.MappingNode):
        raise RosArgsError(f"{where}: expected a mapping with '{PARAMS_KEY}:'")
    for key_node, value_node in body.value:
        if key_node.value == PARAMS_KEY:
            if not isinstance(value_node, yaml.MappingNode):
                line = value_node.start_mark.line + 1
                raise RosArgsError(f"{path}:{line}: '{PARAMS_KEY}' must be a mapping")
            return value_node
        line = key_node.start_mark.line + 1
        raise RosArgsError(f"{path}:{line}: unexpected key '{key_node.value}' (need {PARAMS_KEY})")
    raise RosArgsError(f"{where}: missing '{PARAMS_KEY}:'")


def _flatten(mapping: yaml.MappingNode, prefix: str, path: Path) -> list[tuple[str, yaml.Node]]:
    """(dotted name, value node) pairs of a nested parameter mapping."""
    items: list[tuple[str, yaml.Node]] = []
    for key_node, value_node in mapping.value:
        name = prefix + str(key_node.value)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_./]*$", name):
            line = key_node.start_mark.line + 1
            raise RosArgsError(f"{path}:{line}: invalid parameter name '{name}'")
        if isinstance(value_node, yaml.MappingNode):
            items.extend(_flatten(value_node, name + ".", path))
        else:
            items.append((name, value_node))
    return items


def _node_pattern_matches(pattern: str, fqn: str) -> bool:
    """rcl's node-key wildcard rules: '*' one token, '**' any number of tokens (also zero)."""
    regex = ""
    for token in pattern.strip("/").split("/"):
        if token == "**":
            regex += r"(/[A-Za-z0-9_]+)*"
        elif token == "*":
            regex += r"/[A-Za-z0-9_]+"
        else:
            regex += "/" + re.escape(token)
    if pattern.endswith("/**"):
        # '/**' alone or '/ns/**' must still cover the node token itself
        regex = regex[: -len(r"(/[A-Za-z0-9_]+)*")] + r"(/[A-Za-z0-9_]+)+"
    return re.fullmatch(regex, fqn) is not None
