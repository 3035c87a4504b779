"""Safety filter between the policy and the command output, run once per 50 Hz control tick.

Per tick it checks the odometry (watchdog, non-finite values, jumps, a frozen source), the
policy (missing or non-finite action, the envelope of ``vnd_flight.envelope``: tilt,
body rates, tracking error, geofence with the stopping distance), runs the mode machine, picks
the command (policy or model-based fallback), clamps it to the vehicle limits and limits its
change per tick.

Modes (same numbers as ``vnd_msgs/CtbrCommand.MODE_*``)::

    IDLE --fresh odom + valid action--> POLICY --any fault--> FALLBACK_HOLD
    FALLBACK_HOLD --faults clear for recovery_s--> POLICY   (not while the policy is suspended)
    FALLBACK_HOLD --hold_timeout_s since entering hold--> FALLBACK_LAND
    FALLBACK_LAND --resting on the floor for touchdown_time_s--> DISARMED (thrust 0)
    any flying mode --over-tilted for crash_time_s--> DISARMED (crash detected)
    any --disarm()--> DISARMED --rearm()--> IDLE
    (operator arm / disarm requests: ``vnd_flight.arming``)

An envelope fault (the policy itself misbehaving) suspends the policy: the filter stays in the
fallback until :meth:`SafetyFilter.resume_policy` (a different bundle became active) or a
re-arm, so a bad network cannot fly, fall back, recover and misbehave again in a loop. Landing
is final: faults clearing during FALLBACK_LAND do not hand control back to the policy (an
operator re-arms). IDLE and DISARMED output zero thrust and zero rates. Every mode change is
kept with its reason (:meth:`SafetyFilter.pop_mode_changes`) for the node to log.

Flying blind (odometry missing, stale, non-finite, jumping or frozen while in a fallback
mode): :class:`vnd_flight.blind.BlindEstimator` predicts the state from the last good
odometry through every command sent since, with the disturbance learnt while odometry was
good. On that prediction the fallback first levels the vehicle and brakes it (tilt within
``blind_max_tilt_rad``, rates within ``blind_max_rate_radps``, the disturbance cancelled)
while holding height for ``blind_level_s``, then descends at ``blind_descent_mps``. There is no
position hold without position. It disarms ``blind_land_margin_s`` after the predicted height
reaches the floor, in hold as in landing (blind, holding is descending). When odometry comes
back, the normal hold or landing resumes from the measured state. While the policy still flies
and odometry is merely late, the policy itself flies on the same prediction
(:meth:`SafetyFilter.predicted_state`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from vnd_core.counters import ReasonCounter
from vnd_core.state import ACTION_DIM, POS, QUAT, STATE_DIM, VEL
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams
from vnd_core.wire import Mode

from vnd_flight.blind import BlindEstimator
from vnd_flight.envelope import (
    ENVELOPE_FAULTS,
    FAULT_ODOM_FROZEN,
    FAULT_ODOM_JUMP,
    CrashDetector,
    OdometryGuard,
    PolicyEnvelope,
    Verdict,
)
from vnd_flight.envelope import (
    FAULT_GEOFENCE as FAULT_GEOFENCE,  # re-exported: one of the filter's faults
)
from vnd_flight.fallback import (
    FallbackController,
    LandingPlanner,
    Setpoint,
    yaw_of,
)
from vnd_flight.safety_config import ModeChange, SafetyConfig, SafetyOutput, not_resting_reason

# Fault reasons: each switches POLICY to fallback and is counted per tick it is present.
FAULT_ODOM_MISSING = "odom_missing"
FAULT_ODOM_STALE = "odom_stale"
FAULT_ODOM_NON_FINITE = "odom_non_finite"
FAULT_ACTION_MISSING = "action_missing"
FAULT_ACTION_NON_FINITE = "action_non_finite"
POLICY_SUSPENDED = "policy_suspended"  # the policy misbehaved: fallback until a new bundle
# Limits applied to the command (not faults), also counted and reported.
LIMIT_THRUST = "thrust_clamped"
LIMIT_RATE = "rate_clamped"
LIMIT_SLEW = "slew_limited"
# Events.
EVENT_TOUCHDOWN = "touchdown"
EVENT_BLIND_DISARM = "blind_disarm"
EVENT_CRASH = "crash_detected"

# Faults after which the filter cannot fly on the measured state: it flies blind.
_ODOM_FAULTS = frozenset({FAULT_ODOM_MISSING, FAULT_ODOM_STALE})
# Faults of one odometry sample; the last good sample may still be fresh enough to fly on.
_SAMPLE_FAULTS = frozenset({FAULT_ODOM_NON_FINITE, FAULT_ODOM_JUMP, FAULT_ODOM_FROZEN})


class SafetyFilter:
    """Per-tick guard between the policy and the command output (see module docstring).

    Keeps the previous output itself (for the slew limit), the last good odometry (for the
    watchdog), and every command sent (for dead reckoning). ``counters`` counts every fault
    and limit per tick.
    """

    def __init__(self, vehicle: VehicleParams, config: SafetyConfig | None = None) -> None:
        self.vehicle = vehicle
        self.config = config or SafetyConfig()
        self.config.validate()
        c = self.config
        self.controller = FallbackController(vehicle, c.fallback)
        blind_gains = dataclasses.replace(c.fallback, max_tilt_rad=c.blind_max_tilt_rad)
        self.blind_controller = FallbackController(vehicle, blind_gains)
        self.counters = ReasonCounter()
        self._planner = LandingPlanner(c.fallback, c.floor_z_m)
        self.blind = BlindEstimator(vehicle, c.dead_reckoning)
        self._guard = OdometryGuard(c.envelope)
        self._envelope = PolicyEnvelope(c.envelope, c.geofence_min_m, c.geofence_max_m)
        self._crash = CrashDetector(c.envelope)
        self._fence_min = np.array(c.geofence_min_m, dtype=float)
        self._fence_max = np.array(c.geofence_max_m, dtype=float)
        self._timeout_ns = round(c.odom_timeout_s * NS_PER_S)
        # Per-component (low, high) command bounds and slew steps, as floats: the per-tick
        # limiting runs in scalar arithmetic (see _limit).
        rate_max = [float(r) for r in vehicle.body_rate_max_radps]
        self._bounds = ((vehicle.thrust_min_n, vehicle.thrust_max_n), *((-r, r) for r in rate_max))
        self._steps = (c.max_thrust_step_n, *([c.max_rate_step_radps] * 3))
        self._hover_action = (vehicle.hover_thrust_n, 0.0, 0.0, 0.0)
        self.mode_changes: list[ModeChange] = []
        self._reset_state(Mode.IDLE)

    def _reset_state(self, mode: Mode) -> None:
        self.mode = mode
        self.last_output = np.zeros(ACTION_DIM)
        self.hold_setpoint: Setpoint | None = None  # where FALLBACK_HOLD flies
        self.suspended: Verdict | None = None  # why the policy may not fly (None: it may)
        self._odom_state: np.ndarray | None = None  # last good odometry state (13,)
        self._odom_stamp_ns: int | None = None  # its stamp
        self._seen_stamp_ns: int | None = None  # stamp of the last odometry looked at
        self._last_tick_ns: int | None = None
        self._mode_since_ns = 0  # when the current mode was entered
        self._clear_since_ns: int | None = None  # start of the current fault-free stretch
        self._landed_since_ns: int | None = None  # start of resting on the floor
        self._planner_started = False
        self._blind_yaw_rad = 0.0
        self._blind_since_ns: int | None = None  # start of the current blind stretch
        self._blind_floor_since_ns: int | None = None
        self._details: dict[str, str] = {}  # this tick's fault details by reason
        self.blind.stop()
        self.blind.history.clear()
        self.blind.disturbance.reset()
        self._guard.reset()
        self._envelope.reset()
        self._crash.reset()

    # ------------------------------------------------------------------ public API

    def step(
        self,
        now_ns: int,
        odom_state: np.ndarray | None,
        odom_stamp_ns: int | None,
        action: np.ndarray | None,
        reference_m: np.ndarray | None = None,
    ) -> SafetyOutput:
        """One control tick at time ``now_ns`` (the clock of the odometry stamps, e.g. ROS
        time). ``odom_state`` (13,) / ``odom_stamp_ns``: the latest odometry, passed every tick
        (None before any; a repeated stamp is recognised as nothing new); ``action`` (4,): the
        policy's output this tick (None when it failed or there is no policy);
        ``reference_m`` (3,): where the policy is meant to be now (tracking check; None: no
        check)."""
        dt_s = self._tick_dt_s(now_ns)
        self._details = {}
        faults = self._ingest_odom(now_ns, odom_state, odom_stamp_ns)
        action_faults = self._check_action(action)
        faults += action_faults
        odom_good = not any(f in _ODOM_FAULTS for f in faults)
        if odom_good:
            faults += self._check_envelope(None if action_faults else action, reference_m)
        if self.suspended is not None:
            faults.append(POLICY_SUSPENDED)
        self._advance_mode(now_ns, faults, odom_good)
        raw = self._command(now_ns, dt_s, odom_good, action)
        if raw is None:  # IDLE or DISARMED: motors off, no slew limit on cutting thrust
            out, limits = np.zeros(ACTION_DIM), list[str]()
        else:
            out, limits = self._limit(np.asarray(raw, dtype=float))
        for reason in (*faults, *limits):
            self.counters.count(reason)
        self.last_output = out
        self.blind.record(now_ns, out)
        return SafetyOutput(action=out.copy(), mode=self.mode, reasons=(*faults, *limits))

    def stateful_parts(self) -> list[object]:
        """This filter and the objects whose attributes change as it steps (for
        :class:`vnd_flight.rehearsal.StateSnapshot`; the fallback controllers keep none)."""
        return [
            self,
            self.counters,
            self._planner,
            self.blind,
            self.blind.history,
            self.blind.disturbance,
            self._guard,
            self._envelope,
            self._crash,
        ]

    def predicted_state(self, now_ns: int) -> np.ndarray | None:
        """The dead-reckoned state (13,) at ``now_ns`` from the last good odometry through the
        commands sent since (None before any odometry). For a tick whose odometry is late: the
        policy flies on this instead of repeating its last input, so the commands it sends
        meanwhile stay closed-loop and the fallback, if it comes, starts from a sane state."""
        if self._odom_state is None:
            return None
        if not self.blind.started:
            self.blind.start(*self._good_odometry())
        return self.blind.predict(now_ns)

    def pop_mode_changes(self) -> list[ModeChange]:
        """The mode changes since the last call, oldest first."""
        changes, self.mode_changes = self.mode_changes, []
        return changes

    def disarm(self, now_ns: int, reason: str = "operator disarm") -> None:
        """Operator kill: cut thrust from the next tick on, until :meth:`rearm`."""
        self._switch(Mode.DISARMED, now_ns, reason)

    def rearm(self) -> None:
        """Leave DISARMED (or anything) for IDLE; the policy takes over once all is well."""
        counters, previous = self.counters, self.mode
        self._reset_state(Mode.IDLE)
        self.counters = counters
        if previous != Mode.IDLE:
            self.mode_changes.append(ModeChange(self._mode_since_ns, previous, Mode.IDLE, "armed"))

    def resume_policy(self) -> None:
        """Lift a suspension of the policy (a different bundle is flying now)."""
        self.suspended = None
        self._envelope.reset()

    def fault_detail(self, reason: str) -> str:
        """What was measured for fault ``reason`` on the last tick ('' when none)."""
        return self._details.get(reason, "")

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
        """Take a new odometry sample when it passes the checks; return this tick's odometry
        faults."""
        faults = []
        if state is not None and stamp_ns is not None and stamp_ns != self._seen_stamp_ns:
            self._seen_stamp_ns = stamp_ns
            state = np.asarray(state, dtype=float).reshape(STATE_DIM)
            verdict = self._judge_sample(state, stamp_ns)
            if verdict is None:
                self._odom_state, self._odom_stamp_ns = state.copy(), stamp_ns
                if self.mode in (Mode.IDLE, Mode.DISARMED):
                    # Motors off, the vehicle held by its stand or the floor: nothing to learn
                    # about the air (the weight alone would read as a lifting force).
                    self.blind.disturbance.reset()
                else:
                    self.blind.observe(stamp_ns, state)
            else:
                faults.append(self._fault(verdict))
        if self._odom_stamp_ns is None:
            return [*faults, FAULT_ODOM_MISSING]
        age_ns = now_ns - self._odom_stamp_ns
        if age_ns > self._timeout_ns:
            stale = Verdict(FAULT_ODOM_STALE, f"odometry {age_ns / 1e6:.0f} ms old")
            faults.append(self._fault(stale))
        return faults

    def _judge_sample(self, state: np.ndarray, stamp_ns: int) -> Verdict | None:
        if not np.isfinite(state).all():
            return Verdict(FAULT_ODOM_NON_FINITE, "odometry not finite")
        if self.mode in (Mode.IDLE, Mode.DISARMED):  # not flying: carried, placed, re-origined
            return None
        last = self._odom_state
        resting = last is not None and not_resting_reason(last, self.config) is None
        return self._guard.check(state, stamp_ns, last, self._odom_stamp_ns, resting)

    def _check_action(self, action: np.ndarray | None) -> list[str]:
        if action is None:
            return [FAULT_ACTION_MISSING]
        action = np.asarray(action, dtype=float)
        if action.shape != (ACTION_DIM,) or not np.isfinite(action).all():
            return [FAULT_ACTION_NON_FINITE]
        return []

    def _check_envelope(
        self, action: np.ndarray | None, reference_m: np.ndarray | None
    ) -> list[str]:
        """Geofence always; the policy envelope while the policy flies or is about to.
        ``action``: the policy's action, None when missing or malformed (already a fault)."""
        state, _ = self._good_odometry()
        faults = []
        fence = self._envelope.outside_fence(state)
        if fence is not None:
            faults.append(self._fault(fence))
        if self.mode in (Mode.IDLE, Mode.POLICY):
            tracked = reference_m if self.mode == Mode.POLICY else None  # not flying yet
            verdict = self._envelope.check(state, action, tracked)
            if verdict is not None:
                faults.append(self._fault(verdict))
                if self.mode == Mode.POLICY and verdict.reason in ENVELOPE_FAULTS:
                    self.suspended = verdict
        return faults

    def _fault(self, verdict: Verdict) -> str:
        self._details[verdict.reason] = verdict.detail
        return verdict.reason

    def _why(self, faults: list[str]) -> str:
        """The faults of this tick with their figures, for a mode change."""
        parts = []
        for reason in dict.fromkeys(faults):
            detail = self._details.get(reason)
            if reason == POLICY_SUSPENDED and self.suspended is not None:
                detail = f"after {self.suspended.reason}: {self.suspended.detail}"
            parts.append(f"{reason} ({detail})" if detail else reason)
        return ", ".join(parts)

    def _good_odometry(self) -> tuple[np.ndarray, int]:
        """The last good odometry: state (13,) and stamp [ns]. Called only once there is one
        (the odometry checks fault without it, and the fallback modes start from POLICY)."""
        if self._odom_state is None or self._odom_stamp_ns is None:
            raise RuntimeError("safety filter: no good odometry yet")
        return self._odom_state, self._odom_stamp_ns

    # ------------------------------------------------------------------ mode machine

    def _advance_mode(self, now_ns: int, faults: list[str], odom_good: bool) -> None:
        if self.mode not in (Mode.IDLE, Mode.DISARMED) and self._odom_state is not None:
            crash = self._crash.check(now_ns, self._odom_state) if odom_good else None
            if crash is not None:
                self.counters.count(EVENT_CRASH)
                self._switch(Mode.DISARMED, now_ns, f"{EVENT_CRASH} ({crash.detail})")
                return
        if self.mode == Mode.IDLE:
            if not faults:
                self._switch(Mode.POLICY, now_ns, "odometry fresh and the policy's action valid")
        elif self.mode == Mode.POLICY:
            if faults:
                self._enter_hold(now_ns, self._why(faults))
        elif self.mode == Mode.FALLBACK_HOLD:
            self._advance_hold(now_ns, faults)
        elif self.mode == Mode.FALLBACK_LAND and odom_good and self._touched_down(now_ns):
            self.counters.count(EVENT_TOUCHDOWN)
            self._switch(Mode.DISARMED, now_ns, EVENT_TOUCHDOWN)

    def _advance_hold(self, now_ns: int, faults: list[str]) -> None:
        if faults:
            self._clear_since_ns = None
        elif self._clear_since_ns is None:
            self._clear_since_ns = now_ns
        recovery_ns = self.config.recovery_s * NS_PER_S
        if self._clear_since_ns is not None and now_ns - self._clear_since_ns >= recovery_ns:
            self._switch(Mode.POLICY, now_ns, f"faults clear for {self.config.recovery_s:.1f} s")
        elif now_ns - self._mode_since_ns >= self.config.hold_timeout_s * NS_PER_S:
            why = f"hold timeout {self.config.hold_timeout_s:.1f} s"
            if faults:
                why += f" with {self._why(faults)}"
            self._switch(Mode.FALLBACK_LAND, now_ns, why)
            self._planner_started = False

    def _enter_hold(self, now_ns: int, reason: str) -> None:
        """Hold where the vehicle is (moved inside the geofence); remember the heading."""
        self._switch(Mode.FALLBACK_HOLD, now_ns, reason)
        self._clear_since_ns = None
        if self._odom_state is not None:
            position = self._odom_state[POS]
            self._blind_yaw_rad = yaw_of(self._odom_state[QUAT])
            margin = self.config.geofence_margin_m
            inside = np.clip(position, self._fence_min + margin, self._fence_max - margin)
            self.hold_setpoint = Setpoint.hold(inside, self._blind_yaw_rad)

    def _switch(self, mode: Mode, now_ns: int, reason: str) -> None:
        if mode != self.mode:
            self.counters.count(f"mode_{self.mode.name.lower()}_to_{mode.name.lower()}")
            self.mode_changes.append(ModeChange(now_ns, self.mode, mode, reason))
        self.mode = mode
        self._mode_since_ns = now_ns
        self._landed_since_ns = None
        self._blind_floor_since_ns = None

    def _touched_down(self, now_ns: int) -> bool:
        """True once resting on the floor for ``touchdown_time_s``."""
        if not_resting_reason(self._good_odometry()[0], self.config) is not None:
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
            return self._blind(now_ns)
        self.blind.stop()
        self._blind_since_ns = None
        state, _ = self._good_odometry()
        if self.mode == Mode.FALLBACK_HOLD:
            assert self.hold_setpoint is not None  # set on entering hold (from POLICY, on odometry)
            return self.controller.command(state, self.hold_setpoint)
        if not self._planner_started:
            self._planner.start(state[POS], yaw_of(state[QUAT]))
            self._planner_started = True
        return self.controller.command(state, self._planner.step(dt_s))

    def _blind(self, now_ns: int) -> np.ndarray:
        """Level and brake, then descend slowly, on the dead-reckoned state."""
        self._planner_started = False  # a landing resumes from the measured state later
        if self._odom_state is None:  # never had odometry: nothing to fly on
            return np.zeros(ACTION_DIM)
        if not self.blind.started:  # (the policy may have flown on the prediction already)
            self.blind.start(*self._good_odometry())
        if self._blind_since_ns is None:
            self._blind_since_ns = now_ns
        predicted = self.blind.predict(now_ns)
        c = self.config
        levelling = now_ns - self._blind_since_ns < c.blind_level_s * NS_PER_S
        climb_mps = 0.0 if levelling else -c.blind_descent_mps
        cancel: np.ndarray = -np.asarray(self.blind.disturbance.accel_mps2(predicted[VEL]))
        velocity = np.array([0.0, 0.0, climb_mps])
        setpoint = Setpoint(predicted[POS], velocity, self._blind_yaw_rad, cancel)
        if predicted[2] <= c.floor_z_m:  # blind hold or landing: there is no going back up
            if self._blind_floor_since_ns is None:
                self._blind_floor_since_ns = now_ns
            if now_ns - self._blind_floor_since_ns >= c.blind_land_margin_s * NS_PER_S:
                self.counters.count(EVENT_BLIND_DISARM)
                self._switch(
                    Mode.DISARMED,
                    now_ns,
                    f"{EVENT_BLIND_DISARM} ({c.blind_land_margin_s:.1f} s after the predicted "
                    "height reached the floor)",
                )
                return np.zeros(ACTION_DIM)
        command = self.blind_controller.command(predicted, setpoint)
        rate_max = c.blind_max_rate_radps
        command[1:] = np.clip(command[1:], -rate_max, rate_max)
        return command

    def _limit(self, target: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Clamp ``target`` (4,) to the vehicle limits, then slew-limit it from the previous
        output. Both boxes are convex and the previous output lies in the first, so the
        result satisfies both.

        Scalar arithmetic on four floats: numpy's per-call dispatch cost more than the
        limiting itself, most of all on a tick whose code has left the CPU caches
        (``vnd_flight.rehearsal``).
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
