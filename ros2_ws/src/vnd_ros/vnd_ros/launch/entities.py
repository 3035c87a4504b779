"""The launch description the parser builds from a YAML launch file: conditions, actions
(arguments, lets, environment, namespaces, groups, includes) and executables / nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnd_ros.launch.source import (
    Location,
)
from vnd_ros.launch.substitutions import Template


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
    respawn_delay_s: float | None  # seconds to wait before a respawn
    respawn_max_retries: int | None  # respawns allowed; negative or None = no fixed limit
    required: bool  # on_exit: shutdown -- the launch ends when this process exits
    args: Template | None  # extra command-line arguments, split on whitespace (node only)


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
