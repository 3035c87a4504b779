"""QoS profiles named as in rclpy, mapped to Cyclone DDS the way rmw_cyclonedds_cpp maps them.

Profiles of this stack:
    qos_profile_sensor_data  best effort, volatile, keep-last 5 (odometry, latents, commands)
    qos_profile_default      reliable, volatile, keep-last 10
    qos_profile_model        reliable, transient local, keep-last 1 (model bundles: a late
                             joiner receives the current bundle)
    qos_profile_replay       reliable, transient local, keep-last 3000 (60 s of 50 Hz tick
                             records: the learner may start late or stall briefly)
    qos_profile_status       reliable, transient local, keep-last 1 (latest status)

Wherever a profile is accepted an int depth is too, with rclpy's meaning: reliable, volatile,
keep-last ``depth``. A best-effort writer does not match a reliable reader (DDS request/offer
rule), and a volatile writer does not match a transient-local reader.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DurabilityPolicy",
    "HistoryPolicy",
    "QoSProfile",
    "ReliabilityPolicy",
    "as_profile",
    "qos_profile_checkpoint_status",
    "qos_profile_default",
    "qos_profile_model",
    "qos_profile_replay",
    "qos_profile_sensor_data",
    "qos_profile_status",
    "to_cyclone_qos",
    "to_rclpy_qos",
]

# A reliable writer blocks at most this long when its history is full of unacknowledged samples.
# rmw_cyclonedds uses infinity; a bounded wait (the DDS default) keeps a stuck subscriber from
# freezing a control tick. It plays no part in matching, so peers see identical QoS.
MAX_BLOCKING_TIME_S = 0.1


class ReliabilityPolicy(enum.Enum):
    """Delivery guarantee (rclpy.qos.ReliabilityPolicy names)."""

    RELIABLE = "reliable"
    BEST_EFFORT = "best_effort"


class DurabilityPolicy(enum.Enum):
    """Whether late-joining readers receive samples written before they matched."""

    VOLATILE = "volatile"
    TRANSIENT_LOCAL = "transient_local"


class HistoryPolicy(enum.Enum):
    """How many samples writer and reader caches keep."""

    KEEP_LAST = "keep_last"
    KEEP_ALL = "keep_all"


@dataclass(frozen=True)
class QoSProfile:
    """The QoS subset this stack uses; matching rules and names as in rclpy."""

    reliability: ReliabilityPolicy = ReliabilityPolicy.RELIABLE  # delivery guarantee
    durability: DurabilityPolicy = DurabilityPolicy.VOLATILE  # samples kept for late joiners
    history: HistoryPolicy = HistoryPolicy.KEEP_LAST  # keep-last depth or keep-all
    depth: int = 10  # samples kept per cache with KEEP_LAST [count] (ignored for KEEP_ALL)

    def __post_init__(self) -> None:
        for name, kind in (
            ("reliability", ReliabilityPolicy),
            ("durability", DurabilityPolicy),
            ("history", HistoryPolicy),
        ):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"QoSProfile.{name}: expected {kind.__name__}")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int):
            raise TypeError(f"QoSProfile.depth: expected int, got {self.depth!r}")
        if self.history is HistoryPolicy.KEEP_LAST and not 1 <= self.depth < 2**31:
            raise ValueError(f"QoSProfile.depth={self.depth}: KEEP_LAST needs 1 <= depth < 2^31")


qos_profile_sensor_data = QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=5)
qos_profile_default = QoSProfile()
qos_profile_model = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL, depth=1)
qos_profile_replay = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL, depth=3000)
qos_profile_status = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL, depth=1)
# vnd/checkpoint/status: reliable, volatile, deep enough for every node's answer to one request.
qos_profile_checkpoint_status = QoSProfile(depth=50)


def as_profile(qos: QoSProfile | int) -> QoSProfile:
    """``qos`` itself, or for an int depth rclpy's meaning: reliable, volatile, keep-last."""
    if isinstance(qos, QoSProfile):
        return qos
    if isinstance(qos, int) and not isinstance(qos, bool):
        return QoSProfile(depth=qos)
    raise TypeError(f"expected a QoSProfile or an int history depth, got {qos!r}")


def to_cyclone_qos(qos: QoSProfile | int) -> Any:
    """``cyclonedds.qos.Qos`` for a reader or writer, as rmw_cyclonedds_cpp builds it.

    Transient local also sets the durability service history to the profile's history (Cyclone
    keeps historical data by that policy) with unlimited resource limits. Data representation
    is pinned to XCDR1, the only encoding ROS 2 readers accept.
    """
    from cyclonedds.qos import Policy, Qos
    from cyclonedds.util import duration

    profile = as_profile(qos)
    if profile.history is HistoryPolicy.KEEP_ALL:
        history = Policy.History.KeepAll
    else:
        history = Policy.History.KeepLast(profile.depth)
    if profile.reliability is ReliabilityPolicy.RELIABLE:
        reliability = Policy.Reliability.Reliable(duration(seconds=MAX_BLOCKING_TIME_S))
    else:
        reliability = Policy.Reliability.BestEffort
    policies = [history, reliability, Policy.DataRepresentation(use_cdrv0_representation=True)]
    if profile.durability is DurabilityPolicy.TRANSIENT_LOCAL:
        policies += [
            Policy.Durability.TransientLocal,
            Policy.DurabilityService(
                cleanup_delay=0,
                history=history,
                max_samples=-1,
                max_instances=-1,
                max_samples_per_instance=-1,
            ),
        ]
    else:
        policies.append(Policy.Durability.Volatile)
    return Qos(*policies)


def to_rclpy_qos(qos: QoSProfile | int) -> Any:
    """``rclpy.qos.QoSProfile`` equal to ``qos`` (imports rclpy: rclpy backend only).

    An rclpy profile passes through unchanged: rclpy's own Node.__init__ creates its parameter
    event and rosout publishers through the same overridden methods with rclpy profiles."""
    from rclpy import qos as rclpy_qos

    if isinstance(qos, rclpy_qos.QoSProfile):
        return qos
    profile = as_profile(qos)
    return rclpy_qos.QoSProfile(
        reliability=rclpy_qos.ReliabilityPolicy[profile.reliability.name],
        durability=rclpy_qos.DurabilityPolicy[profile.durability.name],
        history=rclpy_qos.HistoryPolicy[profile.history.name],
        depth=profile.depth,
    )
