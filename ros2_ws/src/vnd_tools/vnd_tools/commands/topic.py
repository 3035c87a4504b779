"""``vnd topic list|echo|hz``: the operator's view of live topics, like ``ros2 topic``.

    vnd topic list [-t] [--spin-time S]
    vnd topic echo TOPIC [TYPE] [--once] [-n N] [--timeout S]
    vnd topic hz TOPIC [--window N] [--duration S]

echo and hz subscribe with the QoS that matches the topic's writers (see vnd_ros.bag).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml
from vnd_ros import messages, runtime
from vnd_ros.bag import CliNode, GraphProbe, WriterOffer, matching_qos
from vnd_ros.launch.resolve import default_environment

SPIN_STEP_S = 0.05  # longest executor wait, so deadlines and Ctrl-C are honoured promptly
ECHO_DEPTH = 100  # reader history of echo and hz
REPORT_PERIOD_S = 1.0  # hz prints one line per period, as ros2 topic hz does


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-subcommands list, echo and hz."""
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    lister = sub.add_parser("list", help="topics seen on the graph")
    lister.add_argument("-t", "--show-types", action="store_true", help="print the types too")
    lister.add_argument(
        "--spin-time", type=float, default=1.0, metavar="S", help="discovery time (default 1 s)"
    )
    echo = sub.add_parser("echo", help="print the messages of a topic")
    echo.add_argument("topic")
    echo.add_argument("type", nargs="?", help="message type (default: the writers' type)")
    echo.add_argument("--once", action="store_true", help="print one message and exit")
    echo.add_argument("-n", "--count", type=int, default=0, help="exit after N messages")
    echo.add_argument(
        "--truncate-length", type=int, default=128, help="longest array or string printed"
    )
    echo.add_argument("--timeout", type=float, default=0.0, metavar="S", help="give up after S s")
    hz = sub.add_parser("hz", help="receive rate of a topic")
    hz.add_argument("topic")
    hz.add_argument("--window", type=int, default=10_000, help="periods in the statistics")
    hz.add_argument("--duration", type=float, default=0.0, metavar="S", help="exit after S s")
    hz.add_argument("--timeout", type=float, default=0.0, metavar="S", help="give up after S s")


def run(args: argparse.Namespace) -> int:
    """Run the verb until done, Ctrl-C or SIGTERM."""
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    verbs: dict[str, Callable[[CliNode, argparse.Namespace], int]] = {
        "list": _list,
        "echo": _echo,
        "hz": _hz,
    }
    cli_node = CliNode("vnd_topic")
    try:
        return verbs[args.verb](cli_node, args)
    except KeyboardInterrupt:  # the node runtime turns SIGINT into KeyboardInterrupt
        return 0
    finally:
        cli_node.close()


# ---------------------------------------------------------------- list


def _list(cli_node: CliNode, args: argparse.Namespace) -> int:
    view = _topic_types_source(cli_node.node)
    _spin_for(cli_node, args.spin_time)
    for name, types in sorted(view().items()):
        print(f"{name} [{', '.join(sorted(types))}]" if args.show_types else name)
    return 0


def _topic_types_source(node: Any) -> Callable[[], dict[str, set[str]]]:
    """Function returning topic -> types for every topic with a writer or a reader."""
    if runtime.BACKEND == "rclpy":
        return lambda: {name: set(types) for name, types in node.get_topic_names_and_types()}
    from vnd_ros.graph import GraphView

    view = GraphView(node.context.participant)
    return lambda: {name: info.types for name, info in view.topics().items()}


def _spin_for(cli_node: CliNode, duration_s: float) -> None:
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline and cli_node.spin_once(SPIN_STEP_S):
        pass


# ---------------------------------------------------------------- echo and hz


def _wait_for_writers(cli_node: CliNode, topic: str, timeout_s: float) -> list[WriterOffer] | None:
    """Offers of the writers of ``topic`` once one exists; None on timeout or shutdown."""
    probe = GraphProbe(cli_node.node)
    try:
        deadline = time.monotonic() + timeout_s if timeout_s > 0 else math.inf
        warned = False
        while time.monotonic() < deadline:
            offers = probe.writers().get(topic)
            if offers:
                return offers
            if not warned:
                print(f"waiting for a writer of {topic} ...", file=sys.stderr)
                warned = True
            if not cli_node.spin_once(SPIN_STEP_S * 4):
                return None
        return None
    finally:
        probe.close()


