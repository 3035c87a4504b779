"""Parameters of the policy node (``config/policy.yaml``, then ``-p`` overrides): one dataclass
whose fields are the node's ROS parameters (vnd_ros.params declares and reads them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vnd_core.reference import ReferenceSpec
from vnd_flight.safety_config import SafetyConfig
from vnd_ros.params import param


@dataclass(frozen=True)
class PolicyNodeConfig:
    """Parameters of the policy node (the control period is ``safety.period_s``)."""

    bundle: str = param("", "start-up bundle path; empty = the shipped base bundle")
    realtime_priority: int = param(0, "SCHED_FIFO priority of the control path, 1-99; 0 = off")
    vehicle: str = param("agile", "vehicle name or YAML path: limits and fallback model")
    min_tick_interval_s: float = param(
        0.018, "odometry stamped closer than this to the last tick's odometry waits (s)"
    )
    tick_margin_s: float = param(0.006, "watchdog ticks after period + this without a tick (s)")
    rehearsal_lead_s: float = param(
        0.0025, "rehearse the tick (cache warming) this long before odometry is due (s); 0 = off"
    )
    latent_max_age_s: float = param(0.1, "a latent older than this is not used (s)")
    smoke_budget_us: float = param(2000.0, "bundle check: median inference time limit (us)")
    unsafe_skip_behaviour_check: bool = param(
        False, "TEST ONLY: let bundles fly without the behavioural check (logs an error)"
    )
    startup_timeout_s: float = param(60.0, "longest wait for the start-up bundle (s)")
    status_period_s: float = param(1.0, "period of vnd/node_status reports (s)")
    host_diagnostics: bool = param(
        False, "read the tick thread's /proc schedstat each tick to split late-tick warnings"
    )
    world_frame: str = param("world", "frame_id of tick records (ENU world)")
    body_frame: str = param("base_link", "frame_id of commands (FLU body)")
    scenario: str = param("", "fly this scenario's reference (name or YAML); empty = `reference`")
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)  # parameter reference
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # safety filter and fallback
