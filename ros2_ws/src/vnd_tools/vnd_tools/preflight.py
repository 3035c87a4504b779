"""Pre-flight checks as pure functions: measured samples in, pass/fail rows out.

``vnd preflight`` (vnd_tools.commands.preflight) listens to a live graph for a few seconds and
hands what it heard to the functions below; they never touch a middleware, so every threshold
is unit-tested with synthetic inputs. Each row names the check, says PASS, FAIL or SKIP, and
carries what was measured and what was expected, so a failed row explains itself:

    check            result  measured                                expected
    mocap rate       FAIL    20.0 Hz over 60 stamps (/vnd1/mocap/pose)  90.0-400.0 Hz

Time bases: message stamps and receive times are wall-clock nanoseconds (ROS time = system
time on a flight computer); ages are seconds measured by the caller.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from vnd_core import wire
from vnd_core.wire import MODE_VALUES, LearnerState

BYTES_PER_MB = 1024 * 1024
MODEL_ROLES = ("encoder", "policy")  # nodes that must fly the same bundle version


class Verdict(enum.Enum):
    """Outcome of one check."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"  # not applicable to this setup (e.g. no learner launched)


@dataclass(frozen=True)
class CheckRow:
    """One line of the pre-flight table."""

    name: str  # short check name, e.g. "mocap rate"
    verdict: Verdict  # PASS, FAIL or SKIP
    measured: str  # what was measured, with units
    expected: str  # what passes, with units

    @property
    def failed(self) -> bool:
        """True for a FAIL row."""
        return self.verdict is Verdict.FAIL

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {**asdict(self), "verdict": self.verdict.value}


def _row(name: str, ok: bool, measured: str, expected: str) -> CheckRow:
    return CheckRow(name, Verdict.PASS if ok else Verdict.FAIL, measured, expected)


@dataclass(frozen=True)
class PreflightThresholds:
    """Pass limits of every check (``vnd preflight`` exposes each as an option)."""

    mocap_min_rate_hz: float = 90.0  # slowest acceptable mocap rate (drivers give 100-360 Hz)
    mocap_max_rate_hz: float = 400.0  # fastest plausible mocap rate (faster: duplicated stream?)
    mocap_max_jitter_ms: float = 2.0  # standard deviation of mocap stamp intervals [ms]
    mocap_max_gap_ms: float = 50.0  # longest gap between mocap stamps (watchdog is 100 ms) [ms]
    # |median(receive wall time - stamp)| limit [ms]: commands carry the mocap stamp and the
    # bridges drop any older than command.max_age_s (30 ms) on arrival.
    max_clock_offset_ms: float = 20.0
    quat_norm_tol: float = 0.01  # | |q| - 1 | limit of odometry orientations
    max_speed_mps: float = 5.0  # largest plausible world speed before take-off [m/s]
    max_body_rate_radps: float = 10.0  # largest plausible body rate (any axis) [rad/s]
    command_min_rate_hz: float = 40.0  # slowest acceptable vnd/command rate (50 Hz nominal)
    accepted_modes: tuple[str, ...] = ("policy",)  # controller modes that may take off
    status_max_age_s: float = 3.0  # NodeStatus (1 Hz) older than this: node gone or hung [s]
    learner_max_age_s: float = 3.0  # no LearnerStatus (1 Hz) for this long: unreachable [s]
    min_free_mb: float = 1024.0  # free disk space needed for the replay store [MiB]

    def validate(self) -> None:
        """Raise ValueError naming the first inconsistent threshold."""
        for name, value in asdict(self).items():
            if name != "accepted_modes" and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"threshold {name} must be finite and >= 0, got {value}")
        if self.mocap_min_rate_hz > self.mocap_max_rate_hz:
            raise ValueError(
                f"mocap_min_rate_hz {self.mocap_min_rate_hz} > "
                f"mocap_max_rate_hz {self.mocap_max_rate_hz}"
            )
        unknown = [mode for mode in self.accepted_modes if mode not in MODE_VALUES]
        if unknown or not self.accepted_modes:
            raise ValueError(
                f"accepted_modes {list(self.accepted_modes)}: choose from {sorted(MODE_VALUES)}"
            )


