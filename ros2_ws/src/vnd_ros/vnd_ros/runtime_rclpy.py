"""What :mod:`vnd_ros.runtime` adds to rclpy's node API: imported only under the rclpy backend."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor

RCLPY_EXECUTORS = ("events", "single")  # VND_RCLPY_EXECUTOR values
# Longest spin_once wait of a node process on rclpy: a stop signal is seen within it.
SPIN_WAKE_S = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # end a node process's spin


def _executor_choice() -> str:
    choice = os.environ.get("VND_RCLPY_EXECUTOR", "events").strip().lower()
    if choice not in RCLPY_EXECUTORS:
        raise ValueError(
            f"VND_RCLPY_EXECUTOR={choice!r}: expected one of {', '.join(RCLPY_EXECUTORS)}"
        )
    return choice


def node_executor() -> Any:
    """The executor a node process spins on (module docstring: VND_RCLPY_EXECUTOR)."""
    if _executor_choice() == "events":
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError:  # an rclpy older than the EventsExecutor
            return SingleThreadedExecutor()
        return EventsExecutor()
    return SingleThreadedExecutor()


def spin_node(node: Any) -> None:
    """Spin ``node`` until a stop signal or the context's shutdown (:mod:`vnd_ros.runtime`)."""
    # spin_once in a Python loop, not executor.spin(): the EventsExecutor's spin() stays
    # in C++ and never lets the SIGINT/SIGTERM handlers end it; spin_once returns to
    # Python, where the stop the handlers ask for ends the loop. The handlers only ask:
    # rclpy's own shut the context down at once, from a signal, so a callback running or
    # queued at that moment fails to publish ("publisher's context is invalid", logged
    # FATAL), and its SIGINT raises KeyboardInterrupt inside the executor's C++ dispatch,
    # which comes out as a RuntimeError. Here the loop ends between two callbacks, the node
    # leaves the executor, and only then is the context shut down (spin_until_shutdown).
    if not node.context.ok():  # a signal came before the spin: nothing to build
        return
    executor = node_executor()
    executor.add_node(node)
    context = executor.context
    stop = threading.Event()
    main = threading.current_thread() is threading.main_thread()  # signals: main only
    previous = (
        {sig: signal.signal(sig, lambda _signum, _frame: stop.set()) for sig in STOP_SIGNALS}
        if main
        else {}
    )
    try:
        while context.ok() and not stop.is_set():
            executor.spin_once(timeout_sec=SPIN_WAKE_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        executor.remove_node(node)
        executor.shutdown()


def start(args: list[str] | None, recorded: list[str], **kwargs: Any) -> None:
    """rclpy.init with ``args`` (None: ``sys.argv``); exits with one line saying how to build
    vnd_msgs when rclpy cannot import it, or naming a bad VND_RCLPY_EXECUTOR."""
    from vnd_ros.messages import UnknownMessageTypeError, rosidl_message

    try:
        rosidl_message("vnd_msgs/msg/NodeStatus")
        _executor_choice()
    except (UnknownMessageTypeError, ValueError) as error:
        raise SystemExit(f"[FATAL] cannot start: {error}") from None
    rclpy.init(args=args, **kwargs)