def _subscribe(
    cli_node: CliNode, args: argparse.Namespace, callback: Callable[[Any], None]
) -> bool:
    topic = args.topic if args.topic.startswith("/") else "/" + args.topic
    offers = _wait_for_writers(cli_node, topic, args.timeout)
    if offers is None:
        print(f"no writer of {topic} appeared", file=sys.stderr)
        return False
    msgtype = getattr(args, "type", None) or offers[0].msgtype
    msg_class = messages.get_message(msgtype)
    cli_node.node.create_subscription(
        msg_class, topic, callback, matching_qos(offers, depth=ECHO_DEPTH)
    )
    return True


def _echo(cli_node: CliNode, args: argparse.Namespace) -> int:
    limit = 1 if args.once else args.count
    printed = [0]

    def on_message(msg: Any) -> None:
        if limit and printed[0] >= limit:
            return
        print(format_message(msg, args.truncate_length) + "---", flush=True)
        printed[0] += 1

    if not _subscribe(cli_node, args, on_message):
        return 1
    while not (limit and printed[0] >= limit) and cli_node.spin_once(SPIN_STEP_S):
        pass
    return 0


def format_message(msg: Any, truncate_length: int = 128) -> str:
    """YAML text of a message, like ``ros2 topic echo`` (long arrays and strings cut short)."""
    plain = _plain(messages.to_rosbags(msg), truncate_length)
    return yaml.safe_dump(plain, sort_keys=False, default_flow_style=False, width=1 << 20)


def _plain(value: Any, limit: int) -> Any:
    """Nested dicts, lists and scalars from a rosbags message object."""
    if dataclasses.is_dataclass(value):
        return {
            f.name: _plain(getattr(value, f.name), limit)
            for f in dataclasses.fields(value)
            if not f.name.startswith("__")  # rosbags' __msgtype__ is not a message field
        }
    if isinstance(value, np.ndarray | bytes | bytearray | list | tuple):
        items = [_plain(item, limit) for item in list(value[:limit])]
        return [*items, "..."] if len(value) > limit else items
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "..."
    return value


@dataclass(frozen=True)
class RateStats:
    """Receive-rate statistics over a window of periods."""

    rate_hz: float  # 1 / mean period
    min_s: float  # shortest period
    max_s: float  # longest period
    std_s: float  # population standard deviation of the period
    window: int  # periods in the statistics


class RateMonitor:
    """Receive times of a topic and the statistics of their periods (last ``window``)."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._periods: deque[float] = deque(maxlen=window)
        self._last_s: float | None = None

    def tick(self, now_s: float) -> None:
        """Record a message received at monotonic time ``now_s``."""
        if self._last_s is not None:
            self._periods.append(now_s - self._last_s)
        self._last_s = now_s

    def stats(self) -> RateStats | None:
        """Statistics, or None before two messages arrived."""
        if not self._periods:
            return None
        periods = list(self._periods)
        mean_s = statistics.fmean(periods)
        return RateStats(
            rate_hz=1.0 / mean_s if mean_s > 0 else math.inf,
            min_s=min(periods),
            max_s=max(periods),
            std_s=statistics.pstdev(periods),
            window=len(periods),
        )


def format_stats(stats: RateStats) -> str:
    """Two lines like ``ros2 topic hz`` prints."""
    return (
        f"average rate: {stats.rate_hz:.3f}\n"
        f"\tmin: {stats.min_s:.3f}s max: {stats.max_s:.3f}s std dev: {stats.std_s:.5f}s "
        f"window: {stats.window}"
    )


def _hz(cli_node: CliNode, args: argparse.Namespace) -> int:
    monitor = RateMonitor(args.window)
    if not _subscribe(cli_node, args, lambda msg: monitor.tick(time.monotonic())):
        return 1
    end = time.monotonic() + args.duration if args.duration > 0 else math.inf
    next_report = time.monotonic() + REPORT_PERIOD_S
    while time.monotonic() < end and cli_node.spin_once(SPIN_STEP_S):
        if time.monotonic() >= next_report:
            stats = monitor.stats()
            print(format_stats(stats) if stats else "no new messages", flush=True)
            next_report += REPORT_PERIOD_S
    return 0
