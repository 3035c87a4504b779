"""The node API every VND node imports: rclpy's own under the rclpy backend, else the dds one.

    from vnd_ros.runtime import Node, init, spin, shutdown, try_shutdown, ok

The supported subset (checked by test_node_contract.py): Node subclassing with
create_publisher / create_subscription / create_timer, declare_parameter(s), get_parameter,
get_logger, get_clock().now(), get_name / get_namespace / get_fully_qualified_name,
destroy_node; the functions init, spin, spin_once, shutdown, try_shutdown, ok; and
SingleThreadedExecutor (add_node, spin, spin_once) to spin several nodes in one process.
A node's main() builds its node with :func:`start_node` and runs it with
:func:`spin_until_shutdown`, which catches ``(KeyboardInterrupt, ExternalShutdownException)``:
SIGINT raises the first on both backends, rclpy raises the second after SIGTERM (the dds
backend's spin simply returns).

``init(args=...)`` also records the process arguments so :func:`ros_arguments` can report
where a parameter override came from on both backends.

Executor of a node process on rclpy (:func:`spin_until_shutdown`): rclpy's ``EventsExecutor``
when the installed rclpy has it (Jazzy's 7.1 wheels do), else its ``SingleThreadedExecutor``;
``VND_RCLPY_EXECUTOR=events|single`` forces one. The SingleThreadedExecutor rebuilds its wait
set in Python for every callback (about 4x the dds backend's CPU per callback here); the
EventsExecutor dispatches from C++ (about 1.3x). Both run one callback at a time, so the
nodes' single-threaded assumptions (no callback during a tick) hold on either.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from vnd_ros.backend import BackendUnavailableError, backend_name
from vnd_ros.log import get_logger
from vnd_ros.ros_args import RosArgs, parse_ros_args

try:
    BACKEND = backend_name()
except BackendUnavailableError as _error:  # one line, not a traceback, for a node's start-up
    raise SystemExit(f"[FATAL] cannot start: {_error}") from None

_recorded_args: list[str] = []

# Node code is type-checked against the dds backend's names: the node API both backends provide
# (test_node_contract.py holds rclpy to it). What each backend adds is checked in its module.
if TYPE_CHECKING or BACKEND != "rclpy":
    from vnd_ros.dds_node import (
        Node,
        SingleThreadedExecutor,
        ok,
        shutdown,
        spin,
        spin_once,
        try_shutdown,
    )
    from vnd_ros.parameter import (
        InvalidParameterTypeException,
        Parameter,
        ParameterAlreadyDeclaredException,
        ParameterDescriptor,
        ParameterNotDeclaredException,
    )
    from vnd_ros.runtime_dds import ExternalShutdownException, node_executor, spin_node, start
else:  # pragma: no cover - needs a ROS 2 install
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy import ok, shutdown, spin, spin_once, try_shutdown
    from rclpy.exceptions import (
        InvalidParameterTypeException,
        ParameterAlreadyDeclaredException,
        ParameterNotDeclaredException,
    )
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from vnd_ros.rclpy_node import Node
    from vnd_ros.runtime_rclpy import node_executor, spin_node, start


def init(*, args: Sequence[str] | None = None, **kwargs: Any) -> None:
    """Start the backend (rclpy.init or the dds backend's), remembering ``args`` (``sys.argv``
    when None) for :func:`ros_arguments`."""
    _recorded_args[:] = list(sys.argv if args is None else args)
    start(None if args is None else list(args), _recorded_args, **kwargs)


NodeT = TypeVar("NodeT")


def start_node(
    factory: Callable[[], NodeT],
    errors: tuple[type[Exception], ...],
    name: str,
    exit_code: int = 1,
) -> NodeT:
    """``factory()``, or, when it raises one of ``errors`` (bad parameters, an unloadable
    bundle...), a fatal ``cannot start: <reason>`` line from logger ``name`` and process exit
    with ``exit_code``.

    Also turns on :mod:`faulthandler`: a crash in a C extension (middleware, bag writer,
    torch) then leaves the Python stack of every thread in the node's output."""
    _enable_faulthandler()
    try:
        return factory()
    except errors as err:
        _exit_on_startup_error(name, err, exit_code)


def _enable_faulthandler() -> None:
    """Crash dumps to the process's error stream: ``sys.stderr``, or the original one when it
    was replaced by an object without a file descriptor (a test's capture)."""
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:  # no error stream at all (a detached process)
            continue
        try:
            faulthandler.enable(file=stream, all_threads=True)
            return
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
            continue


def _exit_on_startup_error(name: str, err: Exception, exit_code: int) -> NoReturn:
    get_logger(name).fatal(f"cannot start: {err}")
    try_shutdown()
    sys.exit(exit_code)


def spin_until_shutdown(node: Any) -> None:
    """Spin ``node`` until Ctrl-C or SIGTERM, then destroy it and shut the context down."""
    try:
        spin_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A signal that shut the context down just before spin() set up its executor makes
        # rclpy raise from a dead context: that is the shutdown asked for, not a crash.
        if ok():
            raise
    finally:
        node.destroy_node()
        try_shutdown()


def ros_arguments() -> RosArgs:
    """The ROS arguments given to :func:`init` (parsed again; cheap)."""
    return parse_ros_args(_recorded_args)


def node_parameter_overrides(node: Any) -> dict[str, Any]:
    """Command-line parameter overrides (name -> ParamOverride) that apply to ``node``."""
    own = getattr(node, "parameter_overrides", None)
    if isinstance(own, dict):  # dds backend
        return own
    return ros_arguments().parameter_overrides(node.get_namespace(), node.get_name())


__all__ = [
    "BACKEND",
    "ExternalShutdownException",
    "InvalidParameterTypeException",
    "Node",
    "Parameter",
    "ParameterAlreadyDeclaredException",
    "ParameterDescriptor",
    "ParameterNotDeclaredException",
    "SingleThreadedExecutor",
    "init",
    "node_executor",
    "node_parameter_overrides",
    "ok",
    "ros_arguments",
    "shutdown",
    "spin",
    "spin_once",
    "spin_until_shutdown",
    "start_node",
    "try_shutdown",
]