@dataclass(frozen=True)
class NodeReport:
    """What a model-holding node (encoder, policy) last said about itself."""

    node: str  # fully qualified node name, e.g. /vnd1/policy
    active_version: int  # bundle version in use (0 = none)
    pinned: bool  # learner bundles refused
    mode: int = 0  # CtbrCommand MODE_* (policy), 0 for the others
    age_s: float = 0.0  # wall time since the report's stamp [s]
    rejections: int = 0  # bundles the node refused since start (counter bundle_rejections)
    warnings: tuple[str, ...] = ()  # conditions the node says the operator must act on


@dataclass(frozen=True)
class ListAnswer:
    """One node's answer to a CheckpointCommand LIST request."""

    node: str  # fully qualified name of the answering node
    active_version: int  # bundle version active (0 = none)
    available_versions: tuple[int, ...] = ()  # versions held and ready to activate


Named = TypeVar("Named", NodeReport, ListAnswer)  # anything with a fully qualified .node


def node_role(node: str) -> str:
    """Last component of a fully qualified node name ('/vnd1/policy' -> 'policy')."""
    return node.rstrip("/").rsplit("/", 1)[-1]


def by_role(items: Iterable[Named]) -> dict[str, Named]:
    """Items keyed by :func:`node_role` of their node (the last one wins)."""
    return {node_role(item.node): item for item in items}


def check_status_reports(
    reports: Mapping[str, NodeReport], thresholds: PreflightThresholds
) -> CheckRow:
    """PASS when the encoder and the policy both reported recently on vnd/node_status.

    Args:
        reports: latest report by node role (see :func:`by_role`).
        thresholds: the largest report age accepted.
    """
    name = "node status"
    expected = f"encoder and policy report, age <= {thresholds.status_max_age_s:g} s"
    parts, ok = [], True
    for role in MODEL_ROLES:
        report = reports.get(role)
        if report is None:
            parts.append(f"{role}: no report")
            ok = False
        else:
            fresh = report.age_s <= thresholds.status_max_age_s
            ok &= fresh
            parts.append(f"{role}: {report.age_s:.1f} s old" + ("" if fresh else " (STALE)"))
    return _row(name, ok, ", ".join(parts), expected)


def check_node_warnings(reports: Mapping[str, NodeReport]) -> CheckRow:
    """PASS when no node reports a warning (latent missing, policy suspended, fallback, ...):
    each is a condition the vehicle should not take off in."""
    parts = [
        f"{role}: {warning}"
        for role, report in sorted(reports.items())
        for warning in report.warnings
    ]
    return _row("node warnings", not parts, "; ".join(parts) or "none", "no node warns")


def check_bundle_active(
    reports: Mapping[str, NodeReport], answers: Mapping[str, ListAnswer] | None
) -> CheckRow:
    """PASS when encoder and policy each fly a bundle (version > 0), as both NodeStatus and,
    when a LIST request was answered, the LIST answers say.

    Args:
        reports: latest NodeStatus by role.
        answers: LIST answers by role; None when no LIST request was made.
    """
    name = "bundle active"
    expected = "encoder and policy active version > 0" + (
        ", LIST answers agree" if answers is not None else ""
    )
    parts, ok = [], True
    for role in MODEL_ROLES:
        report = reports.get(role)
        version = report.active_version if report is not None else None
        text = f"{role} v{version}" if version is not None else f"{role} no status"
        if report is not None and report.rejections:
            text += f" ({report.rejections} bundle(s) rejected so far)"
        ok &= bool(version)
        if answers is not None:
            answer = answers.get(role)
            if answer is None:
                text += " (no LIST answer)"
                ok = False
            else:
                held = ",".join(map(str, answer.available_versions)) or "none"
                text += f" (LIST: active v{answer.active_version}, held {held})"
                ok &= answer.active_version == version and answer.active_version > 0
        parts.append(text)
    return _row(name, ok, ", ".join(parts), expected)


