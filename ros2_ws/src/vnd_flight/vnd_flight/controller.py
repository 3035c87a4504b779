"""One control tick of the policy node, without middleware: state + reference + latent ->
policy -> safety filter -> command and the tick record the learner stores.

:class:`PolicyController` is called by the node once per tick with the latest odometry, the
active bundle (swapped between ticks by the node) and the latest latent. It

- uses z only when the latent's encoder version equals the policy's bundle version, it is
  valid, fresh and of the right size; otherwise the prior mean z = 0 and a counted reason;
- follows the parameter reference (hover / figure-eight / circle, time measured from the
  odometry stamp of the first tick that flies: while IDLE the reference waits at its start,
  so however long the vehicle waits for fresh odometry, the policy takes over at the start
  of the trajectory and not at a point the trajectory has already moved on to) or, when one
  was given, an external reference sample extrapolated with its velocity and acceleration;
- always runs the policy when a state is known (the safety filter needs its action to decide
  on recovery), then the safety filter, and feeds the *applied* command back as the policy's
  previous action, so a fallback episode does not leave the policy a stale history;
- on a tick whose odometry is the previous tick's (late odometry, a watchdog tick) the policy
  flies on the safety filter's prediction of the state now (the last good odometry through
  every command sent since) rather than on a repeat of its last input: a policy fed the same
  state tick after tick keeps turning open-loop until the fallback takes over;
- gives a policy with a force input the force a :class:`~vnd_flight.force_input.ForceInput`
  observes, whose update the node runs after publishing the command (:meth:`after_publish`),
  and sends that policy's commands with the observer's body-rate compensation (the tick
  record's action is the command sent);
- while the policy does not fly the vehicle (IDLE before take-off, or a fallback), re-aims the
  policy's reference at the vehicle's own position and velocity (``vnd_flight.rejoin``), so
  when the policy takes over it converges onto the scheduled reference instead of flying a
  step at the edge of its envelope: a vehicle at rest on the stand does not start on a
  figure-eight already moving at its full speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from vnd_core.bundle import Bundle
from vnd_core.counters import ReasonCounter
from vnd_core.policy import PolicyNet, PolicyRunner, reference_numpy
from vnd_core.reference import ReferenceSpec
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams
from vnd_core.wire import Mode

from vnd_flight import arming
from vnd_flight.arming import ArmingReply, Odometry
from vnd_flight.force_input import ForceInput
from vnd_flight.rehearsal import StateSnapshot
from vnd_flight.rejoin import ReferenceRejoin
from vnd_flight.safety import SafetyFilter
from vnd_flight.safety_config import SafetyConfig

# Modes in which the policy does not fly the vehicle (it waits on the stand or in another
# controller's hover, or a fallback flies it): when the policy takes over, its reference starts
# at the vehicle and rejoins the scheduled one.
REJOIN_MODES = frozenset({Mode.IDLE, Mode.FALLBACK_HOLD, Mode.FALLBACK_LAND})

# Reasons counted in PolicyController.counters (besides the safety filter's own).
LATENT_MISSING = "latent_missing"  # no latent received yet
LATENT_MISMATCH = "latent_mismatch"  # latent from another bundle version: ignored, z = 0
LATENT_INVALID = "latent_invalid"  # the encoder said its context is not full / broken
LATENT_STALE = "latent_stale"  # the newest latent is older than latent_max_age_s
LATENT_SIZE = "latent_size_mismatch"  # latent length differs from the policy's latent size
POLICY_ERROR = "policy_error"  # the policy raised: the tick goes on without its action
NO_BUNDLE = "no_bundle"  # no active bundle: the safety filter gets no action


@dataclass(frozen=True)
class LatentSample:
    """The newest ``vnd_msgs/Latent``."""

    received_ns: int  # arrival time on the node clock (freshness check)
    encoder_version: int  # bundle version of the encoder that produced z
    valid: bool  # the encoder's context was full
    z: np.ndarray  # (nz,) float32


@dataclass(frozen=True)
class ExternalReference:
    """One ``vnd_msgs/Reference`` sample (ENU world)."""

    stamp_ns: int  # time the sample applies to
    position_m: np.ndarray  # (3,)
    velocity_mps: np.ndarray  # (3,)
    acceleration_mps2: np.ndarray  # (3,)


@dataclass(frozen=True)
class TickRecord:
    """Everything one tick produced: the command and the fields of the Transition record."""

    action: np.ndarray  # (4,) command sent: thrust N, body rates rad/s FLU
    mode: Mode  # controller mode
    reasons: tuple[str, ...]  # safety faults and limits of this tick
    state: np.ndarray  # (13,) state the tick used
    reference: np.ndarray  # (9,) scheduled reference position m, velocity m/s, accel. m/s^2 (now)
    z: np.ndarray  # (nz,) float32 latent the policy saw (zeros = prior mean)
    z_valid: bool  # z came from a matching, valid, fresh latent
    policy_version: int  # bundle version of the policy (0 = none)
    encoder_version: int  # version of the newest latent's encoder (0 = none received)
    # (3,) external force the observer estimated, N, world ENU (zeros while it is not
    # running): the policy read its horizontal part, the thrust feed-forward answered the
    # vertical one; None: the policy has no force input
    force_n: np.ndarray | None = None


class ReferenceRunner(PolicyRunner):
    """:class:`PolicyRunner` whose reference can be replaced by an external sample.

    It overrides :meth:`PolicyRunner.reference_at` only: the parameter reference, or an
    external sample (``external``, taken ``external_age_s`` before the current state)
    extrapolated at constant acceleration, plus the ``rejoin`` offset after a fallback; it keeps
    the reference it used so the tick record needs no second evaluation.
    """

    def __init__(self, policy: PolicyNet, reference: ReferenceSpec) -> None:
        super().__init__(policy, reference)
        self.external: ExternalReference | None = None
        self.external_age_s = 0.0  # state stamp minus the external sample's stamp [s]
        self.last_reference: np.ndarray | None = None  # reference of the last observe()
        self.last_scheduled: np.ndarray | None = None  # the same without the rejoin offset
        self.rejoin: ReferenceRejoin | None = None  # offset onto the reference after a fallback

    def reference_at(self, t_s: float) -> np.ndarray:
        """Reference (3, 1 + L, 3) now and at each look-ahead time: the scheduled reference
        plus the rejoin offset; kept in ``last_reference`` (and the scheduled one in
        ``last_scheduled``) for the tick record."""
        ref = self.last_scheduled = self.scheduled_reference_at(t_s)
        if self.rejoin is not None:
            if self.rejoin.settled(t_s):
                self.rejoin = None
            else:
                ref = ref + self.rejoin.offsets(t_s + self._offsets_s)
        self.last_reference = ref
        return ref

    def scheduled_reference_at(self, t_s: float) -> np.ndarray:
        """Reference (3, 1 + L, 3) without the rejoin: the parameter reference, or the external
        sample extrapolated."""
        ext = self.external
        if ext is None:
            ref = super().reference_at(t_s)
        else:
            dt = (self.external_age_s + self._offsets_s)[:, None]  # (1 + L, 1)
            ref = np.empty((3, dt.shape[0], 3))
            ref[0] = ext.position_m + ext.velocity_mps * dt + 0.5 * ext.acceleration_mps2 * dt**2
            ref[1] = ext.velocity_mps + ext.acceleration_mps2 * dt
            ref[2] = ext.acceleration_mps2
        return ref

    def remember(self, applied: np.ndarray, acted: bool) -> None:
        """Record the command actually sent as the newest previous action: it replaces the
        policy's own output when ``acted`` (``act`` already recorded one), else it is added."""
        if not self.prev_actions:
            return
        applied = np.array(applied, dtype=float)
        if acted:
            self.prev_actions[0] = applied
        else:
            self.prev_actions = [applied, *self.prev_actions[:-1]]


