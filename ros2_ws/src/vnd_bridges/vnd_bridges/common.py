"""What both bridge nodes share: input parameters, the thrust model, CtbrCommand decoding and
the operator log lines about the set-point stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vnd_core.config_io import ConfigError, read_yaml, resolve_named
from vnd_core.units import NS_PER_S
from vnd_flight.bridges.gate import CommandGate, CtbrSample, StreamMonitor, Verdict
from vnd_flight.bridges.thrust import ThrustModel
from vnd_ros.params import param

CTBR_COMMAND_TYPE = "vnd_msgs/msg/CtbrCommand"
WATCH_PERIOD_S = 0.05  # how often the node checks whether the stream stopped (logging only)


@dataclass(frozen=True)
class CommandInputConfig:
    """Where commands come from and when they are too old to fly."""

    topic: str = param(
        "vnd/command",
        "vnd_msgs/CtbrCommand input topic; a relative name resolves in the node namespace",
    )
    max_age_s: float = param(
        0.03,
        "largest stamp age of a command on arrival [s] (one 50 Hz period + 10 ms); 0 disables "
        "the check (only for a stamp source whose clock is not synchronised)",
    )
    stopped_after_s: float = param(
        0.1, "log that the set-point stream (and heartbeat) stopped after this long [s]"
    )


@dataclass(frozen=True)
class ThrustConfig:
    """Normalised thrust u in [0, 1] from newtons: T(u) = quadratic_n u^2 + linear_n u."""

    quadratic_n: float = param(
        0.0,
        "u^2 coefficient of the vehicle's thrust fit [N]; with linear_n = 0 too, the model is "
        "linear up to the vehicle's thrust_max_n",
    )
    linear_n: float = param(0.0, "u coefficient of the vehicle's thrust fit [N]")
    vehicle: str = param(
        "agile", "vehicle name or YAML path whose thrust_max_n gives the default linear model"
    )


def make_thrust_model(config: ThrustConfig) -> ThrustModel:
    """The configured fit, or linear up to the vehicle's thrust_max_n when both are 0.

    Reads only ``thrust_max_n`` from the vehicle file (through config_io, not VehicleParams,
    whose module pulls in torch: a bridge process has no use for it). Raises ConfigError
    naming the file when the vehicle is unknown or has no positive thrust_max_n.
    """
    if not is_default_thrust_fit(config):
        return ThrustModel(quadratic_n=config.quadratic_n, linear_n=config.linear_n)
    path = resolve_named("vehicles", config.vehicle)
    data = read_yaml(path)
    thrust_max_n = data.get("thrust_max_n") if isinstance(data, dict) else None
    if isinstance(thrust_max_n, bool) or not isinstance(thrust_max_n, int | float):
        raise ConfigError(f"{path}: thrust_max_n: expected a number, got {thrust_max_n!r}")
    try:
        return ThrustModel.linear(float(thrust_max_n))
    except ValueError as err:
        raise ConfigError(f"{path}: thrust_max_n: {err}") from err


def is_default_thrust_fit(config: ThrustConfig) -> bool:
    """True when no thrust fit is configured (both coefficients 0)."""
    return config.quadratic_n == 0.0 and config.linear_n == 0.0


def log_thrust_model(logger: Any, config: ThrustConfig, model: ThrustModel) -> None:
    """Say which thrust model the bridge flies with; warn when it is only the linear default."""
    if is_default_thrust_fit(config):
        logger.warn(
            f"no thrust fit configured: linear up to {model.thrust_max_n:.2f} N "
            f"(thrust_max_n of vehicle '{config.vehicle}'); set thrust.quadratic_n and "
            "thrust.linear_n from a thrust-stand or hover-throttle fit before flying"
        )
    else:
        logger.info(
            f"thrust model: {model.quadratic_n:g} u^2 + {model.linear_n:g} u "
            f"(max {model.thrust_max_n:.2f} N)"
        )


def flying_modes(ctbr_cls: Any) -> frozenset[int]:
    """Controller modes whose commands are flown: the policy and both safety fallbacks."""
    return frozenset(
        {ctbr_cls.MODE_POLICY, ctbr_cls.MODE_FALLBACK_HOLD, ctbr_cls.MODE_FALLBACK_LAND}
    )


def make_gate(config: CommandInputConfig, ctbr_cls: type) -> CommandGate:
    """The command gate of a bridge node."""
    return CommandGate(flying_modes(ctbr_cls), config.max_age_s)


def sample_from_msg(msg: Any) -> CtbrSample:
    """CtbrSample of a vnd_msgs/CtbrCommand of either backend."""
    stamp = msg.header.stamp
    rates = msg.body_rate_radps
    return CtbrSample(
        stamp_s=stamp.sec + stamp.nanosec / NS_PER_S,
        thrust_n=float(msg.thrust_n),
        body_rate_flu_radps=(float(rates[0]), float(rates[1]), float(rates[2])),
        mode=int(msg.mode),
    )


class StreamLog:
    """Operator log lines: stream started, command refused (throttled), stream stopped.

    Args:
        logger: the node's logger.
        target: what receives the set points, for the messages ("PX4", "MAVROS").
        stopped_after_s: see :class:`CommandInputConfig`.
    """

    def __init__(self, logger: Any, target: str, stopped_after_s: float) -> None:
        self._logger = logger
        self._target = target
        self._monitor = StreamMonitor(stopped_after_s)
        self._last_refusal: Verdict | None = None

    def forwarded(self, now_ns: int) -> None:
        """A command went out at ``now_ns``."""
        if self._monitor.forwarded(now_ns / NS_PER_S):
            self._logger.info(f"set points flowing to {self._target} (offboard heartbeat on)")

    def refused(self, verdict: Verdict | None, gate: CommandGate) -> None:
        """A command was refused with ``verdict``."""
        self._last_refusal = verdict
        name = verdict.value if verdict else "unknown"
        self._logger.warn(
            f"command refused ({name}); refusals so far: {_counts(gate)}",
            throttle_duration_sec=1.0,
        )

    def check(self, now_ns: int) -> None:
        """Timer callback body: say once when the stream stopped."""
        if self._monitor.check(now_ns / NS_PER_S):
            reason = self._last_refusal.value if self._last_refusal else "no commands"
            self._logger.warn(
                f"no set point for {self._target} for {self._monitor.stopped_after_s:.3f} s "
                f"(last refusal: {reason}): heartbeat stopped, the autopilot's offboard-loss "
                "failsafe takes over"
            )


def _counts(gate: CommandGate) -> str:
    refused = {v.value: n for v, n in gate.counts.items() if v is not Verdict.FORWARD}
    return ", ".join(f"{k}={n}" for k, n in sorted(refused.items())) or "none"
