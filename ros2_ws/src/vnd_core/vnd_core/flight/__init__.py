"""ROS-free flight logic that the control nodes wrap: pose filtering, the encoder context,
the safety filter with its model-based fallback, live model swaps and run-time statistics.

Nothing here imports a middleware; nodes feed it plain numpy arrays and nanosecond stamps.
"""

from vnd_core.flight.context import CommandLatch, ContextBuffer, ContextConfig
from vnd_core.flight.fallback import (
    DeadReckoner,
    FallbackConfig,
    FallbackController,
    LandingPlanner,
    Setpoint,
)
from vnd_core.flight.hotswap import Action, ModelSwapper, Source, SwapEvent
from vnd_core.flight.pose_filter import PoseEstimate, PoseFilter, PoseFilterConfig
from vnd_core.flight.safety import Mode, SafetyConfig, SafetyFilter, SafetyOutput
from vnd_core.flight.stats import LatencyWindow, RateEstimator, ReasonCounter, TickMonitor

__all__ = [
    "Action",
    "CommandLatch",
    "ContextBuffer",
    "ContextConfig",
    "DeadReckoner",
    "FallbackConfig",
    "FallbackController",
    "LandingPlanner",
    "LatencyWindow",
    "Mode",
    "ModelSwapper",
    "PoseEstimate",
    "PoseFilter",
    "PoseFilterConfig",
    "RateEstimator",
    "ReasonCounter",
    "SafetyConfig",
    "SafetyFilter",
    "SafetyOutput",
    "Setpoint",
    "Source",
    "SwapEvent",
    "TickMonitor",
]
