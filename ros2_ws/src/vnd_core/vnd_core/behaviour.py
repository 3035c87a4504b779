"""Behavioural check of a candidate bundle: short closed-loop rollouts inside a safety envelope.

Hashes, shapes, finite weights and the smoke test (``vnd_core.bundle``) say a bundle is
well-formed; they cannot see a policy that is well-formed but flies badly (a first layer scaled
by 1e6 saturates every command; an output layer with its sign flipped pushes away from the
reference). This check flies the candidate policy, closed loop, for ``duration_s`` from a few
named initial states around a hover reference (at the reference, offset, moving, tilted; one
batch) on

- the nominal model (:class:`vnd_core.dynamics.NominalModel`, the vehicle's prior), z = 0;
- the bundle's own learned model, when it carries one fitted on data, driven and read with the
  latent its encoder gives for a calm hover window (the model the policy was trained on, with
  the residual components the bundle records, :mod:`vnd_core.vnd.components`). A
  bundle does
  not carry the residual clip and trust region the learner trained with, so far from its data
  this model is the least trustworthy part of the check: its tilt, rate and settling limits
  are wider by ``learned_model_margin`` and its rollouts are judged mainly on staying finite
  and near the reference (measured on four learned wind bundles from the 0.4 m offset: up to
  52 deg and 8.9 rad/s on their own models, 28 deg and 4.5 rad/s on the nominal model; a
  demo bundle held 0.38 m off its hover point on its own model after 1.5 s, where the
  nominal model flew it back);

and every rollout must stay inside the envelope at every tick: finite state and command, tilt
below ``max_tilt_rad``, every body rate below its limit, distance from the reference below
``max_position_error_m`` and, from ``settle_s`` on, below ``settled_error_m`` (a policy that
chatters around the reference without ever holding it fails there). Otherwise
:class:`~vnd_core.bundle.BundleError` names the figure, the time, the initial state and the
model, e.g. ``behaviour check: tilt 42.0 deg > 34.4 deg at t=0.18 s from initial state
'offset_x' on the nominal model``.

The tilt and body-rate limits are the check's own (:data:`DEFAULT_MAX_TILT_RAD`,
:data:`DEFAULT_MAX_BODY_RATE_RADPS`), or the safety filter's where those are tighter
(``max_tilt_rad`` and ``max_body_rate_radps`` of ``SafetyConfig.envelope``, measured the same
way: tilt of the body z axis, roll/pitch rate magnitude; see
:meth:`BehaviourCheckConfig.for_flight`). The check's are the stricter ones by design: its
rollouts start from mild states on a model whose rates are exact, while the filter's envelope
judges real flight (take-off transients, a rate estimated from motion capture) and must never
take a good policy off the vehicle, so a bundle that passes here stays well inside it.
The rollouts run on the bundle loader thread (policy node) and in the learner's gates; cost:
see :func:`behaviour_check` (0.1-0.3 s of CPU per bundle with torch on one thread).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from vnd_core.bundle import Bundle, BundleError
from vnd_core.dynamics import CONTROL_PERIOD_S, NominalModel, NominalModelConfig
from vnd_core.force_observer import (
    clip_to_observer,
    left_to_policy_n,
    model_hover_force_n,
    observer_limit_n,
    with_vertical_fed_forward,
)
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.so3 import exp_map, quat_mul
from vnd_core.state import ACTION_DIM, OMEGA, POS, QUAT, VEL, hover_state
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.components import compose, recorded_components

if TYPE_CHECKING:
    from vnd_core.vnd.model import VNDModel

Vec3 = tuple[float, float, float]
DEFAULT_MAX_TILT_RAD = 0.8  # the check's tilt limit (46 deg)
DEFAULT_MAX_BODY_RATE_RADPS = 6.0  # the check's roll/pitch rate limit


@dataclass(frozen=True)
class BehaviourCheckConfig:
    """Initial states, length and safety envelope of the behavioural check of a bundle."""

    enabled: bool = True  # run the check (False only for tests and studies of bad bundles)
    duration_s: float = 2.0  # length of every closed-loop rollout
    period_s: float = CONTROL_PERIOD_S  # control period of the rollouts (one model step)
    delay_ticks: int = 1  # ticks between a command and its effect (the deployed loop's latency)
    hover_m: Vec3 = (0.0, 0.0, 1.0)  # hover reference every rollout holds (ENU world)
    offset_m: float = 0.4  # position offset of the displaced initial states
    speed_mps: float = 0.5  # initial speed of the moving initial states
    tilt_rad: float = 0.25  # initial tilt of the tilted initial states (well inside the limit)
    rate_radps: float = 1.0  # initial body rate of the tilted initial states
    max_tilt_rad: float = DEFAULT_MAX_TILT_RAD  # envelope: tilt of the body z axis from vertical
    max_body_rate_radps: float = 8.0  # envelope: roll/pitch rate magnitude, hypot(p, q)
    max_yaw_rate_radps: float = 3.0  # envelope: |yaw rate|
    max_position_error_m: float = 1.0  # envelope: distance from the hover reference
    settle_s: float = 1.5  # from this time on the rollout must have settled ...
    settled_error_m: float = 0.25  # ... to within this distance of the reference
    learned_model: bool = True  # also fly the bundle's learned model when it carries one
    learned_model_margin: float = 2.0  # its rollouts get tilt, rate and settling limits x this

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name in ("duration_s", "period_s", "max_tilt_rad", "max_position_error_m"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.delay_ticks < 0:
            raise ValueError(f"delay_ticks must be >= 0, got {self.delay_ticks}")
        if not self.learned_model_margin >= 1.0:
            raise ValueError(f"learned_model_margin must be >= 1, got {self.learned_model_margin}")
        for name in ("max_body_rate_radps", "max_yaw_rate_radps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.tilt_rad < self.max_tilt_rad:
            raise ValueError(
                f"tilt_rad {self.tilt_rad} must lie in [0, max_tilt_rad {self.max_tilt_rad})"
            )
        if not 0 < self.settled_error_m <= self.max_position_error_m:
            raise ValueError(
                f"settled_error_m {self.settled_error_m} must lie in (0, max_position_error_m]"
            )
        if not self.offset_m < self.max_position_error_m:
            raise ValueError(
                f"offset_m {self.offset_m} must be below max_position_error_m "
                f"{self.max_position_error_m}"
            )

    @classmethod
    def for_flight(
        cls, vehicle: VehicleParams, safety: object | None = None, **overrides: Any
    ) -> BehaviourCheckConfig:
        """The check for a node flying ``vehicle`` behind the safety filter ``safety``.

        The envelope limits are :data:`DEFAULT_MAX_TILT_RAD` and
        :data:`DEFAULT_MAX_BODY_RATE_RADPS` (capped by the vehicle's roll/pitch
        ``body_rate_max_radps``), or the filter's where they are tighter: ``max_tilt_rad`` and
        ``max_body_rate_radps`` (roll/pitch rate magnitude) of ``safety.envelope`` or of
        ``safety`` itself. The yaw limit is the vehicle's. ``overrides`` replace fields.
        """
        limits = getattr(safety, "envelope", safety)
        roll_max, pitch_max, yaw_max = vehicle.body_rate_max_radps
        tilt = min(DEFAULT_MAX_TILT_RAD, float(getattr(limits, "max_tilt_rad", math.inf)))
        rate = min(
            DEFAULT_MAX_BODY_RATE_RADPS,
            max(roll_max, pitch_max),
            float(getattr(limits, "max_body_rate_radps", math.inf)),
        )
        config = cls(
            max_tilt_rad=tilt,
            max_body_rate_radps=rate,
            max_yaw_rate_radps=float(yaw_max),
        )
        config = dataclasses.replace(config, **overrides)
        config.validate()
        return config


@dataclass(frozen=True)
class BehaviourReport:
    """What :func:`behaviour_check` measured (worst values over every rollout and tick)."""

    rollouts: int  # rollouts flown (initial states x models)
    ticks: int  # ticks per rollout
    max_tilt_rad: float  # largest tilt met
    max_body_rate_radps: float  # largest roll/pitch rate magnitude met
    max_position_error_m: float  # largest distance from the reference met
    violation: str  # first envelope violation ("" = none)


def initial_states(config: BehaviourCheckConfig) -> tuple[list[str], torch.Tensor]:
    """Names and states (S, 13) of the rollouts' starts around ``config.hover_m``."""
    d, v = config.offset_m, config.speed_mps
    diagonal = d / math.sqrt(2.0)
    names = ["hover", "offset_x", "offset_y", "below", "moving", "tilted"]
    states = hover_state((len(names),), position_m=config.hover_m)
    states[1, POS.start] += d
    states[2, POS.start + 1] -= d
    states[3, POS.start + 2] -= d
    states[4, POS] += torch.tensor([-diagonal, diagonal, 0.0])
    states[4, VEL] = torch.tensor([-v, -v, 0.0]) / math.sqrt(2.0)  # moving away
    axis = torch.tensor([2.0, -1.0, 0.0]) / math.sqrt(5.0)  # roll and some pitch
    tilt = exp_map(config.tilt_rad * axis)
    states[5, QUAT] = quat_mul(states[5, QUAT], tilt)
    states[5, VEL] = torch.tensor([v, 0.0, -0.5 * v])
    states[5, OMEGA] = torch.tensor([config.rate_radps, config.rate_radps, 0.0])
    return names, states


