"""Evaluate a parsed launch description into the list of processes to start.

All actions of the subset are static, so resolving them in order before starting anything is
equivalent to ros2 launch's execution and has a useful property: every error (missing argument,
unknown package, bad substitution in an included file) is reported before any process runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vnd_ros.launch.entities import (
    Action,
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
from vnd_ros.launch.executables import flatten_params, node_command, param_argument, typed_param
from vnd_ros.launch.parser import parse_launch_file
from vnd_ros.launch.source import LaunchError, Location
from vnd_ros.launch.substitutions import Scope, Template, condition_value, evaluate
from vnd_ros.paths import REPO_ROOT
from vnd_ros.ros_env import node_environment

OUTPUT_MODES = ("screen", "log", "both")
MAX_INCLUDE_DEPTH = 32  # deeper means an include cycle
_NAME_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LOOPBACK_CYCLONEDDS = REPO_ROOT / "config" / "cyclonedds_loopback.xml"


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start."""

    name: str  # unique label: output prefix, log file name, listings
    cmd: tuple[str, ...]  # argv
    env: dict[str, str]  # full environment
    cwd: str | None  # working directory, None = the launcher's
    output: str  # screen, log or both
    respawn: bool  # restart whenever it exits (until shutdown)
    respawn_delay_s: float  # wait before a restart
    node_name: str | None  # fully qualified ROS node name when set in the file ("/ns/name")
    where: Location  # tag that declared it
    respawn_max_retries: int = -1  # respawns allowed; negative = no fixed limit (ros2 launch)
    required: bool = False  # on_exit: shutdown -- its exit shuts the whole launch down


@dataclass
class ResolvedLaunch:
    """The processes of a launch file plus what the arguments looked like."""

    processes: list[ProcessSpec] = field(default_factory=list)  # in start order
    declared_args: list[DeclareArg] = field(default_factory=list)  # args met while resolving
    unused_args: list[str] = field(default_factory=list)  # given on the command line, undeclared


def default_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default os.environ) with the project's loopback Cyclone config and Fast DDS
    profile when unset, and what rclpy from the PyPI wheels needs (vnd_ros.ros_env)."""
    return node_environment(base)


def resolve_launch(
    path: Path, launch_args: Mapping[str, str], env: Mapping[str, str] | None = None
) -> ResolvedLaunch:
    """Parse ``path`` and resolve it with ``name:=value`` arguments into process specs.

    ``env`` is the environment children start from (default: os.environ plus the loopback
    Cyclone configuration). Raises LaunchError naming the file and line of any problem.
    """
    path = Path(path)
    scope = Scope(dict(launch_args), default_environment(env), "", path)
    resolver = _Resolver()
    resolver.run(parse_launch_file(path), scope, depth=0)
    declared = {arg.name for arg in resolver.result.declared_args}
    resolver.result.unused_args = [name for name in launch_args if name not in declared]
    return resolver.result


class _Resolver:
    def __init__(self) -> None:
        self.result = ResolvedLaunch()
        self._labels: dict[str, int] = {}
        self._handlers: dict[type, Callable[[Any, Scope, int], None]] = {
            DeclareArg: self._arg,
            Let: self._let,
            SetEnv: self._set_env,
            PushRosNamespace: self._push_namespace,
            Group: self._group,
            Include: self._include,
            Executable: self._executable,
            Node: self._node,
        }

    def run(self, description: LaunchDescription, scope: Scope, depth: int) -> None:
        self._actions(description.actions, scope, depth)

    def _actions(self, actions: tuple[Action, ...], scope: Scope, depth: int) -> None:
        for action in actions:
            if self._enabled(action, scope):
                self._handlers[type(action)](action, scope, depth)

    @staticmethod
    def _enabled(action: Action, scope: Scope) -> bool:
        if action.condition is None:
            return True
        value = condition_value(evaluate(action.condition.value, scope), action.where)
        return value != action.condition.negate

    def _arg(self, action: DeclareArg, scope: Scope, depth: int) -> None:
        self.result.declared_args.append(action)
        if action.name in scope.configs:
            return
        if action.default is None:
            raise LaunchError(
                f"missing required launch argument '{action.name}' (pass {action.name}:=VALUE)",
                action.where,
            )
        scope.configs[action.name] = evaluate(action.default, scope)

    def _let(self, action: Let, scope: Scope, depth: int) -> None:
        scope.configs[action.name] = evaluate(action.value, scope)

    def _set_env(self, action: SetEnv, scope: Scope, depth: int) -> None:
        scope.env[evaluate(action.name, scope)] = evaluate(action.value, scope)

    def _push_namespace(self, action: PushRosNamespace, scope: Scope, depth: int) -> None:
        pushed = evaluate(action.namespace, scope)
        scope.ros_namespace = _join_namespace(scope.ros_namespace, pushed, action.where)

    def _group(self, action: Group, scope: Scope, depth: int) -> None:
        self._actions(action.children, scope.child() if action.scoped else scope, depth)

    def _include(self, action: Include, scope: Scope, depth: int) -> None:
        if depth >= MAX_INCLUDE_DEPTH:
            message = f"includes nested deeper than {MAX_INCLUDE_DEPTH} (a cycle?)"
            raise LaunchError(message, action.where)
        file = Path(evaluate(action.file, scope))
        if not file.is_file():
            raise LaunchError(f"included launch file '{file}' does not exist", action.where)
        # Scoped with forwarding: the included file sees our configurations, its own stay inside.
        inner = scope.child(current_file=file)
        for name, value in action.args:
            inner.configs[name] = evaluate(value, scope)
        self.run(parse_launch_file(file), inner, depth + 1)

    def _executable(self, action: Executable, scope: Scope, depth: int) -> None:
        cmd = shlex.split(evaluate(action.cmd, scope))
        if not cmd:
            raise LaunchError("'executable' has an empty cmd", action.where)
        cmd += _split(action.options.args, scope)
        label = _optional(action.options.name, scope) or Path(cmd[0]).name
        cwd = _optional(action.cwd, scope)
        self._add(action, action.options, scope, label, cmd, cwd, node_name=None)

    def _node(self, action: Node, scope: Scope, depth: int) -> None:
        package, executable = evaluate(action.pkg, scope), evaluate(action.exec, scope)
        try:
            cmd = node_command(package, executable)
        except LookupError as err:
            raise LaunchError(str(err), action.where) from err
        cmd += _split(action.options.args, scope)
        name = _optional(action.options.name, scope)
        if name is not None and not _NAME_TOKEN.fullmatch(name):
            raise LaunchError(f"invalid node name '{name}'", action.where)
        given_ns = _optional(action.namespace, scope)
        namespace = _join_namespace(scope.ros_namespace, given_ns or "", action.where)
        cmd += _ros_arguments(action, scope, name, namespace)
        node_name = None if name is None else f"{namespace.rstrip('/')}/{name}"
        self._add(action, action.options, scope, name or executable, cmd, None, node_name)

    def _add(
        self,
        action: Action,
        options: ProcessOptions,
        scope: Scope,
        label: str,
        cmd: list[str],
        cwd: str | None,
        node_name: str | None,
    ) -> None:
        output = _optional(options.output, scope) or "log"
        if output not in OUTPUT_MODES:
            message = f"output must be one of {', '.join(OUTPUT_MODES)}, got '{output}'"
            raise LaunchError(message, action.where)
        respawn_text = _optional(options.respawn, scope)
        respawn = respawn_text is not None and condition_value(respawn_text, action.where)
        delay_s = 0.0 if options.respawn_delay_s is None else options.respawn_delay_s
        retries = -1 if options.respawn_max_retries is None else options.respawn_max_retries
        self.result.processes.append(
            ProcessSpec(
                name=self._unique(label),
                cmd=tuple(cmd),
                env=_child_environment(scope.env),
                cwd=cwd,
                output=output,
                respawn=respawn,
                respawn_delay_s=delay_s,
                node_name=node_name,
                where=action.where,
                respawn_max_retries=retries,
                required=options.required,
            )
        )

    def _unique(self, label: str) -> str:
        count = self._labels.get(label, 0) + 1
        self._labels[label] = count
        return label if count == 1 else f"{label}-{count}"


def _child_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus unbuffered Python output, so 'screen' lines appear as they are printed."""
    return {"PYTHONUNBUFFERED": "1", **env}