def check_bundle_versions(
    reports: Mapping[str, NodeReport], learner_latest_version: int | None
) -> CheckRow:
    """PASS when encoder and policy fly the same version, agree on pinning, and (unless
    pinned) are not behind the newest bundle the learner published.

    Args:
        reports: latest NodeStatus by role.
        learner_latest_version: LearnerStatus.latest_version, None without a learner report.
    """
    name = "bundle versions"
    expected = "encoder == policy, same pin state, not older than the learner's latest"
    encoder, policy = reports.get("encoder"), reports.get("policy")
    if encoder is None or policy is None:
        missing = " and ".join(r for r in MODEL_ROLES if reports.get(r) is None)
        return _row(name, False, f"no status from {missing}", expected)
    measured = f"encoder v{encoder.active_version}, policy v{policy.active_version}"
    problems = []
    if encoder.active_version != policy.active_version:
        problems.append("version mismatch")
    if encoder.pinned != policy.pinned:
        problems.append(f"pin differs (encoder {encoder.pinned}, policy {policy.pinned})")
    pinned = encoder.pinned and policy.pinned
    measured += " pinned" if pinned else ""
    if learner_latest_version is not None:
        measured += f", learner latest v{learner_latest_version}"
        newest_flown = min(encoder.active_version, policy.active_version)
        if not pinned and learner_latest_version > newest_flown:
            problems.append("stale bundle: the learner published a newer one")
    measured += f"; BAD: {', '.join(problems)}" if problems else ""
    return _row(name, not problems, measured, expected)


@dataclass(frozen=True)
class LearnerReport:
    """The learner's latest vnd/learner/status and how long ago it arrived."""

    state: int  # LearnerStatus STATE_*
    latest_version: int  # newest bundle version published (0 = none)
    ticks_stored: int  # transitions in the replay store
    message: str  # human-readable detail
    received_age_s: float  # time since the latest report arrived [s]
    reports: int  # reports received while listening
    latest_refused: bool = False  # a flight node refused the newest published bundle
    refusal: str = ""  # the newest refusal ('<node> refused v<N>: <reason>')


def check_learner(
    report: LearnerReport | None,
    window_s: float,
    thresholds: PreflightThresholds,
    expected_running: bool = True,
) -> CheckRow:
    """PASS when a learner report arrived within ``learner_max_age_s``, it is not in error and
    no flight node refused the newest bundle it published (learning would go on while the
    vehicle keeps flying an older one, unnoticed).

    ``expected_running`` False (no learner launched) gives SKIP.
    """
    name = "learner"
    expected = (
        f"vnd/learner/status within {thresholds.learner_max_age_s:g} s, state != error, "
        "newest bundle not refused by a flight node"
    )
    if not expected_running:
        return CheckRow(name, Verdict.SKIP, "not checked (--no-learner)", expected)
    if report is None:
        return _row(name, False, f"no vnd/learner/status report in {window_s:.1f} s", expected)
    state = wire.learner_state_name(report.state)
    measured = (
        f"{state}, last report {report.received_age_s:.1f} s ago ({report.reports} in window), "
        f"{report.ticks_stored} ticks stored, latest v{report.latest_version}"
    )
    failed = report.state == LearnerState.ERROR
    ok = report.received_age_s <= thresholds.learner_max_age_s and not failed
    if failed and report.message:
        measured += f": {report.message}"
    if report.latest_refused:
        ok = False
        measured += f"; BAD: newest bundle refused: {report.refusal}"
    return _row(name, ok, measured, expected)


@dataclass
class PreflightReport:
    """All rows of one pre-flight run."""

    rows: list[CheckRow] = field(default_factory=list)  # in check order
    vehicle: str = ""  # vehicle namespace checked
    window_s: float = 0.0  # listening time [s]

    @property
    def passed(self) -> bool:
        """True when no row failed."""
        return not any(row.failed for row in self.rows)

    def to_json(self) -> str:
        """The report as a JSON document (``vnd preflight --json``)."""
        return json.dumps(
            {
                "vehicle": self.vehicle,
                "window_s": self.window_s,
                "passed": self.passed,
                "rows": [row.to_dict() for row in self.rows],
            },
            indent=2,
        )


def format_table(report: PreflightReport) -> str:
    """Fixed-width table, then one summary line."""
    rows = report.rows
    name_w = max([len("check"), *(len(r.name) for r in rows)])
    measured_w = min(max([len("measured"), *(len(r.measured) for r in rows)]), 100)
    lines = [f"{'check':<{name_w}}  result  {'measured':<{measured_w}}  expected"]
    for row in rows:
        lines.append(
            f"{row.name:<{name_w}}  {row.verdict.value:<6}  {row.measured:<{measured_w}}  "
            f"{row.expected}"
        )
    failed = [row.name for row in rows if row.failed]
    if failed:
        lines.append(f"preflight FAILED: {len(failed)} of {len(rows)} checks ({', '.join(failed)})")
    else:
        lines.append(f"preflight passed: {len(rows)} checks, vehicle '{report.vehicle}'")
    return "\n".join(lines)
