"""ROS 2 YAML launch files without ROS: parse, resolve into processes, run them.

``parse_launch_file`` checks a file against the supported subset (errors name file and line),
``resolve_launch`` evaluates arguments, conditions and substitutions into ``ProcessSpec``s and
``LaunchService`` runs them as separate OS processes.
"""

from vnd_ros.launch.entities import LaunchDescription
from vnd_ros.launch.parser import parse_launch_file
from vnd_ros.launch.processes import LaunchEvent, ProcessInfo, RespawnPolicy
from vnd_ros.launch.resolve import ProcessSpec, ResolvedLaunch, resolve_launch
from vnd_ros.launch.runner import LaunchService
from vnd_ros.launch.source import LaunchError, Location

__all__ = [
    "LaunchDescription",
    "LaunchError",
    "LaunchEvent",
    "LaunchService",
    "Location",
    "ProcessInfo",
    "ProcessSpec",
    "ResolvedLaunch",
    "RespawnPolicy",
    "parse_launch_file",
    "resolve_launch",
]
