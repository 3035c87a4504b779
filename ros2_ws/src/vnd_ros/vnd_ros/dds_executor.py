"""The dds backend's executor: runs the callbacks of its nodes one at a time on the spinning
thread, like rclpy's SingleThreadedExecutor (callbacks never run concurrently).

It owns a Cyclone WaitSet holding one ReadCondition per subscription plus the GuardCondition
that shutdown triggers, and sleeps in it until data arrives or the next timer is due (monotonic
deadlines).
"""

from __future__ import annotations

import time
from typing import Protocol

from cyclonedds.core import DDSException, WaitSet

from vnd_ros.cyclone_compat import delete_entity, forget_entity
from vnd_ros.dds_context import Context, NotInitializedError, get_default_context
from vnd_ros.dds_endpoints import Subscription, Timer

# Longest single WaitSet sleep: Python runs signal handlers only between bytecodes, so a Ctrl-C
# waits at most this long to be seen by a thread blocked in the C wait.
MAX_WAIT_NS = 100_000_000


class SpunNode(Protocol):
    """What an executor needs of a node (vnd_ros.dds_node.Node)."""

    timers: list[Timer]
    subscriptions: list[Subscription]
    generation: int  # bumped whenever the node's subscriptions change (the WaitSet re-syncs)


class SingleThreadedExecutor:
    """Runs the callbacks of its nodes one at a time on the calling thread."""

    def __init__(self, *, context: Context | None = None) -> None:
        self.context = context or get_default_context()
        self._nodes: list[SpunNode] = []
        self._waitset: WaitSet | None = None
        self._attached: dict[int, tuple[object, int]] = {}

    def add_node(self, node: SpunNode) -> bool:
        """Spin ``node`` too; False when it was already added."""
        if node in self._nodes:
            return False
        self._nodes.append(node)
        return True

    def remove_node(self, node: SpunNode) -> None:
        """Stop spinning ``node``."""
        if node in self._nodes:
            self._nodes.remove(node)

    def get_nodes(self) -> list[SpunNode]:
        """Nodes this executor spins."""
        return list(self._nodes)

    def spin(self) -> None:
        """Run callbacks until shutdown (returns) or Ctrl-C (KeyboardInterrupt)."""
        while self.context.ok():
            self.spin_once()

    def spin_once(self, timeout_sec: float | None = None) -> None:
        """Wait up to ``timeout_sec`` (forever when None) for work, then run what is ready."""
        if not self.context.ok():
            raise NotInitializedError("spin on a context that is shut down")
        end_ns = None if timeout_sec is None else time.monotonic_ns() + int(timeout_sec * 1e9)
        while True:
            with self.context.spin_lock:
                if not self.context.ok():
                    return
                if self._run_ready():
                    return
                waitset = self._sync_waitset()
                wait_ns = self._wait_ns(end_ns)
                if wait_ns is None:
                    return
                try:
                    waitset.wait(wait_ns)
                except DDSException:
                    if self.context.ok():
                        raise
                    return

    def shutdown(self) -> None:
        """Forget the nodes and release the WaitSet."""
        self._nodes.clear()
        delete_entity(self._waitset)
        self._waitset = None

    def _wait_ns(self, end_ns: int | None) -> int | None:
        """Sleep length until the next timer, the spin_once timeout or MAX_WAIT_NS."""
        now_ns = time.monotonic_ns()
        wait_ns = MAX_WAIT_NS
        for node in self._nodes:
            for timer in node.timers:
                if not timer._canceled:
                    wait_ns = min(wait_ns, timer.next_deadline_ns - now_ns)
        if end_ns is not None:
            if now_ns >= end_ns:
                return None
            wait_ns = min(wait_ns, end_ns - now_ns)
        return max(wait_ns, 0)

    def _sync_waitset(self) -> WaitSet:
        """Attach the guard and every subscription's ReadCondition (re-sync on changes)."""
        participant = self.context._participant()
        key: dict[int, tuple[object, int]] = {
            id(node): (node, node.generation) for node in self._nodes
        }
        key[id(participant)] = (participant, 0)
        if self._waitset is not None and key == self._attached:
            return self._waitset
        if self._waitset is not None and self._attached.get(id(participant)):
            delete_entity(self._waitset)
        else:  # its participant is gone and took the WaitSet with it
            forget_entity(self._waitset)
        waitset = WaitSet(participant)
        waitset.attach(self.context._guard())
        for node in self._nodes:
            for sub in node.subscriptions:
                waitset.attach(sub.condition)
        self._waitset, self._attached = waitset, key
        return waitset

    def _run_ready(self) -> bool:
        """Run due timers, then pending messages; True when any callback ran."""
        ran = False
        now_ns = time.monotonic_ns()
        for node in list(self._nodes):
            for timer in list(node.timers):
                if timer.is_ready(now_ns):
                    timer.advance(now_ns)
                    timer.callback()
                    ran = True
        for node in list(self._nodes):
            for sub in list(node.subscriptions):
                if not sub.alive or not sub.condition.is_triggered():
                    continue
                for msg in sub.take_messages():
                    sub.callback(msg)
                    ran = True
        return ran


_global_executor: SingleThreadedExecutor | None = None


def get_global_executor() -> SingleThreadedExecutor:
    """The executor used by :func:`spin` and :func:`spin_once`."""
    global _global_executor
    if _global_executor is None or _global_executor.context is not get_default_context():
        _global_executor = SingleThreadedExecutor()
    return _global_executor


def spin(node: SpunNode, executor: SingleThreadedExecutor | None = None) -> None:
    """Run ``node``'s callbacks until shutdown; Ctrl-C raises KeyboardInterrupt."""
    executor = executor or get_global_executor()
    executor.add_node(node)
    try:
        executor.spin()
    finally:
        executor.remove_node(node)


def spin_once(
    node: SpunNode,
    *,
    executor: SingleThreadedExecutor | None = None,
    timeout_sec: float | None = None,
) -> None:
    """Run the callbacks that are ready, waiting up to ``timeout_sec`` for one."""
    executor = executor or get_global_executor()
    executor.add_node(node)
    try:
        executor.spin_once(timeout_sec)
    finally:
        executor.remove_node(node)