class PolicyController:
    """Per-tick policy step with the safety filter (see the module docstring).

    Args:
        safety: the safety filter (owns the mode machine and the fallback controller).
        reference: parameter reference, used while no external reference is set.
        latent_max_age_s: a latent older than this (arrival time) is not used.
    """

    def __init__(
        self,
        safety: SafetyFilter,
        reference: ReferenceSpec,
        latent_max_age_s: float = 0.1,
    ) -> None:
        reference.validate()
        self.safety = safety
        self.reference = reference
        self.counters = ReasonCounter()
        self._latent_max_age_ns = round(latent_max_age_s * NS_PER_S)
        self._runner: ReferenceRunner | None = None
        self._bundle: Bundle | None = None
        self._external: ExternalReference | None = None
        self._t0_ns: int | None = None  # reference time zero: the first flying tick's stamp
        self.latent_problem: str | None = None  # why the last tick flew on z = 0 (None: it did not)
        self._last_stamp_ns: int | None = None  # odometry stamp of the previous tick
        self.force_input: ForceInput | None = None  # made for the first bundle with a force input

    @classmethod
    def create(
        cls,
        vehicle: VehicleParams,
        config: SafetyConfig,
        reference: ReferenceSpec,
        latent_max_age_s: float = 0.1,
    ) -> PolicyController:
        """A controller with a fresh SafetyFilter for ``vehicle``."""
        return cls(SafetyFilter(vehicle, config), reference, latent_max_age_s)

    @property
    def mode(self) -> Mode:
        """Current controller mode."""
        return self.safety.mode

    @property
    def tracked_reference(self) -> np.ndarray | None:
        """Reference (3, 3: position, velocity, acceleration) the policy tracked on the last
        tick: the scheduled one plus the rejoin offset after a fallback; None before a tick."""
        ref = self._runner.last_reference if self._runner is not None else None
        return None if ref is None else ref[:, 0, :]

    def set_external_reference(self, reference: ExternalReference | None) -> None:
        """Follow ``reference`` from now on (None: back to the parameter reference)."""
        self._external = reference

    def arm(self, now_ns: int, odom: Odometry | None) -> ArmingReply:
        """Operator arm request (:func:`vnd_flight.arming.arm`), between two ticks. Leaving
        DISARMED starts over like a restarted node: reference time from the first flying tick
        (arming leaves the controller IDLE, where the reference waits at its start), the
        policy's previous actions back at hover (not the zeros sent while disarmed)."""
        was_disarmed = self.safety.mode == Mode.DISARMED
        reply = arming.arm(self.safety, now_ns, odom)
        if reply.accepted and was_disarmed and self._runner is not None:
            self._runner.reset()
            self._runner.rejoin = None
        return reply

    def disarm(self, now_ns: int) -> ArmingReply:
        """Operator kill switch (:func:`vnd_flight.arming.disarm`), between two ticks."""
        return arming.disarm(self.safety, now_ns)

    def tick(
        self,
        now_ns: int,
        state: np.ndarray,
        stamp_ns: int,
        bundle: Bundle | None,
        latent: LatentSample | None,
    ) -> TickRecord:
        """One control tick at ``now_ns`` with the latest odometry ``state`` (13,) stamped
        ``stamp_ns``, the active ``bundle`` and the newest ``latent``."""
        if self._t0_ns is None or self.safety.mode == Mode.IDLE:
            self._t0_ns = stamp_ns
        measured, input_ns = state, stamp_ns
        fresh = stamp_ns != self._last_stamp_ns
        if not fresh and self.safety.mode == Mode.POLICY:
            # Odometry is late: fly on the prediction, not on a repeat of the last input.
            predicted = self.safety.predicted_state(now_ns)
            if predicted is not None:
                state, input_ns = predicted, now_ns
        self._last_stamp_ns = stamp_ns
        runner = self._runner_for(bundle)
        version = bundle.version if bundle is not None else 0
        nz = bundle.policy.latent_dim if bundle is not None else 0
        z, z_valid = self._latent_for(now_ns, latent, version, nz)
        force_input = self._force_input_for(bundle)
        force_n = force_input.force_n() if force_input is not None else None
        read_n = force_input.policy_force_n() if force_input is not None else None
        t_s = (input_ns - self._t0_ns) / NS_PER_S
        action, ref, scheduled = None, None, None
        if runner is not None:
            runner.external = self._external
            if self._external is not None:
                runner.external_age_s = (input_ns - self._external.stamp_ns) / NS_PER_S
            runner.last_reference = runner.last_scheduled = None
            if self.safety.mode in REJOIN_MODES:
                runner.rejoin = ReferenceRejoin.between(
                    start_s=t_s,
                    reference=runner.scheduled_reference_at(t_s)[:, 0, :],
                    state=state,
                    time_constant_s=self.safety.config.rejoin_time_constant_s,
                )
            try:
                action = runner.act(state, t_s, z, read_n)
            except Exception:  # a broken policy must not stop the tick: the filter takes over
                self.counters.count(POLICY_ERROR)
            ref, scheduled = runner.last_reference, runner.last_scheduled
        else:
            self.counters.count(NO_BUNDLE)
        if ref is None:
            ref = scheduled = reference_numpy(self.reference, np.full(1, t_s))
        out = self.safety.step(now_ns, measured, stamp_ns, action, reference_m=ref[0, 0, :])
        if runner is not None:
            runner.remember(out.action, acted=action is not None)
        command = out.action
        if force_input is not None:
            command = force_input.compensate(out.mode, out.action, state)
            measured_state = np.asarray(measured, dtype=float)
            force_input.record(out.mode, measured_state, fresh, command)
        return TickRecord(
            action=command,
            mode=out.mode,
            reasons=out.reasons,
            state=np.asarray(state, dtype=float),
            reference=scheduled[:, 0, :].reshape(9),
            z=z,
            z_valid=z_valid,
            policy_version=version,
            encoder_version=latent.encoder_version if latent is not None else 0,
            force_n=None if force_input is None else _read_force(force_n),
        )

    def rehearse(
        self,
        now_ns: int,
        state: np.ndarray,
        stamp_ns: int,
        bundle: Bundle | None,
        latent: LatentSample | None,
    ) -> TickRecord | None:
        """Run :meth:`tick` and undo all it changed (cache warming, see
        ``vnd_flight.rehearsal``); returns its record, or None without running when
        ``bundle`` is not the one the controller flies (the next tick rebuilds the runner
        anyway, and rebuilding it twice would cost more than warming saves)."""
        if bundle is not self._bundle:
            return None
        parts = [self, self.counters, *self.safety.stateful_parts()]
        if self._runner is not None:
            parts.append(self._runner)
        if self.force_input is not None:
            parts.append(self.force_input)  # record() only: the observer waits for update()
        snapshot = StateSnapshot(parts)
        try:
            # The rehearsal repeats the last tick's odometry to warm the path of the next fresh
            # sample; it must not take (and pay for) the late-odometry prediction instead.
            self._last_stamp_ns = None
            return self.tick(now_ns, state, stamp_ns, bundle, latent)
        finally:
            snapshot.restore()

    def after_publish(self) -> None:
        """The work of the last tick that its command need not wait for: the force observer's
        update (call once per tick, after publishing the command)."""
        if self.force_input is not None:
            self.force_input.update()

    def all_counters(self) -> dict[str, int]:
        """Controller and safety-filter counters by reason."""
        return {**self.safety.counters.totals, **self.counters.totals}

    # ------------------------------------------------------------------ internals
    def _force_input_for(self, bundle: Bundle | None) -> ForceInput | None:
        """The force input when ``bundle``'s policy reads one (made on first need, kept across
        swaps between such bundles: the force is the vehicle's, not the bundle's; dropped while
        a bundle without one flies, so a later one starts on fresh measurements)."""
        if bundle is None or not bundle.policy.force_dim:
            self.force_input = None
            return None
        if self.force_input is None:
            self.force_input = ForceInput(bundle.vehicle)
        return self.force_input

    def _runner_for(self, bundle: Bundle | None) -> ReferenceRunner | None:
        """The runner of ``bundle``, rebuilt on a swap with the previous actions carried over."""
        if bundle is self._bundle:
            return self._runner
        old = self._runner
        if self._bundle is not None and bundle is not None:
            self.safety.resume_policy()  # a suspension was about the network just replaced
        self._bundle = bundle
        self._runner = None if bundle is None else ReferenceRunner(bundle.policy, self.reference)
        if self._runner is not None and old is not None:
            self._runner.rejoin = old.rejoin
            n = len(self._runner.prev_actions)
            carried = old.prev_actions[:n]
            self._runner.prev_actions = carried + self._runner.prev_actions[len(carried) :]
        return self._runner

    def _latent_for(
        self, now_ns: int, latent: LatentSample | None, version: int, nz: int
    ) -> tuple[np.ndarray, bool]:
        """(z (nz,) float32, used): the latent when it may be used, else zeros and a reason."""
        zeros = np.zeros(nz, dtype=np.float32)
        if nz == 0:
            self.latent_problem = None
            return zeros, False
        reason = None
        # Stale first: a silent encoder is the operator's problem whatever its last message said.
        if latent is None:
            reason = LATENT_MISSING
        elif now_ns - latent.received_ns > self._latent_max_age_ns:
            reason = LATENT_STALE
        elif latent.encoder_version != version:
            reason = LATENT_MISMATCH
        elif not latent.valid:
            reason = LATENT_INVALID
        elif latent.z.shape != (nz,) or not np.isfinite(latent.z).all():
            reason = LATENT_SIZE
        self.latent_problem = reason
        if reason is not None:
            self.counters.count(reason)
            return zeros, False
        assert latent is not None  # no reason: the latent is there
        return latent.z.astype(np.float32, copy=False), True


def _read_force(force_n: np.ndarray | None) -> np.ndarray:
    """The observer's force (3,) of a force-input policy's tick, or zeros while it is not
    running (a copy: the observer's next update must not change the tick's record)."""
    return np.zeros(3) if force_n is None else np.array(force_n, dtype=float)
