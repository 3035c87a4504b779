"""Parse ROS 2 YAML frontend launch files into action descriptions (nothing is evaluated here).

Supported tags and attributes (names as in ros2/launch and ros2/launch_ros frontends)::

    arg: name, default, description          let: name, value
    set_env: name, value                     push_ros_namespace / push-ros-namespace: namespace
    group: scoped, children (or a bare list of children)
    include: file, arg (list of name/value)
    executable: cmd, name, cwd, output, respawn, respawn_delay, respawn_max_retries, on_exit
    node: pkg, exec, name, namespace, param (name/value, nested param, or from), remap (from/to),
          args, ros_args, output, respawn, respawn_delay, respawn_max_retries, on_exit

Every action also accepts ``if`` and ``unless``. Anything else is a LaunchError naming the tag
or attribute, the file and the line, so a typo never silently drops part of a launch file.

Attribute typing follows the Jazzy YAML frontend (launch 3.4, launch_ros 0.26), which checks
the YAML type of each attribute and converts nothing (``launch_yaml.Entity.get_attr`` with
``launch.utilities.type_utils.is_instance_of``):

- text attributes (name, default, value, cmd, output, respawn, if, ...) must be YAML strings:
  ``default: 0``, ``if: true`` or ``respawn: true`` are rejected there, so they are here; write
  ``"0"``, ``"true"``. ``respawn`` is a substitution in Jazzy, so ``respawn: $(var x)`` works.
- ``respawn_delay`` must be a YAML float (``2.0``): an integer fails the type check and a
  quoted ``"2.0"`` passes it but then breaks the non-negativity comparison in
  ``ExecuteProcess.parse``; ``respawn_max_retries`` must be a YAML integer for the same reason.
- ``on_exit`` accepts only the literal ``shutdown``.
- a parameter ``value`` is any YAML scalar or a uniform list (items of one type, or one type
  mixed with strings); mappings and nested lists are rejected.
- ``param``, ``remap`` and an include's ``arg`` are non-empty lists of mappings.

Where ``vnd launch`` stays stricter than ros2 launch, and why:

- ``scoped`` must be a YAML boolean: ros2 launch also takes a string there and then uses its
  truthiness, so ``scoped: "false"`` would silently scope the group.
- ``respawn_max_retries: true`` (a boolean passes ros2 launch's integer check as 1) is refused.
- names of ``arg``/``let``/params and include arguments cannot use substitutions, ``node``
  needs ``pkg`` (the entry point is found through it), and tags/attributes outside the subset
  above are errors: all three keep every name and process known before anything starts.
- a crash-looping process stops being respawned after a few start-up failures (see
  ``LaunchService``) where ros2 launch, without ``respawn_max_retries``, respawns forever.
- ``respawn`` and conditions take true/false/1/0 (any case); ros2 launch's YAML coercion of
  ``respawn`` would also take yes/no/on/off. Duplicate keys are errors (yaml.safe_load keeps
  the last one silently).

Nowhere looser: every file accepted here passes the frontend's attribute checks. ``args`` on
``executable`` (in the launch XML design document, but not read by ``ExecuteProcess.parse``)
is refused with the hint to put the arguments in ``cmd``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vnd_ros.launch.entities import (
    Action,
    Condition,
    DeclareArg,
    Executable,
    Group,
    Include,
    LaunchDescription,
    Let,
    Node,
    ProcessOptions,
    PushRosNamespace,
    SetEnv,
)
from vnd_ros.launch.source import (
    LaunchError,
    LocatedDict,
    LocatedList,
    Location,
    load_launch_yaml,
)
from vnd_ros.launch.substitutions import Template, parse_template

CONDITION_KEYS = ("if", "unless")


class _Entity:
    """One tag of a launch file: tracks which attributes were consumed and checks their YAML
    types the way the Jazzy YAML frontend's ``Entity.get_attr`` does."""

    def __init__(self, tag: str, body: Any, where: Location, label: str | None = None) -> None:
        self.tag = tag
        self.where = where
        if body is None:
            body = LocatedDict()
        if not isinstance(body, dict):
            raise LaunchError(f"'{tag}' expects a mapping of attributes", where)
        self.body = body
        self.read: set[str] = set()
        name = body.get("name")
        self.label = label or (f"{tag} '{name}'" if isinstance(name, str) else f"'{tag}'")

    def line_of(self, key: str) -> Location:
        lines = getattr(self.body, "key_lines", {})
        return Location(self.where.file, lines.get(key, self.where.line))

    def has(self, key: str) -> bool:
        return key in self.body

    def error(self, key: str, rule: str) -> LaunchError:
        """A LaunchError at ``key``'s line: "<tag 'name'>: attribute 'key' <rule>"."""
        return LaunchError(f"{self.label}: attribute '{key}' {rule}", self.line_of(key))

    def raw(self, key: str, required: bool = False) -> Any:
        if key not in self.body:
            if required:
                raise LaunchError(f"{self.label} is missing required attribute '{key}'", self.where)
            return None
        self.read.add(key)
        return self.body[key]

    def text(self, key: str, required: bool = False) -> str | None:
        """A text attribute: a YAML string (mirrors ``get_attr(key)`` with its default
        ``data_type=str``, which rejects booleans and numbers instead of converting them)."""
        present = self.has(key)
        value = self.raw(key, required)
        if not present:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"must be a string (quote it), got {describe(value)}")
        return value

    def template(self, key: str, required: bool = False) -> Template | None:
        value = self.text(key, required)
        return None if value is None else parse_template(value, self.line_of(key))

    def required_text(self, key: str) -> str:
        """A text attribute that must be present."""
        value = self.text(key, required=True)
        assert value is not None  # text() raised when missing
        return value

    def required(self, key: str) -> Template:
        """A template attribute that must be present."""
        return parse_template(self.required_text(key), self.line_of(key))

    def boolean(self, key: str) -> bool | None:
        """A YAML boolean (``get_attr(key, data_type=bool)``; see the module notes on why a
        string is refused here)."""
        present = self.has(key)
        value = self.raw(key)
        if not present:
            return None
        if not isinstance(value, bool):
            raise self.error(key, f"must be a YAML boolean (true/false), got {describe(value)}")
        return value

    def non_negative_float(self, key: str) -> float | None:
        """A YAML float >= 0 (``get_attr(key, data_type=float)`` then the range check of
        ``ExecuteProcess.parse``, which fails on a string)."""
        present = self.has(key)
        value = self.raw(key)
        if not present:
            return None
        if not isinstance(value, float):
            rule = "must be a YAML float such as 2.0 (not an integer or a string)"
            raise self.error(key, f"{rule}, got {describe(value)}")
        if value < 0.0 or value != value:
            raise self.error(key, f"must be a non-negative number, got {value!r}")
        return value

    def integer(self, key: str) -> int | None:
        """A YAML integer (``get_attr(key, data_type=int)``; a string passes that check but
        fails later when ExecuteLocal compares it with the respawn count)."""
        present = self.has(key)
        value = self.raw(key)
        if not present:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be a YAML integer such as 3, got {describe(value)}")
        return value

    def entries(self, key: str) -> list[_Entity]:
        """A list attribute whose items are mappings (param, remap, arg of include), as
        ``get_attr(key, data_type=List[Entity])`` requires: a non-empty list of mappings."""
        present = self.has(key)
        value = self.raw(key)
        if not present:
            return []
        if not isinstance(value, list) or not value:
            raise self.error(key, f"must be a non-empty list of mappings, got {describe(value)}")
        lines = getattr(value, "item_lines", [self.line_of(key).line] * len(value))
        entities = []
        for item, line in zip(value, lines, strict=True):
            where = Location(self.where.file, line)
            if not isinstance(item, dict):
                rule = f"each '{key}' entry must be a mapping, got {describe(item)}"
                raise LaunchError(f"{self.label}: {rule}", where)
            name = item.get("name")
            label = f"{key} '{name}' of {self.label}" if isinstance(name, str) else None
            entities.append(_Entity(key, item, where, label or f"'{key}' of {self.label}"))
        return entities

    def finish(self) -> None:
        """Reject attributes nobody consumed: they are outside the supported subset (the
        frontend's ``assert_entity_completely_parsed`` rejects unknown keys the same way)."""
        for key in self.body:
            if key not in self.read:
                raise LaunchError(
                    f"{self.label}: unsupported attribute '{key}'", self.line_of(str(key))
                )


