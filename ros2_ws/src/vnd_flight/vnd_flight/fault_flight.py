"""Closed-loop fault flights: the flight runtime of the stack (pose filter, policy tick with its
safety filter) flying the true plant in simulated time while a fault is injected into the
odometry, judged by what the simulated vehicle does.

The loop runs the nodes' logic at 1 ms resolution without middleware: the simulated vehicle
stepped every 2 ms with its 100 Hz motion capture, the pose filter, odometry arriving 1 ms after its
stamp, the policy node's event-driven tick (a sample stamped at least ``min_tick_interval_s``
after the last tick's) and its watchdog deadline (a tick when none came for a period plus
``tick_margin_s``, then one per period), and each command reaching the plant 1 ms after the
tick. The fault flights leave the encoder out (the policy flies on z = 0), so what is
measured is the safety layer's own doing; :mod:`vnd_flight.runtime_flight` runs the same loop
with it.

Faults (``vnd_flight.odometry_faults``) act on the odometry from the fault to the end.

``response="level_hover"`` replaces the stack's commands from the fault on by an ideal cut to a
level hover (level attitude from the true state, thrust for the weight): the fallback must do
no worse than that cut.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
from vnd_core.bundle import Bundle
from vnd_core.latent_estimator import LatentEstimator
from vnd_core.plant_parts import PlantConfig
from vnd_core.policy import reference_numpy
from vnd_core.reference import ReferenceSpec
from vnd_core.scenario import Scenario, load_scenario, scenario_from_mapping
from vnd_core.simulation import SimSample, SimulatedVehicle, SimulationConfig
from vnd_core.state import POS, QUAT, VEL
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams
from vnd_core.wire import Mode

from vnd_flight.blind import tilt_rad
from vnd_flight.controller import LatentSample, PolicyController, TickRecord
from vnd_flight.fallback import FallbackController, yaw_of
from vnd_flight.odometry_faults import FAULTS, OdometryFault
from vnd_flight.pose_filter import PoseFilter
from vnd_flight.safety_config import SafetyConfig

NS_PER_MS = 1_000_000
FLIGHT_STATES = ("hover", "figure8", "wind")
RESPONSES = ("stack", "level_hover")
LEVEL_DEG = 10.0  # "level" in time_to_level_s: tilt below this
_UP = np.array([0.0, 0.0, 1.0])


@dataclass(frozen=True)
class FaultFlight:
    """One fault flight."""

    flight_state: str = "hover"  # hover | figure8 (fault at peak speed) | wind (4 m/s, steady)
    fault: str = "stop"  # one of FAULTS
    seed: int = 0  # seed of the plant's noise
    warmup_s: float = 5.0  # flight before the fault (figure8: the next peak-speed instant after)
    watch_s: float = 9.0  # flight watched after the fault
    response: str = "stack"  # stack | level_hover (ideal cut, the comparison)
    swap_at_fault: bool = False  # a new bundle version (same weights) goes live at the fault
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # the policy node's filter

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name, allowed in (
            ("flight_state", FLIGHT_STATES),
            ("fault", FAULTS),
            ("response", RESPONSES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not self.warmup_s > 0 or not self.watch_s > 0:
            raise ValueError(
                f"warmup_s and watch_s must be > 0, got {self.warmup_s}, {self.watch_s}"
            )


@dataclass(frozen=True)
class FaultOutcome:
    """What the vehicle did after the fault (ground truth)."""

    crashed: bool  # the plant flagged a crash
    landed: bool  # resting on the floor at the end
    holding: bool  # in the air at the end, slower than 0.3 m/s, inside the geofence
    inside_geofence: bool  # at the end, inside the safety filter's geofence box
    time_to_level_s: float  # from the fault to the first tilt below LEVEL_DEG (inf: never)
    max_tilt_after_0_5_s_deg: float  # largest tilt from 0.5 s after the fault on
    excursion_m: float  # largest horizontal distance from the position at the fault
    landing_error_m: float  # horizontal distance of the landing point from it (nan: no landing)
    ticks_lost: int  # command gaps longer than 1.5 control periods after the fault
    final_mode: str  # the safety filter's mode at the end
    modes: tuple[str, ...]  # the modes flown after the fault, in order

    def as_dict(self) -> dict:
        """JSON-ready figures."""
        return {k: (v if not isinstance(v, tuple) else list(v)) for k, v in vars(self).items()}


WIND_SCENARIO = {
    "name": "hover_wind_4mps",
    "description": "hover in a steady 4 m/s wind along +x",
    "duration_s": 60.0,
    "reference": {"kind": "hover", "center_m": [0.0, 0.0, 1.2]},
    "phases": [{"name": "wind", "start_s": 0.0}],
    "events": [{"at_s": 0.0, "type": "wind", "kind": "constant", "velocity_mps": [4, 0, 0]}],
}  # the ``wind`` flight state (a scenario mapping, as in config/scenarios/*.yaml)
SCENARIO_NAMES = {"hover": "hover_calm", "figure8": "figure8_calm"}  # the other flight states


def flight_scenario(flight_state: str) -> Scenario:
    """The scenario flown for ``flight_state``."""
    if flight_state in SCENARIO_NAMES:
        return load_scenario(SCENARIO_NAMES[flight_state])
    return scenario_from_mapping(WIND_SCENARIO, "fault flight wind")


def fault_time_s(scenario: Scenario, warmup_s: float) -> float:
    """When the fault strikes: ``warmup_s``, or for a moving reference the instant of peak
    reference speed within the lap after it."""
    if scenario.reference.kind == "hover":
        return warmup_s
    times = warmup_s + np.arange(0.0, scenario.reference.period_s, 0.01)
    speeds = np.linalg.norm(reference_numpy(scenario.reference, times)[1], axis=-1)
    return float(times[int(np.argmax(speeds))])


def _level_hover(vehicle: VehicleParams, truth: np.ndarray, yaw_rad: float) -> np.ndarray:
    """Ideal cut to a level hover: rates that level the true attitude (the fallback's attitude
    loop, heading ``yaw_rad``), thrust for the weight."""
    rates = FallbackController(vehicle).attitude_rates(truth[QUAT], _UP, yaw_rad)
    cos_tilt = max(math.cos(tilt_rad(truth[QUAT])), 0.3)
    return np.array([vehicle.hover_thrust_n / cos_tilt, *rates])


def fly_fault(
    vehicle: VehicleParams, bundle: Bundle, flight: FaultFlight
) -> tuple[FaultOutcome, dict[str, np.ndarray]]:
    """Fly ``flight`` with ``bundle``; returns the outcome and the trace (t_s, truth (N, 13),
    mode (N,)) sampled at the motion-capture rate."""
    flight.validate()
    scenario = flight_scenario(flight.flight_state)
    fault_s = fault_time_s(scenario, flight.warmup_s)
    end_s = fault_s + flight.watch_s
    scenario = replace(scenario, duration_s=max(scenario.duration_s, end_s + 1.0))
    loop = RuntimeLoop.on_scenario(vehicle, bundle, scenario, flight)
    loop.run(fault_s, end_s)
    return loop.outcome(fault_s), loop.trace()


class LatentProvider(Protocol):
    """Where the policy's latent comes from in a :class:`RuntimeLoop`: asked at every tick,
    told every command sent (the encoder node's logic, an oracle, an online estimator)."""

    def latent(self, now_ns: int, state: np.ndarray, stamp_ns: int) -> np.ndarray | None:
        """z (nz,) the policy node holds at the tick at ``now_ns`` whose odometry ``state``
        (13,) is stamped ``stamp_ns``; None: no valid latent."""
        ...

    def after_command(self, stamp_ns: int, state: np.ndarray, action: np.ndarray) -> None:
        """The command (4,) that answered the odometry ``state`` (13,) stamped ``stamp_ns``."""
        ...


class EncoderLatent:
    """The encoder node's logic on the model of the bundle flying: the latent inferred from
    the context up to the previous tick's odometry and command (the encoder publishes it right
    after that command; it arrives well before the next odometry)."""

    def __init__(self, bundle: Bundle) -> None:
        self.estimator = LatentEstimator()
        self.use(bundle)

    def use(self, bundle: Bundle) -> None:
        """Encode with ``bundle``'s model from now on (none: no latent)."""
        self.estimator.set_model(bundle.model)

    def latent(self, now_ns: int, state: np.ndarray, stamp_ns: int) -> np.ndarray | None:
        """The estimator's newest latent (None without a model or until its context is
        full)."""
        return self.estimator.latent()

    def after_command(self, stamp_ns: int, state: np.ndarray, action: np.ndarray) -> None:
        """Into the estimator's context."""
        self.estimator.add_odometry(stamp_ns, state)
        self.estimator.add_command(stamp_ns, np.asarray(action, dtype=float))


TickHook = Callable[[TickRecord, int], None]  # (the tick's record, its odometry stamp)


class RuntimeLoop:
    """The nodes' timing, at 1 ms resolution (see the module docstring); with a ``latent``
    provider the policy reads its latent (:mod:`vnd_flight.runtime_flight` flies whole
    scenarios so with the encoder). :meth:`advance` flies on to a scenario time and may be
    called again; :meth:`use` swaps the bundle between ticks, as the policy node does."""

    min_tick_interval_ns = 18 * NS_PER_MS
    tick_margin_ns = 6 * NS_PER_MS
    transport_ns = 1 * NS_PER_MS

    def __init__(
        self,
        sim: SimulatedVehicle,
        pose_filter: PoseFilter,
        controller: PolicyController,
        bundle: Bundle,
        flight: FaultFlight,
        vehicle: VehicleParams,
        latent: LatentProvider | None = None,
    ) -> None:
        self.sim, self.pose_filter, self.controller = sim, pose_filter, controller
        self.bundle, self.flight, self.vehicle = bundle, flight, vehicle
        self.latent = latent  # None: the policy flies on z = 0
        self.on_tick: TickHook | None = None  # called with every tick's record
        self.valid_latent_ticks = 0  # ticks that had a valid latent from the provider
        self.period_ns = round(flight.safety.period_s * NS_PER_S)
        self.odom_queue: list[tuple[int, np.ndarray, int]] = []  # (arrival, state, stamp)
        self.command_queue: list[tuple[int, np.ndarray]] = []  # (arrival, action)
        self.odom: tuple[np.ndarray, int] | None = None
        self.ticked_stamp_ns: int | None = None
        self.watchdog_due_ns: int | None = None
        self.tick_times_ns: list[int] = []
        self.samples: list[tuple[float, np.ndarray, int, bool, bool]] = []
        self.mode_log: list[tuple[int, Mode]] = []
        self.fault_origin: tuple[np.ndarray, float] | None = None  # (truth, yaw) at the fault
        self.fault_ns = 0  # stamp of the first faulty sample
        self.now_ns = 0  # the loop's clock
        self.fault_s = math.inf  # scenario time the fault strikes
        self._fault: Callable | None = None

    @classmethod
    def on_scenario(
        cls,
        vehicle: VehicleParams,
        bundle: Bundle,
        scenario: Scenario,
        flight: FaultFlight,
        latent: LatentProvider | None = None,
        *,
        simulation: SimulationConfig | None = None,
        plant_config: PlantConfig | None = None,
    ) -> RuntimeLoop:
        """The loop of ``bundle`` on ``scenario``: the simulated vehicle (seeded by
        ``flight``, paced by ``simulation``, its plant ``plant_config``), a fresh pose filter
        and the policy node's controller with ``flight.safety``."""
        return cls(
            SimulatedVehicle(
                vehicle, scenario, simulation or SimulationConfig(), plant_config, flight.seed
            ),
            PoseFilter(rate_time_constant_s=vehicle.body_rate_time_constant_s),
            PolicyController.create(vehicle, flight.safety, scenario.reference),
            bundle,
            flight,
            vehicle,
            latent=latent,
        )

    def use(self, bundle: Bundle) -> None:
        """Fly ``bundle`` from the next tick on (the node's swap between ticks)."""
        self.bundle = bundle

    def run(self, fault_s: float, end_s: float) -> None:
        """Fly until ``end_s`` of scenario time, the fault from ``fault_s``."""
        self.fault_s = fault_s
        self.advance(end_s)

    def advance(self, end_s: float) -> None:
        """Fly on until ``end_s`` of scenario time (the fault, if any, from ``fault_s``)."""
        give_up_ns = self.now_ns + round((end_s - self.sim.time_s + 30.0) * NS_PER_S)
        while not (self.sim.started and self.sim.time_s >= end_s - 1e-9):
            self.now_ns += NS_PER_MS
            now_ns = self.now_ns
            if now_ns > give_up_ns:  # the scenario never started: no command
                raise RuntimeError(
                    f"flight stalled: scenario time {self.sim.time_s:.1f} s of {end_s:.1f} s "
                    f"after {now_ns / NS_PER_S:.0f} s (the stack never sent a flying command?)"
                )
            if now_ns % (2 * NS_PER_MS) == 0:
                for sample in self.sim.advance_to(now_ns):
                    self._on_sample(sample)
                if self.sim.time_s >= end_s - 1e-9 and self.sim.started:
                    return
            self._deliver(now_ns)
            if self.watchdog_due_ns is not None and now_ns >= self.watchdog_due_ns:
                self._tick(now_ns, fresh=False)

    def _on_sample(self, sample: SimSample) -> None:
        if self._fault is None and self.sim.started and sample.time_s >= self.fault_s:
            self._fault = OdometryFault(self.flight.fault, sample.stamp_ns)
            self.fault_origin = (sample.truth, yaw_of(sample.truth[QUAT]))
            self.fault_ns = sample.stamp_ns
            if self.flight.swap_at_fault:
                self.bundle = replace(self.bundle, version=self.bundle.version + 1)
        self._on_pose(sample, self._fault)
        self.samples.append(
            (
                sample.time_s,
                sample.truth,
                int(self.controller.mode),
                sample.crashed,
                bool(self.sim.plant.on_floor[0]),
            )
        )

    def _on_pose(self, sample: SimSample, fault: Callable | None) -> None:
        estimate = self.pose_filter.update(
            sample.stamp_ns, sample.measured[POS], sample.measured[QUAT]
        )
        if estimate is None:
            return
        state, stamp = estimate.as_state(), estimate.stamp_ns
        if fault is not None:
            faulty = fault(state, stamp)
            if faulty is None:
                return
            state, stamp = faulty
        self.odom_queue.append((stamp + self.transport_ns, state, stamp))

    def _deliver(self, now_ns: int) -> None:
        while self.command_queue and self.command_queue[0][0] <= now_ns:
            _, action = self.command_queue.pop(0)
            self.sim.command(action, now_ns)
        while self.odom_queue and self.odom_queue[0][0] <= now_ns:
            _, state, stamp = self.odom_queue.pop(0)
            if not np.isfinite(state).all():  # the node drops it (counted)
                continue
            if self.odom is not None and stamp <= self.odom[1]:  # out of order: dropped
                continue
            self.odom = (state, stamp)
            last = self.ticked_stamp_ns
            if last is None or stamp - last >= self.min_tick_interval_ns:
                self._tick(now_ns, fresh=True)

    def _tick(self, now_ns: int, fresh: bool) -> None:
        if fresh or self.watchdog_due_ns is None:
            self.watchdog_due_ns = now_ns + self.period_ns + self.tick_margin_ns
        else:
            self.watchdog_due_ns = max(self.watchdog_due_ns + self.period_ns, now_ns + 1)
        assert self.odom is not None  # the first tick follows the first odometry
        state, stamp = self.odom
        self.ticked_stamp_ns = stamp
        sample = self._latent(now_ns, state, stamp)
        record = self.controller.tick(now_ns, state, stamp, self.bundle, sample)
        self.controller.after_publish()
        self.tick_times_ns.append(now_ns)
        self.mode_log.append((now_ns, record.mode))
        action = record.action
        if self.flight.response == "level_hover" and self.fault_origin is not None:
            action = _level_hover(
                self.vehicle, self.sim.plant.state[0].double().numpy(), self.fault_origin[1]
            )
        self.pose_filter.set_rate_command(stamp, action[1:])
        if self.latent is not None:
            self.latent.after_command(stamp, state, action)
        if self.on_tick is not None:
            self.on_tick(record, stamp)
        if record.mode in (Mode.IDLE, Mode.DISARMED) and not self.sim.started:
            return  # the simulated vehicle starts on the first flying command (as its node)
        self.command_queue.append((now_ns + self.transport_ns, np.asarray(action, dtype=float)))

    def _latent(self, now_ns: int, state: np.ndarray, stamp_ns: int) -> LatentSample | None:
        """The provider's latent as the policy node holds it at a tick."""
        if self.latent is None:
            return None
        z = self.latent.latent(now_ns, state, stamp_ns)
        if z is None:
            return None
        self.valid_latent_ticks += 1
        return LatentSample(
            received_ns=now_ns,
            encoder_version=self.bundle.version,
            valid=True,
            z=np.asarray(z, dtype=np.float32),
        )

    def tracking_error(self, reference: ReferenceSpec) -> tuple[np.ndarray, np.ndarray]:
        """Scenario time (N,) of every motion-capture sample and the true position's distance
        (N,) in m from ``reference`` at that time."""
        trace = self.trace()
        time_s = trace["t_s"]
        reference_m = reference_numpy(reference, time_s)[0]
        return time_s, np.linalg.norm(trace["truth"][:, POS] - reference_m, axis=1)

    def trace(self) -> dict[str, np.ndarray]:
        """Scenario time (N,), truth (N, 13), mode (N,), crashed (N,), on_floor (N,)."""
        return {
            "t_s": np.array([s[0] for s in self.samples]),
            "truth": np.array([s[1] for s in self.samples]),
            "mode": np.array([s[2] for s in self.samples]),
            "crashed": np.array([s[3] for s in self.samples]),
            "on_floor": np.array([s[4] for s in self.samples]),
        }

    def outcome(self, fault_s: float) -> FaultOutcome:
        """Judge the flight after the fault from the ground truth."""
        trace = self.trace()
        after = trace["t_s"] >= fault_s
        truth = trace["truth"][after]
        t_s = trace["t_s"][after] - fault_s
        tilts = np.degrees([tilt_rad(q) for q in truth[:, QUAT]])
        level = np.nonzero(tilts < LEVEL_DEG)[0]
        origin = self.fault_origin[0] if self.fault_origin is not None else truth[0]
        horizontal = np.linalg.norm(truth[:, :2] - origin[:2], axis=1)
        final = truth[-1]
        landed = bool(trace["on_floor"][-1])
        c = self.flight.safety
        inside = bool(
            np.all(final[POS] >= np.array(c.geofence_min_m))
            and np.all(final[POS] <= np.array(c.geofence_max_m))
        )
        speed = float(np.linalg.norm(final[VEL]))
        fault_ns = self.fault_ns
        ticks = np.array([t for t in self.tick_times_ns if t >= fault_ns])
        gaps = np.diff(ticks) if ticks.size > 1 else np.zeros(0)
        modes = [m for t, m in self.mode_log if t >= fault_ns]
        flown = tuple(
            Mode(m).name.lower() for i, m in enumerate(modes) if i == 0 or m != modes[i - 1]
        )
        return FaultOutcome(
            crashed=bool(trace["crashed"].any()),
            landed=landed,
            holding=not landed and speed < 0.3 and inside and final[2] > c.floor_z_m,
            inside_geofence=inside,
            time_to_level_s=float(t_s[level[0]]) if level.size else math.inf,
            max_tilt_after_0_5_s_deg=float(tilts[t_s >= 0.5].max()) if np.any(t_s >= 0.5) else 0.0,
            excursion_m=float(horizontal.max()),
            landing_error_m=float(horizontal[-1]) if landed else math.nan,
            ticks_lost=int(np.sum(gaps > 1.5 * self.period_ns)),
            final_mode=self.controller.mode.name.lower(),
            modes=flown,
        )
