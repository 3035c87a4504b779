"""Parse ROS 2 YAML frontend launch files into action descriptions (nothing is evaluated here).

Supported tags and attributes (names as in ros2/launch and ros2/launch_ros frontends)::

    arg: name, default, description          let: name, value
    set_env: name, value                     push_ros_namespace / push-ros-namespace: namespace
    group: scoped, children (or a bare list of children)
    include: file, arg (list of name/value)
    executable: cmd, args, name, cwd, output, respawn, respawn_delay
    node: pkg, exec, name, namespace, param (name/value, nested param, or from), remap (from/to),
          args, ros_args, output, respawn, respawn_delay

Every action also accepts ``if`` and ``unless``. Anything else is a LaunchError naming the tag
or attribute, the file and the line, so a typo never silently drops part of a launch file.

Portability with ``ros2 launch``: ``args`` of ``executable`` comes from the launch XML design
document and older launch releases; recent ExecuteProcess frontends read only ``cmd``, so
shared files put arguments in ``cmd``. ros2 launch does not substitute inside ``respawn`` and
``scoped`` (booleans), so shared files write them as literals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnd_ros.launch.source import (
    LaunchError,
    LocatedDict,
    LocatedList,
    Location,
    load_launch_yaml,
)
from vnd_ros.launch.substitutions import Template, parse_template

CONDITION_KEYS = ("if", "unless")


@dataclass(frozen=True)
class Condition:
    """An ``if`` or ``unless`` attribute."""

    negate: bool  # True for "unless"
    value: Template  # must evaluate to true/false/1/0


@dataclass(frozen=True)
class Action:
    """Base of every parsed action: where it was written and its optional condition."""

    where: Location  # file and line of the tag
    condition: Condition | None  # if/unless, None when unconditional


@dataclass(frozen=True)
class DeclareArg(Action):
    """``arg``: a launch argument, overridable from the command line or an include."""

    name: str  # argument name
    default: Template | None  # None: the argument is required
    description: str  # shown by --show-args


@dataclass(frozen=True)
class Let(Action):
    """``let``: set a launch configuration."""

    name: str  # configuration name
    value: Template  # its value


@dataclass(frozen=True)
class SetEnv(Action):
    """``set_env``: set an environment variable for the processes started after it."""

    name: Template  # variable name
    value: Template  # its value


@dataclass(frozen=True)
class PushRosNamespace(Action):
    """``push_ros_namespace``: prefix the namespace of the nodes that follow in the scope."""

    namespace: Template  # namespace to push (relative to the current one unless absolute)


@dataclass(frozen=True)
class Group(Action):
    """``group``: nested actions, scoped by default (changes do not leak out)."""

    scoped: bool  # True: launch configurations, env and namespace are restored after the group
    children: tuple[Action, ...]  # the nested actions, in order


@dataclass(frozen=True)
class Include(Action):
    """``include``: another YAML launch file with arguments."""

    file: Template  # path of the included launch file
    args: tuple[tuple[str, Template], ...]  # (name, value) launch arguments


@dataclass(frozen=True)
class ProcessOptions:
    """Attributes shared by node and executable."""

    name: Template | None  # node name (node) or process label (executable)
    output: Template | None  # screen, log or both (default log)
    respawn: Template | None  # restart the process whenever it exits
    respawn_delay_s: Template | None  # seconds to wait before a respawn
    args: Template | None  # extra command-line arguments, split on whitespace


@dataclass(frozen=True)
class Executable(Action):
    """``executable``: any command."""

    cmd: Template  # command line, split on whitespace after substitution
    cwd: Template | None  # working directory (default: the launcher's)
    options: ProcessOptions  # name, output, respawn, args


@dataclass(frozen=True)
class Node(Action):
    """``node``: a ROS node executable with ROS arguments."""

    pkg: Template  # package providing the executable
    exec: Template  # console_scripts entry (or lib/<pkg>/<exec> in a ROS install)
    namespace: Template | None  # node namespace, relative to the pushed namespace
    param_files: tuple[Template, ...]  # param entries with from:, in order
    params: dict[str, Any]  # inline params: Template, literal, list or nested dict leaves
    remaps: tuple[tuple[Template, Template], ...]  # (from, to)
    ros_args: Template | None  # extra ROS arguments after --ros-args
    options: ProcessOptions  # name, output, respawn, args


@dataclass(frozen=True)
class LaunchDescription:
    """A parsed launch file."""

    file: Path  # the launch file
    actions: tuple[Action, ...]  # top-level actions in order

    @property
    def declared_args(self) -> list[DeclareArg]:
        """Arguments declared at the top level of this file (what --show-args prints)."""
        return [action for action in self.actions if isinstance(action, DeclareArg)]


class _Entity:
    """One tag of a launch file: tracks which attributes were consumed."""

    def __init__(self, tag: str, body: Any, where: Location) -> None:
        self.tag = tag
        self.where = where
        if body is None:
            body = LocatedDict()
        if not isinstance(body, dict):
            raise LaunchError(f"'{tag}' expects a mapping of attributes", where)
        self.body = body
        self.read: set[str] = set()

    def line_of(self, key: str) -> Location:
        lines = getattr(self.body, "key_lines", {})
        return Location(self.where.file, lines.get(key, self.where.line))

    def has(self, key: str) -> bool:
        return key in self.body

    def raw(self, key: str, required: bool = False) -> Any:
        if key not in self.body:
            if required:
                raise LaunchError(f"'{self.tag}' is missing required attribute '{key}'", self.where)
            return None
        self.read.add(key)
        return self.body[key]

    def text(self, key: str, required: bool = False) -> str | None:
        value = self.raw(key, required)
        if value is None:
            return None
        if isinstance(value, dict | list):
            message = f"attribute '{key}' of '{self.tag}' must be a scalar"
            raise LaunchError(message, self.line_of(key))
        return scalar_text(value)

    def template(self, key: str, required: bool = False) -> Template | None:
        value = self.text(key, required)
        return None if value is None else parse_template(value, self.line_of(key))

    def required_text(self, key: str) -> str:
        """A scalar attribute that must be present."""
        value = self.text(key, required=True)
        assert value is not None  # text() raised when missing
        return value

    def required(self, key: str) -> Template:
        """A template attribute that must be present."""
        return parse_template(self.required_text(key), self.line_of(key))

    def entries(self, key: str) -> list[_Entity]:
        """A list attribute whose items are mappings (param, remap, arg of include)."""
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            message = f"attribute '{key}' of '{self.tag}' must be a list"
            raise LaunchError(message, self.line_of(key))
        lines = getattr(value, "item_lines", [self.line_of(key).line] * len(value))
        return [
            _Entity(key, item, Location(self.where.file, line))
            for item, line in zip(value, lines, strict=True)
        ]

    def finish(self) -> None:
        """Reject attributes nobody consumed: they are outside the supported subset."""
        for key in self.body:
            if key not in self.read:
                raise LaunchError(
                    f"unsupported attribute '{key}' of '{self.tag}'", self.line_of(str(key))
                )


def scalar_text(value: Any) -> str:
    """A YAML scalar as the launch frontend sees it (booleans as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_launch_file(path: Path) -> LaunchDescription:
    """Parse one YAML launch file; any problem raises LaunchError naming file and line."""
    path = Path(path)
    if not path.name.endswith((".yaml", ".yml")):
        raise LaunchError("only YAML launch files (.launch.yaml) are supported", Location(path, 0))
    tree = load_launch_yaml(path)
    keys = list(tree)
    if keys != ["launch"]:
        line = tree.key_lines.get(keys[0], tree.line) if keys else tree.line
        raise LaunchError(
            f"the root must be a single 'launch' key, found {keys}", Location(path, line)
        )
    body = tree["launch"]
    where = Location(path, tree.key_lines["launch"])
    if body is None:
        return LaunchDescription(path, ())
    if not isinstance(body, LocatedList):
        raise LaunchError("'launch' must be a list of actions", where)
    return LaunchDescription(path, _parse_children(body, path))


def _parse_children(items: LocatedList, path: Path) -> tuple[Action, ...]:
    actions = []
    for item, line in zip(items, items.item_lines, strict=True):
        where = Location(path, line)
        if not isinstance(item, dict) or len(item) != 1:
            raise LaunchError("each action must be a mapping with exactly one tag", where)
        tag = next(iter(item))
        actions.append(_parse_action(str(tag), item[tag], Location(path, item.key_lines[tag])))
    return tuple(actions)


def _parse_action(tag: str, body: Any, where: Location) -> Action:
    if tag == "group" and isinstance(body, list):  # bare-list form: group: [children...]
        return Group(where, None, True, _parse_children(body, where.file))
    parser = _PARSERS.get(tag)
    if parser is None:
        supported = ", ".join(sorted(_PARSERS))
        raise LaunchError(f"unsupported tag '{tag}' (supported: {supported})", where)
    entity = _Entity(tag, body, where)
    condition = _parse_condition(entity)
    action = parser(entity, condition)
    entity.finish()
    return action


def _parse_condition(entity: _Entity) -> Condition | None:
    present = [key for key in CONDITION_KEYS if entity.has(key)]
    if len(present) > 1:
        raise LaunchError(f"'{entity.tag}' has both 'if' and 'unless'", entity.where)
    if not present:
        return None
    return Condition(present[0] == "unless", entity.required(present[0]))


def _plain_name(entity: _Entity) -> str:
    name = entity.required_text("name")
    if "$(" in name:
        raise LaunchError(f"the name of '{entity.tag}' cannot use substitutions", entity.where)
    return name


def _parse_arg(entity: _Entity, condition: Condition | None) -> DeclareArg:
    name = _plain_name(entity)
    return DeclareArg(
        entity.where,
        condition,
        name,
        entity.template("default"),
        entity.text("description") or "",
    )


def _parse_let(entity: _Entity, condition: Condition | None) -> Let:
    name = _plain_name(entity)
    value = entity.required("value")
    return Let(entity.where, condition, name, value)


def _parse_set_env(entity: _Entity, condition: Condition | None) -> SetEnv:
    name, value = entity.required("name"), entity.required("value")
    return SetEnv(entity.where, condition, name, value)


def _parse_push_ns(entity: _Entity, condition: Condition | None) -> PushRosNamespace:
    namespace = entity.required("namespace")
    return PushRosNamespace(entity.where, condition, namespace)


def _parse_group(entity: _Entity, condition: Condition | None) -> Group:
    scoped_text = entity.text("scoped")
    scoped = True
    if scoped_text is not None:
        if scoped_text.lower() not in ("true", "false"):
            raise LaunchError(f"'scoped' must be true or false, got '{scoped_text}'", entity.where)
        scoped = scoped_text.lower() == "true"
    children = entity.raw("children")
    if children is None:
        children = LocatedList()
        children.item_lines = []
    if not isinstance(children, LocatedList):
        raise LaunchError("'children' of 'group' must be a list of actions", entity.where)
    return Group(entity.where, condition, scoped, _parse_children(children, entity.where.file))


def _parse_include(entity: _Entity, condition: Condition | None) -> Include:
    file = entity.required("file")
    args = []
    for arg in entity.entries("arg"):
        name = _plain_name(arg)
        value = arg.required("value")
        arg.finish()
        args.append((name, value))
    return Include(entity.where, condition, file, tuple(args))


def _process_options(entity: _Entity) -> ProcessOptions:
    return ProcessOptions(
        name=entity.template("name"),
        output=entity.template("output"),
        respawn=entity.template("respawn"),
        respawn_delay_s=entity.template("respawn_delay"),
        args=entity.template("args"),
    )


def _parse_executable(entity: _Entity, condition: Condition | None) -> Executable:
    cmd = entity.required("cmd")
    cwd = entity.template("cwd")
    return Executable(entity.where, condition, cmd, cwd, _process_options(entity))


def _parse_node(entity: _Entity, condition: Condition | None) -> Node:
    pkg, executable = entity.required("pkg"), entity.required("exec")
    param_files: list[Template] = []
    params: dict[str, Any] = {}
    for param in entity.entries("param"):
        if param.has("from"):
            param_files.append(param.required("from"))
        else:
            _parse_inline_param(param, params)
        param.finish()
    remaps = []
    for remap in entity.entries("remap"):
        source, target = remap.required("from"), remap.required("to")
        remap.finish()
        remaps.append((source, target))
    return Node(
        entity.where,
        condition,
        pkg=pkg,
        exec=executable,
        namespace=entity.template("namespace"),
        param_files=tuple(param_files),
        params=params,
        remaps=tuple(remaps),
        ros_args=entity.template("ros_args"),
        options=_process_options(entity),
    )


def _parse_inline_param(param: _Entity, into: dict[str, Any]) -> None:
    """``{name, value}`` or ``{name, param: [...]}`` (nested) into ``into``."""
    name = _plain_name(param)
    if param.has("value") == param.has("param"):
        message = f"param '{name}' needs exactly one of 'value', 'param' or 'from'"
        raise LaunchError(message, param.where)
    if param.has("param"):
        nested: dict[str, Any] = {}
        for child in param.entries("param"):
            _parse_inline_param(child, nested)
            child.finish()
        into[name] = nested
        return
    into[name] = _param_value(param.raw("value"), param.line_of("value"))


def _param_value(value: Any, where: Location) -> Any:
    """Strings become templates (typed after evaluation, as launch_ros does); others stay."""
    if isinstance(value, str):
        return parse_template(value, where)
    if isinstance(value, list):
        return [_param_value(item, where) for item in value]
    if isinstance(value, bool | int | float):
        return value
    raise LaunchError(f"unsupported parameter value {value!r}", where)


_PARSERS = {
    "arg": _parse_arg,
    "let": _parse_let,
    "set_env": _parse_set_env,
    "push_ros_namespace": _parse_push_ns,
    "push-ros-namespace": _parse_push_ns,
    "group": _parse_group,
    "include": _parse_include,
    "executable": _parse_executable,
    "node": _parse_node,
}