def _learned(model: VNDModel | None) -> bool:
    """True for a model fitted on data (its normalisation statistics come from data); a model
    never fitted is the untrained default architecture and says nothing about flight."""
    return model is not None and bool(getattr(model, "normalizers_fitted", True))


def _calm_latent(model: VNDModel, vehicle: VehicleParams, hover_m: Vec3) -> torch.Tensor:
    """The latent (1, nz) the model's encoder gives for a window of calm hovering."""
    context = model.context_len
    states = hover_state((1, context + 1), position_m=hover_m)
    actions = torch.zeros(1, context, ACTION_DIM)
    actions[..., 0] = vehicle.hover_thrust_n
    return model.encode(states, actions)


@torch.inference_mode()
def fly_envelope(bundle: Bundle, config: BehaviourCheckConfig) -> tuple[BehaviourReport, list[str]]:
    """Fly every rollout of the check; (report, one line per violating rollout).

    The batch holds S initial states on the nominal model and, with a learned model, the same S
    on it: (S or 2 S, 13), stepped together; the envelope is judged on the whole (T, B) history
    afterwards (one vectorised pass instead of per-tick bookkeeping). A rollout counts up to its
    first violation.
    """
    policy, vehicle = bundle.policy, bundle.vehicle
    names, starts = initial_states(config)
    s = len(starts)
    nz = policy.latent_dim
    use_model = config.learned_model and _learned(bundle.model)
    z = torch.zeros(s, nz)
    labels = [f"'{name}' on the nominal model" for name in names]
    state = starts.clone()
    if use_model:
        model = bundle.model
        # the residual parts the bundle's policy trained against (components.py)
        try:
            components = recorded_components(bundle.summary)
        except ValueError as err:
            raise BundleError(f"behaviour check: bundle summary: {err}") from err
        z_model = _calm_latent(model, vehicle, config.hover_m).expand(s, -1)
        z = torch.cat([z, z_model])  # the policy reads what drives the model
        labels += [f"'{name}' on the bundle's learned model" for name in names]
        state = torch.cat([state, starts])
    b = state.shape[0]
    prior = NominalModel(vehicle, NominalModelConfig(dt_s=config.period_s))
    spec = ReferenceSpec(kind="hover", center_m=config.hover_m)
    trajectory = Trajectory.from_spec(spec, b)
    obs_builder = policy.observation
    # a hover reference is constant: its features are computed once for every tick
    ref_state, ref_head = obs_builder.reference_features(
        trajectory.sample(obs_builder.sample_times(torch.zeros(b)))
    )
    n_prev = policy.config.n_prev_actions
    hover_action = policy.action_offset.expand(b, ACTION_DIM)
    prev = obs_builder.normalise_action(hover_action).repeat(1, n_prev)  # (B, 4 n_prev)
    # Each half gets its commands with its own lag: the nominal model with the deployed loop's,
    # a learned model with the lag it was fitted with (it maps the command issued d ticks ago
    # to the next state).
    delay = torch.full((b,), config.delay_ticks, dtype=torch.long)
    if use_model:
        delay[s:] = model.config.action_delay_ticks or config.delay_ticks
        shared_prior = model.prior.config == prior.config  # one prior step for the whole batch
    lag = int(delay.max())
    history = [hover_action] * lag  # commands issued, oldest first
    rows = torch.arange(b)
    ticks = max(1, round(config.duration_s / config.period_s))
    states, actions = [], []
    force_n = None  # a force input reads zero on the nominal model
    fed_forward = use_model and bool(policy.force_dim)
    if fed_forward:
        # and on the learned model, the force an observer reads there at hover: the policy
        # reads its horizontal part, and the observer feeds the residual's vertical force
        # forward, as in flight
        known_n = torch.cat([torch.zeros(s, 3), model_hover_force_n(model, z_model)])
        force_n = clip_to_observer(known_n, observer_limit_n(vehicle))
    condition = obs_builder.condition(z, None if force_n is None else left_to_policy_n(force_n))
    for _ in range(ticks):
        obs = obs_builder.build(state, ref_state, ref_head, prev, condition)
        action = policy(obs)
        if n_prev:
            prev = torch.cat([obs_builder.normalise_action(action), prev[:, :-ACTION_DIM]], dim=1)
        history.append(action)
        window = torch.stack(history[-lag - 1 :])  # (lag + 1, B, 4), newest last
        applied = window[lag - delay, rows]
        del history[: -lag - 1]
        if not use_model:
            state = prior(state, applied)
        else:
            residual = model.residual_correction(state[s:], applied[s:], z_model)
            if fed_forward:
                residual = with_vertical_fed_forward(residual, state[s:, QUAT])
            if shared_prior:
                predicted = prior(state, applied)
                nominal, own = predicted[:s], predicted[s:]
            else:
                nominal, own = prior(state[:s], applied[:s]), model.prior(state[s:], applied[s:])
            state = torch.cat([nominal, compose(own, residual, components)])
        states.append(state)
        actions.append(action)
    margin = torch.ones(b)
    margin[s:] = config.learned_model_margin
    return _judge(torch.stack(states), torch.stack(actions), labels, margin, config)


