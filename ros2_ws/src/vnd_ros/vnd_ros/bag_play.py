"""Playing a recorded bag back onto the graph (``vnd bag play``): each topic with the QoS
it was recorded with, after its subscribers appear, at the recorded pace or a multiple.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rosbags.interfaces import ConnectionExtRosbag2

from vnd_ros import messages, runtime
from vnd_ros.bag import PLAY_DEPTH, CliNode, _flush, _profile_from_rosbags
from vnd_ros.bag_read import BagError, _absolute, _open_reader, bag_info, read_messages
from vnd_ros.qos import QoSProfile


def play(
    path: str | Path,
    *,
    rate: float = 1.0,
    topics: Sequence[str] | None = None,
    loop: bool = False,
    wait_for_subscribers_s: float = 0.0,
    stop: threading.Event | None = None,
    node_name: str = "vnd_bag_player",
) -> int:
    """Publish the bag's messages with their original spacing divided by ``rate``.

    Waits up to ``wait_for_subscribers_s`` for every topic to have a subscriber before the
    first message (a volatile reader that matches late misses what was sent before). Returns
    the number of messages published; ``stop`` ends playback early; ``loop`` repeats.
    """
    if rate <= 0.0:
        raise BagError(f"rate must be positive, got {rate}")
    qos_by_topic = _stored_qos(path)
    cli_node = CliNode(node_name)
    try:
        publishers = {
            summary.name: cli_node.node.create_publisher(
                messages.get_message(summary.msgtype),
                summary.name,
                qos_by_topic.get(summary.name) or QoSProfile(depth=PLAY_DEPTH),
            )
            for summary in bag_info(path).topics
            if topics is None or summary.name in {_absolute(topic) for topic in topics}
        }
        _wait_for_subscribers(publishers, wait_for_subscribers_s, stop)
        published = 0
        while True:
            published += _play_once(path, publishers, rate, stop)
            if not loop or (stop is not None and stop.is_set()) or not runtime.ok():
                break
        for publisher in publishers.values():
            _flush(publisher)
        return published
    finally:
        cli_node.close()


def _stored_qos(path: str | Path) -> dict[str, QoSProfile]:
    reader = _open_reader(path)
    try:
        return {
            connection.topic: _profile_from_rosbags(connection.ext.offered_qos_profiles[0])
            for connection in reader.connections
            if isinstance(connection.ext, ConnectionExtRosbag2)
            and connection.ext.offered_qos_profiles
        }
    finally:
        reader.close()


def _wait_for_subscribers(
    publishers: Mapping[str, Any], timeout_s: float, stop: threading.Event | None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        if all(pub.get_subscription_count() > 0 for pub in publishers.values()):
            return
        time.sleep(0.02)


def _play_once(
    path: str | Path, publishers: Mapping[str, Any], rate: float, stop: threading.Event | None
) -> int:
    start_wall: float | None = None
    first_ns = 0
    published = 0
    # decoded, not raw: a topic recorded with an older definition is carried into today's type
    for topic, _msgtype, stamp_ns, msg in read_messages(path, list(publishers)):
        if start_wall is None:
            start_wall, first_ns = time.monotonic(), stamp_ns
        due = start_wall + (stamp_ns - first_ns) / 1e9 / rate
        if _sleep_until(due, stop) or not runtime.ok():  # stop event, or SIGTERM to the node
            break
        publishers[topic].publish(msg)
        published += 1
    return published


def _sleep_until(due: float, stop: threading.Event | None) -> bool:
    """Sleep until monotonic time ``due``; True when ``stop`` was set meanwhile."""
    remaining = due - time.monotonic()
    if stop is not None:
        return stop.wait(max(remaining, 0.0))
    if remaining > 0:
        time.sleep(remaining)
    return False