def describe(value: Any) -> str:
    """A YAML value named by its type, for error messages: "the string 'true'"."""
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the float {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{value!r}"


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
        if not isinstance(item, LocatedDict) or len(item) != 1:  # the loader's mappings
            raise LaunchError("each action must be a mapping with exactly one tag", where)
        tag = next(iter(item))
        actions.append(_parse_action(str(tag), item[tag], Location(path, item.key_lines[tag])))
    return tuple(actions)


def _parse_action(tag: str, body: Any, where: Location) -> Action:
    if tag == "group" and isinstance(body, LocatedList):  # bare-list form: group: [...]
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
    """``if``/``unless``: text attributes, as ``launch.Action.parse`` reads them."""
    present = [key for key in CONDITION_KEYS if entity.has(key)]
    if len(present) > 1:
        raise LaunchError(f"{entity.label} has both 'if' and 'unless'", entity.where)
    if not present:
        return None
    return Condition(present[0] == "unless", entity.required(present[0]))


def _plain_name(entity: _Entity) -> str:
    name = entity.required_text("name")
    if "$(" in name:
        raise entity.error("name", "cannot use substitutions in vnd launch")
    return name


def _parse_arg(entity: _Entity, condition: Condition | None) -> DeclareArg:
    """Mirrors ``DeclareLaunchArgument.parse``: name, default and description are text."""
    name = _plain_name(entity)
    return DeclareArg(
        entity.where,
        condition,
        name,
        entity.template("default"),
        entity.text("description") or "",
    )


def _parse_let(entity: _Entity, condition: Condition | None) -> Let:
    """Mirrors ``SetLaunchConfiguration.parse``: name and value are text."""
    name = _plain_name(entity)
    value = entity.required("value")
    return Let(entity.where, condition, name, value)


def _parse_set_env(entity: _Entity, condition: Condition | None) -> SetEnv:
    """Mirrors ``SetEnvironmentVariable.parse``: name and value are text."""
    name, value = entity.required("name"), entity.required("value")
    return SetEnv(entity.where, condition, name, value)


def _parse_push_ns(entity: _Entity, condition: Condition | None) -> PushRosNamespace:
    """Mirrors launch_ros ``PushRosNamespace.parse``: namespace is text."""
    namespace = entity.required("namespace")
    return PushRosNamespace(entity.where, condition, namespace)


def _parse_group(entity: _Entity, condition: Condition | None) -> Group:
    """Mirrors ``GroupAction.parse``: scoped is a boolean, children a list of actions."""
    scoped = entity.boolean("scoped")
    children = entity.raw("children")
    if children is None:
        children = LocatedList()
        children.item_lines = []
    if not isinstance(children, LocatedList):
        raise entity.error("children", "must be a list of actions")
    actions = _parse_children(children, entity.where.file)
    return Group(entity.where, condition, True if scoped is None else scoped, actions)


def _parse_include(entity: _Entity, condition: Condition | None) -> Include:
    """Mirrors ``IncludeLaunchDescription.parse``: file is text, arg a list of name/value."""
    file = entity.required("file")
    args = []
    for arg in entity.entries("arg"):
        name = _plain_name(arg)
        value = arg.required("value")
        arg.finish()
        args.append((name, value))
    return Include(entity.where, condition, file, tuple(args))


def _process_options(entity: _Entity, node: bool) -> ProcessOptions:
    """Mirrors ``ExecuteProcess.parse`` (which ``Node.parse`` extends with args/ros_args)."""
    on_exit = entity.text("on_exit")
    if on_exit is not None and on_exit != "shutdown":
        raise entity.error("on_exit", f"accepts only 'shutdown', got {describe(on_exit)}")
    if not node and entity.has("args"):
        rule = "is not read by ros2 launch's executable (put the arguments in 'cmd')"
        raise entity.error("args", rule)
    return ProcessOptions(
        name=entity.template("name"),
        output=entity.template("output"),
        respawn=entity.template("respawn"),
        respawn_delay_s=entity.non_negative_float("respawn_delay"),
        respawn_max_retries=entity.integer("respawn_max_retries"),
        required=on_exit == "shutdown",
        args=entity.template("args") if node else None,
    )


def _parse_executable(entity: _Entity, condition: Condition | None) -> Executable:
    cmd = entity.required("cmd")
    cwd = entity.template("cwd")
    return Executable(entity.where, condition, cmd, cwd, _process_options(entity, node=False))


def _parse_node(entity: _Entity, condition: Condition | None) -> Node:
    """Mirrors launch_ros ``Node.parse`` and ``Node.parse_nested_parameters``."""
    pkg, executable = entity.required("pkg"), entity.required("exec")
    param_files: list[Template] = []
    params: dict[str, Any] = {}
    for param in entity.entries("param"):
        if param.has("from"):
            if param.has("name"):
                raise param.error("from", "and 'name' are mutually exclusive")
            param_files.append(param.required("from"))
        elif param.has("name"):
            _parse_inline_param(param, params)
        else:
            raise LaunchError(f"{param.label} needs a 'name' or a 'from'", param.where)
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
        options=_process_options(entity, node=True),
    )


