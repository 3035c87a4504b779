"""Flight scenarios: a reference trajectory, named condition phases and timed disturbance events.

Loaded from ``config/scenarios/<name>.yaml``. The phases label the true condition for reports and
latent plots; the events drive the true plant (:mod:`vnd_core.plant`). Every event type is its own
dataclass, selected by the ``type`` field; errors name the file, the event index and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vnd_core.config_io import ConfigError, from_mapping, read_yaml, resolve_named
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.state import POS, VEL, hover_state

Vec3 = tuple[float, float, float]

WIND_KINDS = ("constant", "gusts", "sinusoidal")
ROTOR_COUNT = 4


@dataclass(frozen=True)
class Phase:
    """A named stretch of the scenario; it lasts until the next phase starts (or the end)."""

    name: str  # condition label used in reports and latent plots (calm, wind_a, payload, ...)
    start_s: float  # scenario time at which the phase begins


@dataclass(frozen=True)
class WindEvent:
    """Wind starts (or replaces the current wind). It acts through air-relative drag."""

    type: str  # always "wind"
    at_s: float  # scenario time of the event
    kind: str  # constant | gusts | sinusoidal
    velocity_mps: Vec3  # mean air velocity in the world frame (direction the air moves to)
    gust_std_mps: Vec3 = (0.0, 0.0, 0.0)  # gusts: stationary std of the random part per axis
    gust_time_constant_s: float = 1.0  # gusts: correlation time of the random part
    amplitude_mps: Vec3 = (0.0, 0.0, 0.0)  # sinusoidal: amplitude per axis around the mean
    period_s: float = 4.0  # sinusoidal: period of the oscillation

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if self.kind not in WIND_KINDS:
            raise ValueError(f"kind must be one of {WIND_KINDS}, got {self.kind!r}")
        if self.kind == "gusts":
            if any(s < 0 for s in self.gust_std_mps) or not any(s > 0 for s in self.gust_std_mps):
                raise ValueError(
                    f"gust_std_mps must be >= 0 and not all 0, got {self.gust_std_mps}"
                )
            if not self.gust_time_constant_s > 0:
                raise ValueError(
                    f"gust_time_constant_s must be > 0, got {self.gust_time_constant_s}"
                )
        if self.kind == "sinusoidal":
            if not any(a != 0 for a in self.amplitude_mps):
                raise ValueError("amplitude_mps must not be all 0 for sinusoidal wind")
            if not self.period_s > 0:
                raise ValueError(f"period_s must be > 0, got {self.period_s}")


@dataclass(frozen=True)
class WindOffEvent:
    """The air becomes still."""

    type: str  # always "wind_off"
    at_s: float  # scenario time of the event


@dataclass(frozen=True)
class PayloadEvent:
    """A payload is attached: more mass and a shifted centre of mass."""

    type: str  # always "payload"
    at_s: float  # scenario time of the event
    mass_kg: float  # payload mass
    com_offset_m: Vec3 = (0.0, 0.0, 0.0)  # payload's centre of mass in the body frame (FLU)

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if not self.mass_kg > 0:
            raise ValueError(f"mass_kg must be > 0, got {self.mass_kg}")
        if any(abs(c) > 0.5 for c in self.com_offset_m):
            raise ValueError(f"com_offset_m must be within 0.5 m per axis, got {self.com_offset_m}")


@dataclass(frozen=True)
class PayloadOffEvent:
    """The payload is released."""

    type: str  # always "payload_off"
    at_s: float  # scenario time of the event


@dataclass(frozen=True)
class PropDamageEvent:
    """One rotor loses thrust (and its drag torque) by a constant factor."""

    type: str  # always "prop_damage"
    at_s: float  # scenario time of the event
    rotor: int  # 0 front-left, 1 back-left, 2 back-right, 3 front-right (plant.ROTOR_POSITIONS)
    efficiency: float  # remaining thrust fraction, 0-1

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if not 0 <= self.rotor < ROTOR_COUNT:
            raise ValueError(f"rotor must be 0-{ROTOR_COUNT - 1}, got {self.rotor}")
        if not 0.0 <= self.efficiency <= 1.0:
            raise ValueError(f"efficiency must be within 0-1, got {self.efficiency}")


@dataclass(frozen=True)
class PropRepairEvent:
    """Rotors return to full efficiency (one rotor, or all when ``rotor`` is omitted)."""

    type: str  # always "prop_repair"
    at_s: float  # scenario time of the event
    rotor: int | None = None  # rotor index 0-3; None repairs every rotor

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if self.rotor is not None and not 0 <= self.rotor < ROTOR_COUNT:
            raise ValueError(f"rotor must be 0-{ROTOR_COUNT - 1}, got {self.rotor}")


Event = (
    WindEvent | WindOffEvent | PayloadEvent | PayloadOffEvent | PropDamageEvent | PropRepairEvent
)

EVENT_TYPES: dict[str, type] = {
    "wind": WindEvent,
    "wind_off": WindOffEvent,
    "payload": PayloadEvent,
    "payload_off": PayloadOffEvent,
    "prop_damage": PropDamageEvent,
    "prop_repair": PropRepairEvent,
}


@dataclass(frozen=True)
class Scenario:
    """One flight: reference, condition phases and disturbance events, all in scenario time."""

    name: str  # identifier used in reports
    duration_s: float  # length of the flight
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)  # trajectory to follow
    phases: tuple[Phase, ...] = (Phase("calm", 0.0),)  # ordered condition labels
    events: tuple[Event, ...] = ()  # timed disturbances, ordered by at_s
    description: str = ""  # one line for humans

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")
        self.reference.validate()
        if not self.phases:
            raise ValueError("phases must list at least one phase")
        if self.phases[0].start_s != 0.0:
            raise ValueError(f"phases[0].start_s must be 0, got {self.phases[0].start_s}")
        for i, (a, b) in enumerate(zip(self.phases, self.phases[1:], strict=False)):
            if not a.start_s < b.start_s < self.duration_s:
                raise ValueError(
                    f"phases[{i + 1}].start_s must increase and stay below duration_s, "
                    f"got {b.start_s} after {a.start_s}"
                )
        for i, phase in enumerate(self.phases):
            if not phase.name:
                raise ValueError(f"phases[{i}].name must not be empty")
        times = [e.at_s for e in self.events]
        for i, t in enumerate(times):
            if not 0.0 <= t <= self.duration_s:
                raise ValueError(f"events[{i}].at_s must be within 0-duration_s, got {t}")
        if times != sorted(times):
            raise ValueError("events must be ordered by at_s")

    def phase_at(self, t_s: float) -> str:
        """Name of the phase active at scenario time ``t_s``."""
        name = self.phases[0].name
        for phase in self.phases:
            if phase.start_s <= t_s + 1e-9:
                name = phase.name
        return name

    def phase_spans(self) -> list[tuple[str, float, float]]:
        """Every phase as (name, start_s, end_s), in order; the last ends at duration_s."""
        ends = [p.start_s for p in self.phases[1:]] + [self.duration_s]
        return [(p.name, p.start_s, end) for p, end in zip(self.phases, ends, strict=True)]

    def phase_names(self) -> list[str]:
        """Distinct phase names in order of first appearance."""
        return list(dict.fromkeys(p.name for p in self.phases))

    def trajectory(self, batch_size: int = 1) -> Trajectory:
        """The reference for ``batch_size`` environments."""
        return Trajectory.from_spec(self.reference, batch_size)

    def start_state(self, batch_size: int = 1, match_velocity: bool = True) -> torch.Tensor:
        """Level state (batch_size, 13) at the reference's start point.

        With ``match_velocity`` the vehicle already moves with the reference's start velocity,
        so tracking metrics are not dominated by a take-off transient.
        """
        sample = self.trajectory(batch_size).sample(torch.zeros(batch_size))
        state = hover_state((batch_size,))
        state[:, POS] = sample.position_m
        if match_velocity:
            state[:, VEL] = sample.velocity_mps
        return state


@dataclass(frozen=True)
class _ScenarioFile:
    """The YAML layout before events are dispatched on their ``type``."""

    name: str  # identifier used in reports
    duration_s: float  # length of the flight
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)  # trajectory to follow
    phases: tuple[Phase, ...] = (Phase("calm", 0.0),)  # ordered condition labels
    events: tuple[dict, ...] = ()  # raw event mappings
    description: str = ""  # one line for humans


def parse_event(data: Any, where: str) -> Event:
    """Build one event from its mapping, dispatching on ``type``; errors are prefixed by where."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in EVENT_TYPES:
        raise ConfigError(f"{where}: type: must be one of {list(EVENT_TYPES)}, got {kind!r}")
    return from_mapping(EVENT_TYPES[kind], data, where)


def scenario_from_mapping(data: Any, where: str) -> Scenario:
    """Build and validate a :class:`Scenario` from a parsed YAML mapping."""
    raw = from_mapping(_ScenarioFile, data, where)
    events = tuple(parse_event(e, f"{where}: events[{i}]") for i, e in enumerate(raw.events))
    scenario = Scenario(
        name=raw.name,
        duration_s=raw.duration_s,
        reference=raw.reference,
        phases=raw.phases,
        events=events,
        description=raw.description,
    )
    try:
        scenario.validate()
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from err
    return scenario


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a scenario by name (``config/scenarios/<name>.yaml``) or by file path."""
    path = resolve_named("scenarios", name_or_path)
    return scenario_from_mapping(read_yaml(path), str(path))


def calm_scenario(
    duration_s: float = 20.0, reference: ReferenceSpec | None = None, name: str = "calm"
) -> Scenario:
    """A disturbance-free scenario built in code (tests, quick runs)."""
    return Scenario(name=name, duration_s=duration_s, reference=reference or ReferenceSpec())