def _optional(template: Template | None, scope: Scope) -> str | None:
    return None if template is None else evaluate(template, scope)


def _split(template: Template | None, scope: Scope) -> list[str]:
    return [] if template is None else shlex.split(evaluate(template, scope))


def _join_namespace(base: str, pushed: str, where: Location) -> str:
    """``pushed`` under ``base`` unless absolute; "" when both are empty; validated."""
    if pushed.startswith("/"):
        joined = pushed
    elif pushed:
        joined = f"{base.rstrip('/')}/{pushed}"
    else:
        joined = base
    if not joined:
        return ""
    joined = "/" + joined.strip("/")
    tokens = joined.strip("/").split("/") if joined != "/" else []
    if any(not _NAME_TOKEN.fullmatch(token) for token in tokens):
        raise LaunchError(f"invalid ROS namespace '{joined}'", where)
    return joined


def _ros_arguments(action: Node, scope: Scope, name: str | None, namespace: str) -> list[str]:
    """``--ros-args`` section in launch_ros' order: name, namespace, params, remaps, extras."""
    args = ["--ros-args"]
    if name is not None:
        args += ["-r", f"__node:={name}"]
    if namespace:
        args += ["-r", f"__ns:={namespace}"]
    for source in action.param_files:
        path = Path(evaluate(source, scope)).resolve()
        if not path.is_file():
            raise LaunchError(f"parameter file '{path}' does not exist", action.where)
        args += ["--params-file", str(path)]
    # Inline parameters follow the files, so they win, as launch_ros orders them.
    for param, value in flatten_params(_evaluate_params(action.params, scope)).items():
        args += ["-p", param_argument(param, value)]
    for source, target in action.remaps:
        args += ["-r", f"{evaluate(source, scope)}:={evaluate(target, scope)}"]
    args += _split(action.ros_args, scope)
    return args if len(args) > 1 else []


def _evaluate_params(params: dict[str, Any], scope: Scope) -> dict[str, Any]:
    return {name: _evaluate_param(value, scope) for name, value in params.items()}


def _evaluate_param(value: Any, scope: Scope) -> Any:
    if isinstance(value, Template):
        return typed_param(evaluate(value, scope))
    if isinstance(value, list):
        return [_evaluate_param(item, scope) for item in value]
    if isinstance(value, dict):
        return _evaluate_params(value, scope)
    return value