def _judge(
    states: torch.Tensor,
    actions: torch.Tensor,
    labels: list[str],
    margin: torch.Tensor,
    config: BehaviourCheckConfig,
) -> tuple[BehaviourReport, list[str]]:
    """Envelope verdict of rollouts ``states`` (T, B, 13) under ``actions`` (T, B, 4), the
    state after tick k at index k; ``labels`` (B) name the rollouts, ``margin`` (B) scales
    their tilt, rate and settling limits."""
    ticks, b = states.shape[:2]
    times_s = (torch.arange(ticks)[:, None] + 1) * config.period_s  # (T, 1): after each tick
    quat = states[..., QUAT]
    tilt = torch.acos((1.0 - 2.0 * (quat[..., 1] ** 2 + quat[..., 2] ** 2)).clamp(-1.0, 1.0))
    rates = states[..., OMEGA.start : OMEGA.start + 2].norm(dim=-1)  # (T, B) roll/pitch
    yaw = states[..., OMEGA.start + 2].abs()
    error = (states[..., POS] - torch.tensor(config.hover_m)).norm(dim=-1)  # (T, B)
    finite = torch.isfinite(states).all(dim=-1) & torch.isfinite(actions).all(dim=-1)
    checks = {  # (T, B) masks in order of precedence within one tick
        "finite": ~finite,
        "tilt": ~(tilt <= config.max_tilt_rad * margin),
        "rate": ~(rates <= config.max_body_rate_radps * margin),
        "yaw": ~(yaw <= config.max_yaw_rate_radps * margin),
        "pos": ~(error <= config.max_position_error_m),
        "settle": (times_s >= config.settle_s - 1e-9) & ~(error <= config.settled_error_m * margin),
    }
    bad = torch.stack(list(checks.values())).any(dim=0)  # (T, B)
    first = torch.where(bad.any(dim=0), bad.float().argmax(dim=0), torch.full((b,), ticks))
    before = torch.arange(ticks)[:, None] < first[None, :]  # (T, B): inside the envelope so far
    violations: list[tuple[int, str]] = []
    for i in torch.nonzero(first < ticks).flatten().tolist():
        k = int(first[i])
        what = next(name for name, mask in checks.items() if bool(mask[k, i]))
        scaled = dataclasses.replace(
            config,
            max_tilt_rad=config.max_tilt_rad * float(margin[i]),
            max_body_rate_radps=config.max_body_rate_radps * float(margin[i]),
            max_yaw_rate_radps=config.max_yaw_rate_radps * float(margin[i]),
            settled_error_m=config.settled_error_m * float(margin[i]),
        )
        figure = _figure(what, states[k, i], float(tilt[k, i]), float(error[k, i]), scaled)
        t_s = (k + 1) * config.period_s
        violations.append((k, f"{figure} at t={t_s:.2f} s from initial state {labels[i]}"))
    violations.sort(key=lambda item: item[0])

    def worst(values: torch.Tensor) -> float:
        kept = values[before & finite]
        return float(kept.max()) if kept.numel() else 0.0

    report = BehaviourReport(
        rollouts=b,
        ticks=ticks,
        max_tilt_rad=worst(tilt),
        max_body_rate_radps=worst(rates),
        max_position_error_m=worst(error),
        violation=violations[0][1] if violations else "",
    )
    return report, [line for _, line in violations]