def _parse_inline_param(param: _Entity, into: dict[str, Any]) -> None:
    """``{name, value}`` or ``{name, param: [...]}`` (nested) into ``into``."""
    name = _plain_name(param)
    if param.has("value") == param.has("param"):
        message = f"{param.label} needs exactly one of 'value' or 'param' (nested)"
        raise LaunchError(message, param.where)
    if param.has("param"):
        nested: dict[str, Any] = {}
        for child in param.entries("param"):
            _parse_inline_param(child, nested)
            child.finish()
        into[name] = nested
        return
    into[name] = _param_value(param, param.raw("value"))


def _param_value(param: _Entity, value: Any) -> Any:
    """A parameter value: a YAML scalar or a uniform list, the rule of ``get_attr('value',
    data_type=None)`` (``is_instance_of_valid_type`` with strings allowed in lists). Strings
    become templates, typed after evaluation as launch_ros does; others stay."""
    where = param.line_of("value")
    if isinstance(value, list):
        kinds = {type(item) for item in value}
        scalar = all(isinstance(item, bool | int | float | str) for item in value)
        if not scalar or len(kinds - {str}) > 1:
            rule = "must be a scalar or a list of scalars of one type (strings may mix in)"
            raise param.error("value", f"{rule}, got {value!r}")
        return [parse_template(i, where) if isinstance(i, str) else i for i in value]
    if isinstance(value, str):
        return parse_template(value, where)
    if isinstance(value, bool | int | float):
        return value
    raise param.error("value", f"must be a scalar or a list of scalars, got {describe(value)}")


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
