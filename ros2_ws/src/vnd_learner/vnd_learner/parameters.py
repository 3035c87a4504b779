"""The learner node's parameters: the node's own settings, the learner settings declared
as nested ROS parameters, the refusal of removed ones and the table of what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vnd_core.config_io import ConfigError
from vnd_core.learner import LearnerConfig
from vnd_core.learner.settings import (
    LEARNER_PRESETS,
    checked_config,
    config_mapping,
    flatten,
    learner_preset,
)
from vnd_ros.parameter import ParameterType
from vnd_ros.params import ParameterError, freeze_parameters, param, parameter_names
from vnd_ros.runtime import (
    node_parameter_overrides,
)

# Parameters the node no longer has: each refused at start-up with what to use instead.
REMOVED_PARAMETERS = {
    "learner_overrides": "set LearnerConfig fields as parameters of their own, by nested name "
    "(-p trainer.iterations:=100, or 'trainer: {iterations: 100}' under ros__parameters)",
    "update_interval_s": "set min_interval_s (the shortest time between updates [s])",
}


@dataclass(frozen=True)
class LearnerNodeConfig:
    """Parameters of the learner node."""

    run_dir: str = param("vnd_data", "replay store and bundle registry root (relative = cwd)")
    vehicle: str = param("agile", "vehicle name (config/vehicles/<name>.yaml) or a YAML path")
    bundle: str = param("", "bundle to start from when the registry is empty; '' = shipped base")
    learn: bool = param(True, "run the learner worker (false: only keep the replay store)")
    preset: str = param(
        "standard", f"defaults of the LearnerConfig parameters: {' | '.join(LEARNER_PRESETS)}"
    )
    segment_period_s: float = param(10.0, "close a replay segment after this long (s); << 60 s")
    segment_max_ticks: int = param(1000, "close a replay segment after this many ticks")
    forward_period_s: float = param(0.5, "period of forwarding ticks and polling the worker (s)")
    status_period_s: float = param(1.0, "period of vnd/learner/status reports (s)")
    worker_niceness: int = param(10, "nice increment of the worker process")
    restart_backoff_s: float = param(1.0, "first wait before restarting a dead worker (s)")


def refuse_removed_parameters(node: Any) -> None:
    """ParameterError naming a removed parameter that is still given, and its replacement."""
    for name, override in node_parameter_overrides(node).items():
        if name in REMOVED_PARAMETERS:
            raise ParameterError(
                f"parameter '{name}' from {override.source} no longer exists: "
                f"{REMOVED_PARAMETERS[name]}"
            )


def declare_learner_config(node: Any, preset: str) -> LearnerConfig:
    """Declare every LearnerConfig field as a parameter, defaults from ``preset``; the values.

    Raises ParameterError for an unknown preset, a mistyped or undeclared parameter, or a
    combination of values the LearnerConfig refuses.
    """
    try:
        defaults = learner_preset(preset)
    except ValueError as err:
        raise ParameterError(f"parameter 'preset': {err}") from None
    config = freeze_parameters(node, LearnerConfig, defaults=defaults)
    try:
        return checked_config(config, "learner parameters")
    except ConfigError as err:
        raise ParameterError(str(err)) from None


def declare_learner_parameters(node: Any) -> tuple[LearnerNodeConfig, LearnerConfig]:
    """Declare the node's own and the LearnerConfig parameters on ``node``; their values."""
    refuse_removed_parameters(node)
    cfg = freeze_parameters(
        node, LearnerNodeConfig, declared_elsewhere=parameter_names(LearnerConfig)
    )
    return cfg, declare_learner_config(node, cfg.preset)


def parameter_table(node: Any) -> list[dict[str, Any]]:
    """Name, type, value and description of every parameter the learner declares on ``node``.

    An optional field left unset has the value None.
    """
    rows = []
    for name in sorted(parameter_names(LearnerNodeConfig) | parameter_names(LearnerConfig)):
        descriptor = node.describe_parameter(name)
        try:
            value = node.get_parameter(name).value
        except Exception as err:  # rclpy refuses to read a typed parameter that is unset
            if type(err).__name__ != "ParameterUninitializedException":
                raise
            value = None
        kind = ParameterType(int(descriptor.type)).name.removeprefix("PARAMETER_").lower()
        rows.append(
            {"name": name, "type": kind, "value": value, "description": descriptor.description}
        )
    return rows


def changed_fields(config: Any, reference: Any) -> dict[str, Any]:
    """Dotted names and values of the fields where dataclass ``config`` differs from
    ``reference`` (of the same class)."""
    old = flatten(config_mapping(reference))
    return {name: v for name, v in flatten(config_mapping(config)).items() if v != old[name]}