def behaviour_check(bundle: Bundle, config: BehaviourCheckConfig) -> BehaviourReport:
    """Fly the envelope rollouts (:func:`fly_envelope`); BundleError naming the first (earliest)
    violation, with how many of the rollouts violated it. Returns the report otherwise.

    Measured cost with torch on one thread on the shared 2-core development machine
    (``test_behaviour.py`` prints it): 70-120 ms of CPU for the shipped bundle (6 rollouts x
    100 ticks), 230-270 ms with a full-size learned model (12 rollouts).
    """
    if not config.enabled:
        return BehaviourReport(0, 0, 0.0, 0.0, 0.0, "")
    report, lines = fly_envelope(bundle, config)
    if lines:
        more = f" ({len(lines)} of {report.rollouts} rollouts left the envelope)"
        raise BundleError(f"behaviour check: {lines[0]}{more}")
    return report


def _figure(
    what: str, state: torch.Tensor, tilt_rad: float, error_m: float, config: BehaviourCheckConfig
) -> str:
    """The violated figure of one rollout's ``state`` (13,) against its limit, readable."""
    if what == "finite":
        return "non-finite state or command"
    if what == "tilt":
        return (
            f"tilt {math.degrees(tilt_rad):.1f} deg > {math.degrees(config.max_tilt_rad):.1f} deg"
        )
    if what == "rate":
        rate = float(state[OMEGA.start : OMEGA.start + 2].norm())
        return f"body rate {rate:.1f} rad/s > {config.max_body_rate_radps:.1f} rad/s"
    if what == "yaw":
        rate = float(state[OMEGA.start + 2].abs())
        return f"yaw rate {rate:.1f} rad/s > {config.max_yaw_rate_radps:.1f} rad/s"
    if what == "settle":
        return (
            f"position error {error_m:.2f} m > {config.settled_error_m:.2f} m after the "
            f"{config.settle_s:g} s settling time"
        )
    return f"position error {error_m:.2f} m > {config.max_position_error_m:.2f} m"
