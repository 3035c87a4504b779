"""Safety filter between the policy and the command output, run once per 50 Hz control tick.

Per tick it checks the odometry (watchdog, non-finite values), the policy action (missing,
non-finite) and the geofence, runs the mode machine, picks the command (policy or model-based
fallback), clamps it to the vehicle limits and limits its change per tick.

Modes (same numbers as ``vnd_msgs/CtbrCommand.MODE_*``)::

    IDLE --fresh odom + valid action--> POLICY --any fault--> FALLBACK_HOLD
    FALLBACK_HOLD --faults clear for recovery_s--> POLICY
    FALLBACK_HOLD --hold_timeout_s since entering hold--> FALLBACK_LAND
    FALLBACK_LAND --resting on the floor for touchdown_time_s--> DISARMED (thrust 0)
    any --disarm()--> DISARMED --rearm()--> IDLE
    (operator arm / disarm requests: ``vnd_core.flight.arming``)

Landing is final: faults clearing during FALLBACK_LAND do not hand control back to the
policy (an operator re-arms). IDLE and DISARMED output zero thrust and zero rates.

Flying blind (odometry missing, stale or non-finite while in a fallback mode): the filter
dead-reckons the state from the last good estimate under its own commands and flies the
fallback controller on that prediction with a zero horizontal-velocity, slow-descent set point
(``blind_descent_mps``): level attitude, thrust a little below hover, heading kept. There is no
position hold without position. In FALLBACK_LAND it disarms ``blind_land_margin_s`` after the
predicted height reaches the floor. When odometry comes back, the normal hold or landing
resumes from the measured state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from vnd_core.flight.fallback import (
    DeadReckoner,
    FallbackConfig,
    FallbackController,
    LandingPlanner,
    Setpoint,
    yaw_of,
)
from vnd_core.flight.stats import NS_PER_S, ReasonCounter
from vnd_core.state import ACTION_DIM, POS, QUAT, STATE_DIM, VEL
from vnd_core.vehicle import VehicleParams

Vec3 = tuple[float, float, float]


class Mode(enum.IntEnum):
    """Controller mode; values equal ``vnd_msgs/CtbrCommand.MODE_*``."""

    IDLE = 0
    POLICY = 1
    FALLBACK_HOLD = 2
    FALLBACK_LAND = 3
    DISARMED = 4


# Fault reasons: each switches POLICY to fallback and is counted per tick it is present.
FAULT_ODOM_MISSING = "odom_missing"
FAULT_ODOM_STALE = "odom_stale"
FAULT_ODOM_NON_FINITE = "odom_non_finite"
FAULT_ACTION_MISSING = "action_missing"
FAULT_ACTION_NON_FINITE = "action_non_finite"
FAULT_GEOFENCE = "geofence"
# Limits applied to the command (not faults), also counted and reported.
LIMIT_THRUST = "thrust_clamped"
LIMIT_RATE = "rate_clamped"
LIMIT_SLEW = "slew_limited"
# Events.
EVENT_TOUCHDOWN = "touchdown"
EVENT_BLIND_DISARM = "blind_disarm"

_ODOM_FAULTS = frozenset({FAULT_ODOM_MISSING, FAULT_ODOM_STALE, FAULT_ODOM_NON_FINITE})


@dataclass(frozen=True)
class SafetyConfig:
    """Thresholds and limits of :class:`SafetyFilter`."""

    period_s: float = 0.02  # control tick period
    odom_timeout_s: float = 0.1  # odometry older than this is stale
    max_thrust_step_n: float = 4.0  # slew limit: largest change of thrust per tick
    max_rate_step_radps: float = 3.0  # slew limit: largest change of each body rate per tick
    geofence_min_m: Vec3 = (-3.0, -3.0, -0.2)  # lower corner of the allowed box, ENU world
    geofence_max_m: Vec3 = (3.0, 3.0, 3.0)  # upper corner of the allowed box
    geofence_margin_m: float = 0.3  # a geofence hold point lies this far inside the box
    hold_timeout_s: float = 5.0  # FALLBACK_HOLD this long without recovery -> FALLBACK_LAND
    recovery_s: float = 0.5  # faults must stay clear this long before POLICY resumes
    floor_z_m: float = 0.0  # height of the landing surface
    touchdown_height_m: float = 0.05  # landed when at most this far above the floor ...
    touchdown_speed_mps: float = 0.1  # ... moving slower than this ...
    touchdown_time_s: float = 0.5  # ... for this long
    blind_descent_mps: float = 0.3  # descent speed flown on dead reckoning without odometry
    blind_land_margin_s: float = 3.0  # blind landing disarms this long after predicted floor
    fallback: FallbackConfig = field(default_factory=FallbackConfig)  # fallback gains

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name in (
            "period_s",
            "odom_timeout_s",
            "max_thrust_step_n",
            "max_rate_step_radps",
            "hold_timeout_s",
            "touchdown_height_m",
            "touchdown_speed_mps",
            "blind_descent_mps",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("geofence_margin_m", "recovery_s", "touchdown_time_s", "blind_land_margin_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        inner = np.subtract(self.geofence_max_m, self.geofence_min_m) - 2 * self.geofence_margin_m
        if np.any(inner <= 0):
            raise ValueError(
                "geofence_max_m - geofence_min_m must exceed 2 * geofence_margin_m on every "
                f"axis, got {self.geofence_min_m} .. {self.geofence_max_m}"
            )
        self.fallback.validate()


@dataclass(frozen=True)
class SafetyOutput:
    """What the filter sends this tick."""

    action: np.ndarray  # (4,) thrust N, body rates rad/s FLU; within limits, finite
    mode: Mode  # controller mode that produced it
    reasons: tuple[str, ...]  # faults present and limits applied this tick (empty = clean)


def not_resting_reason(state: np.ndarray, config: SafetyConfig) -> str | None:
    """Why ``state`` (13,) is not resting on the floor, or None when it is: at most
    ``touchdown_height_m`` above ``floor_z_m`` and slower than ``touchdown_speed_mps``
    vertically (the touchdown test of a landing, also the arming test)."""
    if state[2] > config.floor_z_m + config.touchdown_height_m:
        return (
            f"{state[2] - config.floor_z_m:.2f} m above the floor "
            f"(touchdown height {config.touchdown_height_m:.2f} m)"
        )
    climb_mps = abs(state[VEL][2])
    if climb_mps >= config.touchdown_speed_mps:
        return (
            f"vertical speed {climb_mps:.2f} m/s "
            f"(touchdown speed {config.touchdown_speed_mps:.2f} m/s)"
        )
    return None


class SafetyFilter:
    """Per-tick guard between the policy and the command output (see module docstring).

    Keeps the previous output itself (for the slew limit) and the last good odometry (for the
    watchdog and dead reckoning). ``counters`` counts every fault and limit per tick.
    """

    def __init__(self, vehicle: VehicleParams, config: SafetyConfig | None = None) -> None:
        self.vehicle = vehicle
        self.config = config or SafetyConfig()
        self.config.validate()
        c = self.config
        self.controller = FallbackController(vehicle, c.fallback)
        self.counters = ReasonCounter()
        self._planner = LandingPlanner(c.fallback, c.floor_z_m)
        self._reckoner = DeadReckoner(vehicle)
        self._fence_min = np.array(c.geofence_min_m, dtype=float)
        self._fence_max = np.array(c.geofence_max_m, dtype=float)
        self._fence = tuple(zip(c.geofence_min_m, c.geofence_max_m, strict=True))  # per axis
        self._timeout_ns = round(c.odom_timeout_s * NS_PER_S)
        # Per-component (low, high) command bounds and slew steps, as floats: the per-tick
        # limiting runs in scalar arithmetic (see _limit).
        rate_max = [float(r) for r in vehicle.body_rate_max_radps]
        self._bounds = ((vehicle.thrust_min_n, vehicle.thrust_max_n), *((-r, r) for r in rate_max))
        self._steps = (c.max_thrust_step_n, *([c.max_rate_step_radps] * 3))
        self._hover_action = (vehicle.hover_thrust_n, 0.0, 0.0, 0.0)
        self._reset_state(Mode.IDLE)

    def _reset_state(self, mode: Mode) -> None:
        self.mode = mode
        self.last_output = np.zeros(ACTION_DIM)
        self.hold_setpoint: Setpoint | None = None  # where FALLBACK_HOLD flies
        self._odom_state: np.ndarray | None = None  # last finite odometry state (13,)
        self._odom_stamp_ns: int | None = None  # its stamp
        self._seen_stamp_ns: int | None = None  # stamp of the last odometry looked at
        self._last_tick_ns: int | None = None
        self._mode_since_ns = 0  # when the current mode was entered
        self._clear_since_ns: int | None = None  # start of the current fault-free stretch
        self._landed_since_ns: int | None = None  # start of resting on the floor
        self._planner_started = False
        self._blind_yaw_rad = 0.0
        self._blind_floor_since_ns: int | None = None

    # ------------------------------------------------------------------ public API

    def step(
        self,
        now_ns: int,
        odom_state: np.ndarray | None,
        odom_stamp_ns: int | None,
        action: np.ndarray | None,
    ) -> SafetyOutput:
        """One control tick at time ``now_ns`` (the clock of the odometry stamps, e.g. ROS
        time). ``odom_state`` (13,) / ``odom_stamp_ns``: the latest odometry, passed every tick
        (None before any; a repeated stamp is recognised as nothing new); ``action`` (4,): the
        policy's output this tick (None when it failed or there is no policy)."""
        dt_s = self._tick_dt_s(now_ns)
        faults = self._ingest_odom(now_ns, odom_state, odom_stamp_ns)
        faults += self._check_action(action)
        odom_good = not any(f in _ODOM_FAULTS for f in faults)
        if odom_good and self._outside_fence(self._odom_state[POS]):
            faults.append(FAULT_GEOFENCE)
        self._advance_mode(now_ns, faults, odom_good)
        raw = self._command(now_ns, dt_s, odom_good, action)
        if raw is None:  # IDLE or DISARMED: motors off, no slew limit on cutting thrust
            out, limits = np.zeros(ACTION_DIM), []
        else:
            out, limits = self._limit(np.asarray(raw, dtype=float))
        for reason in (*faults, *limits):
            self.counters.count(reason)
        self.last_output = out
        return SafetyOutput(action=out.copy(), mode=self.mode, reasons=(*faults, *limits))

    def stateful_parts(self) -> list[object]:
        """This filter and the objects whose attributes change as it steps (for
        :class:`vnd_core.flight.rehearsal.StateSnapshot`; the fallback controller keeps none)."""
        return [self, self.counters, self._planner, self._reckoner]

    def disarm(self, now_ns: int) -> None:
        """Operator kill: cut thrust from the next tick on, until :meth:`rearm`."""
        self._switch(Mode.DISARMED, now_ns)

    def rearm(self) -> None:
        """Leave DISARMED (or anything) for IDLE; the policy takes over once all is well."""
        counters = self.counters
        self._reset_state(Mode.IDLE)
        self.counters = counters

    # ------------------------------------------------------------------ checks

    def _tick_dt_s(self, now_ns: int) -> float:
        """Time since the previous tick, bounded to [0.5, 5] periods against clock jumps."""
        last, self._last_tick_ns = self._last_tick_ns, now_ns
        period = self.config.period_s
        if last is None:
            return period
        return min(max((now_ns - last) / NS_PER_S, 0.5 * period), 5.0 * period)

    def _ingest_odom(
        self, now_ns: int, state: np.ndarray | None, stamp_ns: int | None
    ) -> list[str]:
        """Take a new odometry sample if finite; return the odometry faults of this tick."""
        if state is not None and stamp_ns is not None and stamp_ns != self._seen_stamp_ns:
            self._seen_stamp_ns = stamp_ns
            state = np.asarray(state, dtype=float).reshape(STATE_DIM)
            if not np.isfinite(state).all():
                return [FAULT_ODOM_NON_FINITE]
            self._odom_state, self._odom_stamp_ns = state.copy(), stamp_ns
        if self._odom_stamp_ns is None:
            return [FAULT_ODOM_MISSING]
        if now_ns - self._odom_stamp_ns > self._timeout_ns:
            return [FAULT_ODOM_STALE]
        return []

    @staticmethod
    def _check_action(action: np.ndarray | None) -> list[str]:
        if action is None:
            return [FAULT_ACTION_MISSING]
        action = np.asarray(action, dtype=float)
        if action.shape != (ACTION_DIM,) or not np.isfinite(action).all():
            return [FAULT_ACTION_NON_FINITE]
        return []

    def _outside_fence(self, position_m: np.ndarray) -> bool:
        axes = zip(position_m.tolist(), self._fence, strict=True)
        return any(p < lo or p > hi for p, (lo, hi) in axes)

    # ------------------------------------------------------------------ mode machine

    def _advance_mode(self, now_ns: int, faults: list[str], odom_good: bool) -> None:
        if self.mode == Mode.IDLE:
            if not faults:
                self._switch(Mode.POLICY, now_ns)
        elif self.mode == Mode.POLICY:
            if faults:
                self._enter_hold(now_ns, odom_good)
        elif self.mode == Mode.FALLBACK_HOLD:
            self._advance_hold(now_ns, faults)
        elif self.mode == Mode.FALLBACK_LAND and odom_good and self._touched_down(now_ns):
            self.counters.count(EVENT_TOUCHDOWN)
            self._switch(Mode.DISARMED, now_ns)

    def _advance_hold(self, now_ns: int, faults: list[str]) -> None:
        if faults:
            self._clear_since_ns = None
        elif self._clear_since_ns is None:
            self._clear_since_ns = now_ns
        recovery_ns = self.config.recovery_s * NS_PER_S
        if self._clear_since_ns is not None and now_ns - self._clear_since_ns >= recovery_ns:
            self._switch(Mode.POLICY, now_ns)
        elif now_ns - self._mode_since_ns >= self.config.hold_timeout_s * NS_PER_S:
            self._switch(Mode.FALLBACK_LAND, now_ns)
            self._planner_started = False

    def _enter_hold(self, now_ns: int, odom_good: bool) -> None:
        """Hold where the vehicle is (moved inside the geofence); remember the heading."""
        self._switch(Mode.FALLBACK_HOLD, now_ns)
        self._clear_since_ns = None
        if self._odom_state is not None:
            position = self._odom_state[POS]
            self._blind_yaw_rad = yaw_of(self._odom_state[QUAT])
            margin = self.config.geofence_margin_m
            inside = np.clip(position, self._fence_min + margin, self._fence_max - margin)
            self.hold_setpoint = Setpoint.hold(inside, self._blind_yaw_rad)
        if not odom_good and self._odom_state is not None:
            self._reckoner.reset(self._odom_state)

    def _switch(self, mode: Mode, now_ns: int) -> None:
        if mode != self.mode:
            self.counters.count(f"mode_{self.mode.name.lower()}_to_{mode.name.lower()}")
        self.mode = mode
        self._mode_since_ns = now_ns
        self._landed_since_ns = None
        self._blind_floor_since_ns = None

    def _touched_down(self, now_ns: int) -> bool:
        """True once resting on the floor for ``touchdown_time_s``."""
        if not_resting_reason(self._odom_state, self.config) is not None:
            self._landed_since_ns = None
            return False
        if self._landed_since_ns is None:
            self._landed_since_ns = now_ns
        return now_ns - self._landed_since_ns >= self.config.touchdown_time_s * NS_PER_S

    # ------------------------------------------------------------------ commands

    def _command(
        self, now_ns: int, dt_s: float, odom_good: bool, action: np.ndarray | None
    ) -> np.ndarray | None:
        """Unlimited command of the current mode; None when the motors are to be off."""
        if self.mode == Mode.POLICY:
            return action
        if self.mode in (Mode.FALLBACK_HOLD, Mode.FALLBACK_LAND):
            raw = self._fallback(now_ns, dt_s, odom_good)
            if self.mode != Mode.DISARMED:  # a blind landing may have just disarmed
                return raw
        return None

    def _fallback(self, now_ns: int, dt_s: float, odom_good: bool) -> np.ndarray:
        """Fallback command of the current mode, on odometry or blind."""
        if not odom_good:
            return self._blind(now_ns, dt_s)
        state = self._odom_state
        self._reckoner.reset(state)  # where blind flight would start from
        if self.mode == Mode.FALLBACK_HOLD:
            return self.controller.command(state, self.hold_setpoint)
        if not self._planner_started:
            self._planner.start(state[POS], yaw_of(state[QUAT]))
            self._planner_started = True
        return self.controller.command(state, self._planner.step(dt_s))

    def _blind(self, now_ns: int, dt_s: float) -> np.ndarray:
        """Level, no horizontal speed, slow descent, on the dead-reckoned state."""
        self._planner_started = False  # a landing resumes from the measured state later
        if self._odom_state is None:  # never had odometry: nothing to fly on
            return np.zeros(ACTION_DIM)
        predicted = self._reckoner.step(self.last_output, dt_s)
        descend = np.array([0.0, 0.0, -self.config.blind_descent_mps])
        setpoint = Setpoint(predicted[POS], descend, self._blind_yaw_rad)
        if self.mode == Mode.FALLBACK_LAND and predicted[2] <= self.config.floor_z_m:
            if self._blind_floor_since_ns is None:
                self._blind_floor_since_ns = now_ns
            if now_ns - self._blind_floor_since_ns >= self.config.blind_land_margin_s * NS_PER_S:
                self.counters.count(EVENT_BLIND_DISARM)
                self._switch(Mode.DISARMED, now_ns)
                return np.zeros(ACTION_DIM)
        return self.controller.command(predicted, setpoint)

    def _limit(self, target: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Clamp ``target`` (4,) to the vehicle limits, then slew-limit it from the previous
        output. Both boxes are convex and the previous output lies in the first, so the
        result satisfies both.

        Scalar arithmetic on four floats: numpy's per-call dispatch cost more than the
        limiting itself, most of all on a tick whose code has left the CPU caches
        (``vnd_core.flight.rehearsal``).
        """
        limits = []
        wanted = target.tolist()
        clamped = [min(max(x, lo), hi) for x, (lo, hi) in zip(wanted, self._bounds, strict=True)]
        if clamped[0] != wanted[0]:
            limits.append(LIMIT_THRUST)
        if clamped[1:] != wanted[1:]:
            limits.append(LIMIT_RATE)
        # Taking over from motors-off (IDLE / DISARMED) starts the slew from hover, as when
        # offboard control is handed over in flight; ramping from zero thrust would drop it.
        last = self.last_output.tolist()
        base = self._hover_action if not any(last) else last
        # Only the components past the step change: ``base + (out - base)`` is not ``out`` for
        # about 12 % of the policy's (float64) rates, and comparing it with ``out`` counted
        # 57 % of a demo's ticks as slew-limited when none came near the limit.
        out, slewed = [], False
        for x, b, step in zip(clamped, base, self._steps, strict=True):
            if abs(x - b) > step:
                x, slewed = b + min(max(x - b, -step), step), True
            out.append(x)
        if slewed:
            limits.append(LIMIT_SLEW)
        return np.array(out), limits
