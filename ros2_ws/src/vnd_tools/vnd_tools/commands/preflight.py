"""``vnd preflight``: listen to a live flight stack for a few seconds and print a pass/fail table.

    vnd preflight [--vehicle NS] [--mocap-topic T] [--mocap-type pose|odometry]
                  [--duration S] [--run-dir DIR] [--json OUT] [--no-learner] [thresholds]

Checks (vnd_tools.preflight holds the logic and the default thresholds):
    mocap rate, mocap jitter  header stamps of the mocap topic (PoseStamped or Odometry)
    clock offset              receive wall time - mocap stamp (median)
    odometry sanity           finite, unit quaternion, plausible speed and body rate (odom)
    node status               encoder and policy report on vnd/node_status, recently
    node warnings             no node warns (latent missing, policy suspended, fallback, ...)
    bundle active             both fly a bundle; a CheckpointCommand LIST answer agrees
    bundle versions           same version, same pin state, not behind the learner's latest
    policy commands           vnd/command at rate, finite, in an accepted mode
    learner                   vnd/learner/status fresh, not in error, newest bundle not refused
    disk space                free space and write access for <run_dir>/replay

Exit code 0 when every check passed (SKIP counts as passed), 1 when any failed, 2 for usage
errors. Relative topic names are in the vehicle namespace (``mocap/pose`` -> ``/vnd1/mocap/pose``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from vnd_core.state import ACTION_DIM, STATE_DIM
from vnd_core.wire import MODE_VALUES, CheckpointAction
from vnd_flight.msgfields import odometry_state, stamp_ns
from vnd_ros import messages
from vnd_ros.bag import GraphProbe
from vnd_ros.client import StackClient
from vnd_ros.launch.resolve import default_environment
from vnd_ros.qos import (
    DurabilityPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_status,
)
from vnd_ros.stack_records import ClientError, LearnerHealth, NodeHealth, namespaced

from vnd_tools.preflight import (
    CheckRow,
    LearnerReport,
    ListAnswer,
    NodeReport,
    PreflightReport,
    PreflightThresholds,
    by_role,
    check_bundle_active,
    check_bundle_versions,
    check_learner,
    check_node_warnings,
    check_status_reports,
    format_table,
)
from vnd_tools.preflight_streams import (
    check_clock_offset,
    check_commands,
    check_disk,
    check_odometry,
    check_stream_jitter,
    check_stream_rate,
    measure_disk,
    stream_stats,
)

DEFAULT_RUN_DIR = "/tmp/vnd_run"  # the launch files' run_dir default
MOCAP_TYPES = {"pose": "geometry_msgs/msg/PoseStamped", "odometry": "nav_msgs/msg/Odometry"}
# Best effort matches reliable and best-effort writers alike; the deep history keeps every
# sample of a 360 Hz stream between two executor passes.
STREAM_QOS = QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=1000)
# Every node's latest report (transient local, depth 1 per writer) arrives at once.
NODE_STATUS_QOS = QoSProfile(
    qos_profile_status.reliability, DurabilityPolicy.TRANSIENT_LOCAL, depth=50
)
# Threshold options: (dataclass field, flag, help). Defaults come from PreflightThresholds.
THRESHOLD_OPTIONS = (
    ("mocap_min_rate_hz", "--mocap-min-hz", "slowest acceptable mocap rate [Hz]"),
    ("mocap_max_rate_hz", "--mocap-max-hz", "fastest plausible mocap rate [Hz]"),
    ("mocap_max_jitter_ms", "--mocap-max-jitter-ms", "std of mocap stamp intervals [ms]"),
    ("mocap_max_gap_ms", "--mocap-max-gap-ms", "longest gap between mocap stamps [ms]"),
    ("max_clock_offset_ms", "--max-clock-offset-ms", "|median receive - stamp| [ms]"),
    ("quat_norm_tol", "--quat-norm-tol", "largest | |q| - 1 | of odometry"),
    ("max_speed_mps", "--max-speed", "largest odometry speed [m/s]"),
    ("max_body_rate_radps", "--max-body-rate", "largest odometry body rate [rad/s]"),
    ("command_min_rate_hz", "--command-min-hz", "slowest acceptable vnd/command rate [Hz]"),
    ("status_max_age_s", "--status-max-age", "oldest acceptable node status [s]"),
    ("learner_max_age_s", "--learner-max-age", "longest silence of the learner [s]"),
    ("min_free_mb", "--min-free-mb", "free disk space needed in the run dir [MiB]"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vnd preflight``."""
    parser.add_argument("--vehicle", default="vnd1", help="vehicle namespace (default vnd1)")
    parser.add_argument(
        "--mocap-topic", default="mocap/pose", help="motion-capture topic (default mocap/pose)"
    )
    parser.add_argument(
        "--mocap-type",
        choices=sorted(MOCAP_TYPES),
        default="pose",
        help="pose (PoseStamped, through the pose filter) or odometry (nav_msgs/Odometry)",
    )
    parser.add_argument(
        "--odom-topic",
        default=None,
        help="odometry the nodes read (default: odom, or the mocap topic with --mocap-type "
        "odometry)",
    )
    parser.add_argument(
        "--duration", type=float, default=3.0, metavar="S", help="listening time (default 3 s)"
    )
    parser.add_argument(
        "--list-timeout",
        type=float,
        default=3.0,
        metavar="S",
        help="wait for the checkpoint LIST answers (default 3 s)",
    )
    parser.add_argument(
        "--run-dir",
        default=DEFAULT_RUN_DIR,
        help=f"learner run directory: replay store and bundles (default {DEFAULT_RUN_DIR})",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the rows as JSON")
    parser.add_argument(
        "--no-learner", action="store_true", help="no learner runs (launched with learn:=false)"
    )
    parser.add_argument(
        "--accept-mode",
        action="append",
        choices=sorted(MODE_VALUES),
        help="controller mode allowed for take-off (repeatable; default policy)",
    )
    defaults = PreflightThresholds()
    for name, flag, text in THRESHOLD_OPTIONS:
        default = getattr(defaults, name)
        parser.add_argument(
            flag, dest=name, type=float, default=default, help=f"{text} (default {default:g})"
        )


def thresholds_from_args(args: argparse.Namespace) -> PreflightThresholds:
    """The thresholds the options ask for; ValueError naming an inconsistent one."""
    values = {name: getattr(args, name) for name, _, _ in THRESHOLD_OPTIONS}
    if args.accept_mode:
        values["accepted_modes"] = tuple(dict.fromkeys(args.accept_mode))
    thresholds = PreflightThresholds(**values)
    thresholds.validate()
    return thresholds


@dataclass(frozen=True)
class Topics:
    """Absolute names of the topics preflight listens to."""

    mocap: str  # motion-capture stream
    odom: str  # odometry the encoder and policy read
    command: str  # vnd/command
    node_status: str  # vnd/node_status
    learner_status: str  # vnd/learner/status

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Topics:
        """Resolve the option topics in the vehicle namespace."""

        def resolve(topic: str) -> str:
            return topic if topic.startswith("/") else namespaced(args.vehicle, topic)

        odom = args.odom_topic or ("odom" if args.mocap_type == "pose" else args.mocap_topic)
        return cls(
            mocap=resolve(args.mocap_topic),
            odom=resolve(odom),
            command=resolve("vnd/command"),
            node_status=resolve("vnd/node_status"),
            learner_status=resolve("vnd/learner/status"),
        )


@dataclass
class Collected:
    """Everything heard while listening."""

    mocap_stamps_ns: list[int] = field(default_factory=list)  # header stamps [ns]
    mocap_receive_ns: list[int] = field(default_factory=list)  # wall time at receipt [ns]
    odom_states: list[np.ndarray] = field(default_factory=list)  # (13,) each
    command_stamps_ns: list[int] = field(default_factory=list)  # header stamps [ns]
    command_actions: list[tuple[float, ...]] = field(default_factory=list)  # (4,) each
    command_modes: list[int] = field(default_factory=list)  # CtbrCommand MODE_*
    command_versions: list[int] = field(default_factory=list)  # policy_version
    nodes: dict[str, NodeHealth] = field(default_factory=dict)  # latest report per node
    learner: LearnerHealth | None = None  # latest learner report
    learner_received_mono_s: float = 0.0  # monotonic time of its arrival [s]
    learner_reports: int = 0  # learner reports received


class GraphListener:
    """Subscribes ``node`` to the checked topics and collects what arrives while it spins."""

    def __init__(self, node: Any, topics: Topics, mocap_type: str) -> None:
        self.data = Collected()
        mocap_cls = messages.get_message(MOCAP_TYPES[mocap_type])
        odom_cls = messages.get_message("nav_msgs/msg/Odometry")
        subscribe = node.create_subscription
        if topics.mocap == topics.odom and mocap_type == "odometry":
            subscribe(odom_cls, topics.mocap, self._on_mocap_odometry, STREAM_QOS)
        else:
            subscribe(mocap_cls, topics.mocap, self._on_mocap, STREAM_QOS)
            subscribe(odom_cls, topics.odom, self._on_odom, STREAM_QOS)
        subscribe(
            messages.get_message("vnd_msgs/msg/CtbrCommand"),
            topics.command,
            self._on_command,
            STREAM_QOS,
        )
        subscribe(
            messages.get_message("vnd_msgs/msg/NodeStatus"),
            topics.node_status,
            self._on_node_status,
            NODE_STATUS_QOS,
        )
        subscribe(
            messages.get_message("vnd_msgs/msg/LearnerStatus"),
            topics.learner_status,
            self._on_learner,
            qos_profile_status,
        )

    def _on_mocap(self, msg: Any) -> None:
        self.data.mocap_receive_ns.append(time.time_ns())
        self.data.mocap_stamps_ns.append(stamp_ns(msg.header.stamp))

    def _on_odom(self, msg: Any) -> None:
        self.data.odom_states.append(odometry_state(msg))

    def _on_mocap_odometry(self, msg: Any) -> None:
        self._on_mocap(msg)
        self._on_odom(msg)

    def _on_command(self, msg: Any) -> None:
        data = self.data
        data.command_stamps_ns.append(stamp_ns(msg.header.stamp))
        rates = [float(r) for r in msg.body_rate_radps]
        data.command_actions.append((float(msg.thrust_n), *rates))
        data.command_modes.append(int(msg.mode))
        data.command_versions.append(int(msg.policy_version))

    def _on_node_status(self, msg: Any) -> None:
        health = NodeHealth.from_msg(msg)
        self.data.nodes[health.node] = health

    def _on_learner(self, msg: Any) -> None:
        self.data.learner = LearnerHealth.from_msg(msg)
        self.data.learner_received_mono_s = time.monotonic()
        self.data.learner_reports += 1


def node_reports(nodes: dict[str, NodeHealth], now_ns: int) -> dict[str, NodeReport]:
    """NodeStatus reports of the checked nodes, keyed by role (encoder, policy, ...)."""
    reports = [
        NodeReport(
            node=h.node,
            active_version=h.active_version,
            pinned=h.pinned,
            mode=h.mode,
            age_s=(now_ns - h.stamp_ns) / 1e9,
            rejections=int(h.counters.get("bundle_rejections", 0) or 0),
            warnings=h.warnings,
        )
        for h in nodes.values()
    ]
    return by_role(reports)


def ask_list(client: StackClient, timeout_s: float) -> dict[str, ListAnswer]:
    """LIST answers by role; empty when no node listens on vnd/checkpoint/command."""
    try:
        result = client.checkpoint(CheckpointAction.LIST, timeout_s=timeout_s)
    except ClientError:
        return {}
    answers = [ListAnswer(r.node, r.active_version, r.available_versions) for r in result.replies]
    return by_role(answers)


def evaluate(
    data: Collected,
    answers: dict[str, ListAnswer],
    topics: Topics,
    args: argparse.Namespace,
    thresholds: PreflightThresholds,
    window_s: float,
    writer_types: dict[str, list[str]],
) -> list[CheckRow]:
    """Turn what was heard into the table's rows (in the order of the module docstring)."""
    mocap = stream_stats(data.mocap_stamps_ns)
    mocap_label = topics.mocap + _type_hint(
        topics.mocap, MOCAP_TYPES[args.mocap_type], writer_types
    )
    reports = node_reports(data.nodes, time.time_ns())
    learner = _learner_report(data)
    policy = reports.get("policy")
    states = np.array(data.odom_states).reshape(-1, STATE_DIM)
    odom_label = topics.odom + _type_hint(topics.odom, "nav_msgs/msg/Odometry", writer_types)
    return [
        check_stream_rate(
            "mocap rate",
            mocap_label,
            mocap,
            thresholds.mocap_min_rate_hz,
            thresholds.mocap_max_rate_hz,
            window_s,
        ),
        check_stream_jitter("mocap jitter", mocap_label, mocap, thresholds),
        check_clock_offset(mocap_label, data.mocap_stamps_ns, data.mocap_receive_ns, thresholds),
        check_odometry(odom_label, states, thresholds),
        check_status_reports(reports, thresholds),
        check_node_warnings(reports),
        check_bundle_active(reports, answers),
        check_bundle_versions(
            reports, None if learner is None or args.no_learner else learner.latest_version
        ),
        check_commands(
            topics.command,
            data.command_stamps_ns,
            np.array(data.command_actions, dtype=float).reshape(-1, ACTION_DIM),
            data.command_modes,
            data.command_versions,
            policy.active_version if policy is not None else None,
            thresholds,
        ),
        check_learner(learner, window_s, thresholds, expected_running=not args.no_learner),
        check_disk(measure_disk(args.run_dir), thresholds),
    ]


def _learner_report(data: Collected) -> LearnerReport | None:
    if data.learner is None:
        return None
    return LearnerReport(
        state=data.learner.state,
        latest_version=data.learner.latest_version,
        ticks_stored=data.learner.ticks_stored,
        message=data.learner.message,
        received_age_s=time.monotonic() - data.learner_received_mono_s,
        reports=data.learner_reports,
        latest_refused=data.learner.latest_refused,
        refusal=data.learner.refusal,
    )


def _type_hint(topic: str, expected_type: str, writer_types: dict[str, list[str]]) -> str:
    """' (no writer)' or ' (writers publish X)' when the topic cannot deliver ``expected_type``."""
    types = writer_types.get(topic)
    if not types:
        return " (no writer)"
    if expected_type not in types:
        return f" (writers publish {', '.join(sorted(set(types)))})"
    return ""


def listen(
    args: argparse.Namespace, topics: Topics
) -> tuple[Collected, dict[str, ListAnswer], float, dict[str, list[str]]]:
    """Listen for ``args.duration`` seconds (at least as long as the LIST request takes)."""
    with StackClient(args.vehicle, node_name="vnd_preflight") as client:
        listener = GraphListener(client.node, topics, args.mocap_type)
        start = time.monotonic()
        answers = ask_list(client, args.list_timeout)
        client.spin_for(max(0.0, args.duration - (time.monotonic() - start)))
        window_s = time.monotonic() - start
        probe = GraphProbe(client.node)
        try:
            writers = {
                topic: [offer.msgtype for offer in offers]
                for topic, offers in probe.writers().items()
            }
        finally:
            probe.close()
    return listener.data, answers, window_s, writers


def run(args: argparse.Namespace) -> int:
    """Listen, check, print the table (and the JSON file); the exit code."""
    try:
        thresholds = thresholds_from_args(args)
    except ValueError as err:
        print(f"vnd preflight: error: {err}", file=sys.stderr)
        return 2
    if not args.duration > 0:
        print(f"vnd preflight: error: --duration must be > 0, got {args.duration}", file=sys.stderr)
        return 2
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    topics = Topics.from_args(args)
    try:
        data, answers, window_s, writers = listen(args, topics)
    except KeyboardInterrupt:
        return 130
    report = PreflightReport(
        rows=evaluate(data, answers, topics, args, thresholds, window_s, writers),
        vehicle=args.vehicle,
        window_s=window_s,
    )
    print(format_table(report), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report.to_json() + "\n")
    return 0 if report.passed else 1


__all__ = [
    "Collected",
    "GraphListener",
    "Topics",
    "add_arguments",
    "evaluate",
    "run",
    "thresholds_from_args",
]
