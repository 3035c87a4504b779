"""Gates a candidate bundle must pass before it replaces the active one.

1. Finite: every policy and model weight and buffer is finite.
2. Within limits: on probe observations (typical, wide and absurd), every command is finite and
   inside the vehicle's thrust and body-rate limits.
3. Model sanity: the new model's open-loop position error on the replay data is not worse than
   the prior alone (beyond a margin): otherwise the policy was trained on a worse world model.
   Both this and the next check apply the residual components the policy trained against.
3b. Rotation sanity (only when the policy trains against the full residual): on the calm
   replay windows (as gate 5 defines them), the new model's tilt and attitude errors after
   ``rotation_check_horizon`` open-loop steps are not worse than the prior's (beyond
   ``rotation_margin_frac``). Learned from 50 Hz motion capture, the rotational residual
   mostly holds the rate loop's lag and filter artefacts and can drift far from the prior over
   a second of open loop; a policy trained against it fights torques the vehicle does not
   have. With translational components (the default) the attitude is the prior's: no check.
4. Cost on learned-model rollouts: closed loop on the new model (as the policy was trained on
   it), for conditions taken from the replay (windows encoded by the new encoder for the
   candidate; the active policy reads its own encoder's latent of the same windows, or z = 0
   without one). Half of the rollouts hold position from the replay state after the window
   (station keeping under the conditions actually met), half track random references.
   The candidate's mean position error may exceed the active policy's by at most
   ``cost_margin_frac`` (plus ``cost_margin_m``).
5. Calm tracking: where the prior was right, the candidate must fly the prior as well as the
   active policy did. The rollouts of gate 4 whose replay window shows a mean prior velocity
   error below ``calm_accel_mps2`` (calm air: the prior's physics hold there) are flown on the
   bare prior, each policy reading its own encoder's latent of the window. A learned model is
   least trustworthy far from its data; a policy fine-tuned on it can lose what it knew about
   calm flight, which gate 4 cannot see. The candidate's error may exceed the active policy's
   by at most ``calm_margin_m``. (The latent of calm air is wherever the encoder put it, not
   z = 0: the MMD spreads the conditions met over N(0, I).) No calm window: no check.
5b. Observed-force station keeping (only for a policy with a force input): the rollouts of
   gate 4 that hold position from a replay state are flown on the prior corrected by the
   replay window's mean prior error (its force: measured, not learned; the body-rate offset
   a torque leaves is not applied, because such a policy flies with the observer's rate
   compensation, which cancels it), each policy reading its own encoder's latent of the
   window and flying with the force the observer reads there (clipped as it clips it): it
   predicts with the prior alone, so it reads the window's mean prior error; of that force
   the policy reads the horizontal part, and the vertical part goes out as thrust
   feed-forward, as in flight. The candidate's
   mean position error may exceed the active policy's by at most ``force_margin_frac`` (plus
   ``force_margin_m``). The physics there is the prior's plus a measured force, not the learned
   model: a candidate trained on the model can gain on gate 4 and still lose the precision the
   observer gives it on the vehicle (measured: a steady 5 m/s hover wind flown at 0.024 m
   after the update that passed gate 4, against the active policy's 0.004 m; on the prior plus
   that wind's force, 0.013 against 0.002 m).
6. Hover sanity: from rest at the hover point, on the prior with z = 0, the position stays
   within ``hover_max_dev_m`` for ``hover_ticks``. A stability check, not a precision one:
   z = 0 is what the policy reads while the encoder warms up, and once the MMD has spread the
   conditions met over N(0, I) it is not calm air, so a good candidate may hold a dozen
   centimetres off there (measured: 0.12 m after learning a 4 m/s wind). Precision in calm
   air is gate 5's job.
7. Behaviour: the check every policy node runs before a bundle may fly
   (:mod:`vnd_core.behaviour`, limits of the default safety filter): closed loop from a
   few offset, moving and tilted starts on the prior (z = 0) and on the candidate's own model
   (unclipped, as the node flies it), every rollout inside the tilt, body-rate and position
   envelope. A candidate the node would refuse is never published.

Each gate returns a reason string when it fails; the first failure rejects the candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vnd_core.dynamics import NominalModel
from vnd_core.force_observer import (
    clip_to_observer,
    left_to_policy_n,
    observer_limit_n,
    with_thrust_feedforward,
)
from vnd_core.learner.novelty import window_unexplained_accel
from vnd_core.policy import PolicyNet
from vnd_core.reference import KINDS, ReferenceSpec, Trajectory
from vnd_core.rollout import ForceReading, next_reading
from vnd_core.so3 import exp_map, quat_mul
from vnd_core.state import POS, QUAT, VEL, hover_state
from vnd_core.trainer import Dynamics, prior_dynamics
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.components import COMPONENT_MASKS, DEFAULT_COMPONENTS, moves_attitude
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.features import INPUT_DIM, RES_VEL, apply_residual
from vnd_core.vnd.metrics import evenly_spread, open_loop_errors, window_errors
from vnd_core.vnd.model import VNDModel


@dataclass(frozen=True)
class ValidationConfig:
    """Settings of the candidate gates."""

    probe_observations: int = 256  # random observations of the limits check
    model_check_horizon: int = 10  # open-loop steps of the model-vs-prior check
    model_check_windows: int = 256  # windows of that check (evenly spread over the replay)
    model_margin_frac: float = 0.1  # model error may exceed the prior's by this fraction
    rotation_check_horizon: int = 50  # open-loop steps of the rotation check (gate 3b)
    rotation_check_windows: int = 256  # calm windows of that check (evenly spread)
    rotation_margin_frac: float = 0.1  # model tilt / attitude error may exceed the prior's by this
    eval_rollouts: int = 64  # closed-loop rollouts on the learned model, per policy
    eval_ticks: int = 100  # ticks per rollout (2 s)
    hold_fraction: float = 0.5  # rollouts that hold position from a replay state (the rest track)
    delay_ticks: int = 1  # command latency of the cost rollouts (the plant has 1 to 2 ticks)
    cost_margin_frac: float = 0.05  # candidate cost may exceed the active one by this fraction
    cost_margin_m: float = 0.005  # plus this absolute margin (m) against noise on tiny costs
    crash_distance_m: float = 2.0  # errors are capped here (a diverged rollout costs this much)
    calm_margin_m: float = 0.02  # calm tracking error may exceed the active one by this (m)
    calm_accel_mps2: float = 0.5  # windows whose mean prior velocity error is below this are calm
    force_margin_frac: float = 0.1  # gate 5b: the candidate's error may exceed the active one's
    force_margin_m: float = 0.001  # by this fraction plus this (m)
    hover_ticks: int = 150  # length of the hover sanity check (3 s)
    hover_max_dev_m: float = 0.2  # allowed position deviation in the hover check
    seed: int = 1234  # seeds the probes, references and initial states (same for both policies)
    behaviour_check: bool = True  # gate 7: the policy node's behavioural check (envelope rollouts)


def non_finite_tensor(module: torch.nn.Module, what: str) -> str | None:
    """Reason naming the first non-finite floating tensor of ``module``, or None."""
    for name, tensor in module.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return f"{what} tensor '{name}' has non-finite values"
    return None


@torch.no_grad()
def action_limit_violation(
    policy: PolicyNet, vehicle: VehicleParams, count: int, seed: int
) -> str | None:
    """Reason when a probe observation gives a non-finite or out-of-limit command, else None."""
    generator = torch.Generator().manual_seed(seed)
    mean, std = policy.normalizer.mean, policy.normalizer.std
    dim = mean.shape[0]
    scales = torch.tensor([1.0, 5.0, 1e3]).repeat_interleave(count // 3 + 1)[:count, None]
    obs = mean + std * scales * torch.randn(count, dim, generator=generator)
    action = policy(obs)
    if not bool(torch.isfinite(action).all()):
        return "policy gives non-finite commands on probe observations"
    low = torch.tensor([vehicle.thrust_min_n, *[-r for r in vehicle.body_rate_max_radps]])
    high = torch.tensor([vehicle.thrust_max_n, *vehicle.body_rate_max_radps])
    if bool((action < low - 1e-4).any() or (action > high + 1e-4).any()):
        return "policy commands outside the vehicle limits on probe observations"
    return None


@torch.no_grad()
def hover_deviation_m(policy: PolicyNet, vehicle: VehicleParams, ticks: int) -> float:
    """Largest distance (m) from the hover point over ``ticks`` ticks of hovering from rest on
    the prior, z = 0, no noise. NaN if the rollout goes non-finite."""
    prior = NominalModel(vehicle)
    spec = ReferenceSpec(kind="hover", center_m=(0.0, 0.0, 1.0))
    trajectory = Trajectory.from_spec(spec, 1)
    state = hover_state((1,), position_m=spec.center_m)
    prev = policy.action_offset.expand(1, max(policy.config.n_prev_actions, 1), 4).clone()
    z = torch.zeros(1, policy.latent_dim)
    worst = 0.0
    for k in range(ticks):
        t_s = torch.full((1,), k * prior.config.dt_s)
        n_prev = policy.config.n_prev_actions
        obs = policy.observation.build_from(
            state, trajectory, t_s, prev[:, :n_prev], policy.observation.condition(z)
        )
        action = policy(obs)
        prev = torch.cat([action.unsqueeze(1), prev[:, :-1]], dim=1)
        state = prior(state, action)
        deviation = float((state[0, POS] - torch.tensor(spec.center_m)).norm())
        if deviation != deviation:  # NaN
            return float("nan")
        worst = max(worst, deviation)
    return worst


@dataclass
class EvalSet:
    """Shared conditions of the learned-model cost check (identical for both policies)."""

    z_model: torch.Tensor  # (R, nz) latents of the new model (drive its dynamics)
    z_active: torch.Tensor  # (R, nz_active) what the active policy reads for the same windows
    trajectory: Trajectory  # (R) random references
    initial: torch.Tensor  # (R, 13) perturbed initial states
    calm: torch.Tensor  # (R,) bool: the window's mean prior velocity error is below calm_accel
    mean_error: torch.Tensor  # (R, 12) the window's mean prior error per residual component
    holds: torch.Tensor  # (R,) bool: the rollout holds position from the replay state

    def subset(self, rows: torch.Tensor) -> EvalSet:
        """The rollouts selected by the bool mask ``rows`` (R,)."""
        t = self.trajectory
        return EvalSet(
            self.z_model[rows],
            self.z_active[rows],
            Trajectory(
                kind=t.kind[rows],
                center_m=t.center_m[rows],
                amplitude_m=t.amplitude_m[rows],
                period_s=2.0 * math.pi / t.omega_radps[rows],
                phase_rad=t.phase_rad[rows],
            ),
            self.initial[rows],
            self.calm[rows],
            self.mean_error[rows],
            self.holds[rows],
        )


def make_eval_set(
    model: VNDModel,
    active_model: VNDModel | None,
    active_latent_dim: int,
    dataset: TransitionDataset,
    config: ValidationConfig,
) -> EvalSet:
    """Draw R replay windows (seeded) for the conditions, and the references and initial
    states: ``hold_fraction`` of them hold position from the replay state that follows the
    window, the others track random references from perturbed starts."""
    generator = torch.Generator().manual_seed(config.seed)
    r = config.eval_rollouts
    starts = dataset.window_starts(model.context_len, 0)
    pick = starts[torch.randint(len(starts), (r,), generator=generator)]
    with torch.no_grad():
        context = dataset.context(pick, model.context_len)  # (R, C, 28) raw features
        z_model = model.encoder(context)
        prior_accel = window_unexplained_accel(None, context, model.prior.config.dt_s)
        calm = prior_accel <= config.calm_accel_mps2
        mean_error = context[..., INPUT_DIM:].mean(dim=1)  # (R, 12)
        if active_model is not None:
            # The window ends at the same transition for both encoders (context lengths may
            # differ, a shorter one reads only the most recent part).
            c_old = min(active_model.context_len, model.context_len)
            offset = model.context_len - c_old
            old_context = dataset.context(pick + offset, c_old)
            z_active = active_model.encoder(old_context)
        else:
            z_active = torch.zeros(r, active_latent_dim)
    # Station keeping from replay states: each of the first rollouts starts at the state its
    # latent was encoded for (real condition, real motion) and must hold that position.
    n_hold = round(config.hold_fraction * r)
    replay_state = dataset.tensors()["next"][pick[:n_hold] + model.context_len - 1]
    hold = Trajectory(
        kind=torch.full((n_hold,), KINDS.index("hover"), dtype=torch.long),
        center_m=replay_state[:, POS].clone(),
        amplitude_m=torch.zeros(n_hold),
        period_s=torch.ones(n_hold),
        phase_rad=torch.zeros(n_hold),
    )
    # Tracking random references from perturbed starts, as in training.
    m = r - n_hold
    moving = Trajectory.random(max(m, 1), generator=generator)  # (at least one: torch needs it)
    ref = moving.sample(torch.zeros(max(m, 1)))
    start = hover_state((max(m, 1),))
    start[:, POS] = ref.position_m + 0.2 * torch.randn(max(m, 1), 3, generator=generator)
    start[:, VEL] = ref.velocity_mps + 0.2 * torch.randn(max(m, 1), 3, generator=generator)
    tilt = exp_map(0.1 * torch.randn(max(m, 1), 3, generator=generator))
    start[:, QUAT] = quat_mul(start[:, QUAT], tilt)
    trajectory = Trajectory(
        kind=torch.cat([hold.kind, moving.kind[:m]]),
        center_m=torch.cat([hold.center_m, moving.center_m[:m]]),
        amplitude_m=torch.cat([hold.amplitude_m, moving.amplitude_m[:m]]),
        period_s=2.0 * math.pi / torch.cat([hold.omega_radps, moving.omega_radps[:m]]),
        phase_rad=torch.cat([hold.phase_rad, moving.phase_rad[:m]]),
    )
    initial = torch.cat([replay_state, start[:m]])
    holds = torch.arange(r) < n_hold
    return EvalSet(z_model, z_active, trajectory, initial, calm, mean_error, holds)


@torch.no_grad()
def rollout_errors(
    policy: PolicyNet,
    policy_z: torch.Tensor,
    dynamics: Dynamics,
    eval_set: EvalSet,
    ticks: int,
    crash_distance_m: float,
    dt_s: float,
    delay_ticks: int = 1,
    force_n: torch.Tensor | None = None,
    feedforward_n: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean position error (R,) [m] per rollout of ``policy`` (reading ``policy_z`` (R, nz))
    tracking the eval references on ``dynamics`` (the learned model as the policy was trained
    on it) driven by ``eval_set.z_model``; each command reaches the dynamics ``delay_ticks``
    ticks late (the deployed loop has at least that much latency, and the learned model cannot
    represent it); errors capped at the crash distance, a non-finite state counts as a crash.
    A policy with a force input flies with the observer's reading as in flight: settled on
    ``force_n`` (R, 3) at the start (None: zero, right for the bare prior), then following
    the force the prior does not explain under ``dynamics`` tick by tick
    (:class:`~vnd_core.rollout.ForceReading`); it reads the horizontal part, and its commands
    go out with the thrust feed-forward of the vertical part of ``feedforward_n`` (R, 3), the
    force the prior does not explain there (None: none, for dynamics that cancel it
    themselves); its history keeps its own commands."""
    state = eval_set.initial.clone()
    r = state.shape[0]
    n_prev = policy.config.n_prev_actions
    prev = policy.action_offset.expand(r, max(n_prev, 1), 4).clone()
    crashed = torch.zeros(r, dtype=torch.bool)
    total = torch.zeros(r)
    in_flight = [policy.action_offset.expand(r, 4)] * delay_ticks  # commands not applied yet
    if not policy.force_dim:
        feedforward_n = None
    reading = None
    if policy.force_dim:
        reading = torch.zeros(r, 3) if force_n is None else force_n.clone()
        follow = ForceReading.of_observer(NominalModel(policy.vehicle))
        limit_n = observer_limit_n(policy.vehicle)
    condition = policy.observation.condition(policy_z, None)
    for k in range(ticks):
        t_s = torch.full((r,), k * dt_s)
        if reading is not None:
            read_n = left_to_policy_n(clip_to_observer(reading, limit_n))
            condition = policy.observation.condition(policy_z, read_n)
        obs = policy.observation.build_from(
            state, eval_set.trajectory, t_s, prev[:, :n_prev], condition
        )
        action = policy(obs)
        prev = torch.cat([action.unsqueeze(1), prev[:, :-1]], dim=1)
        if feedforward_n is not None:
            action = with_thrust_feedforward(action, feedforward_n, state[:, QUAT], policy.vehicle)
        in_flight.append(action)
        applied = in_flight.pop(0)
        nxt = dynamics(state, applied, eval_set.z_model)
        if reading is not None:
            reading = next_reading(follow, reading, state, applied, nxt)
        state = nxt
        ref = eval_set.trajectory.sample(t_s + dt_s).position_m
        error = (state[:, POS] - ref).norm(dim=-1)
        crashed |= ~(error < crash_distance_m)  # NaN compares False: a crash
        total += torch.where(crashed, torch.full_like(error, crash_distance_m), error)
        state = torch.where(crashed[:, None], eval_set.initial, state)  # keep crashed finite
    return total / ticks


def _both_costs(
    candidate: PolicyNet,
    active: PolicyNet,
    dynamics: Dynamics,
    eval_set: EvalSet,
    config: ValidationConfig,
    dt_s: float,
    delay_ticks: int,
    force_n: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    feedforward_n: torch.Tensor | None = None,
) -> dict[str, float]:
    """Mean rollout error [m] of the candidate (reading the new model's latents) and of the
    active policy (reading its own) on ``eval_set`` under ``dynamics``; force-input policies
    read ``force_n`` (candidate's, active's) and fly with the feed-forward of
    ``feedforward_n`` (:func:`rollout_errors`)."""
    figures = {}
    for name, policy, z, read in (
        ("candidate", candidate, eval_set.z_model, force_n[0]),
        ("active", active, eval_set.z_active, force_n[1]),
    ):
        errors = rollout_errors(
            policy,
            z,
            dynamics,
            eval_set,
            config.eval_ticks,
            config.crash_distance_m,
            dt_s,
            delay_ticks,
            read,
            feedforward_n,
        )
        figures[name] = float(errors.mean())
    return figures


def calm_tracking_regression(
    candidate: PolicyNet,
    active: PolicyNet,
    vehicle: VehicleParams,
    eval_set: EvalSet,
    config: ValidationConfig,
    delay_ticks: int,
) -> tuple[str | None, dict]:
    """Gate 5: (reason or None, figures) of both policies flying ``eval_set``'s calm rollouts
    on the bare prior, each reading its own encoder's latent of the window."""
    calm = eval_set.subset(eval_set.calm)
    figures: dict = {"calm_windows": int(eval_set.calm.sum())}
    if figures["calm_windows"] == 0:
        return None, figures
    prior = NominalModel(vehicle)
    dynamics = prior_dynamics(prior)
    figures.update(
        _both_costs(candidate, active, dynamics, calm, config, prior.config.dt_s, delay_ticks)
    )
    if not figures["candidate"] <= figures["active"] + config.calm_margin_m:
        return (
            f"calm tracking on the prior {figures['candidate']:.4f} m exceeds the active "
            f"policy's {figures['active']:.4f} m by more than {config.calm_margin_m} m "
            f"({figures['calm_windows']} calm replay windows)"
        ), figures
    return None, figures


def observed_force_regression(
    candidate: PolicyNet,
    active: PolicyNet,
    vehicle: VehicleParams,
    eval_set: EvalSet,
    config: ValidationConfig,
    delay_ticks: int,
) -> tuple[str | None, dict]:
    """Gate 5b: (reason or None, figures) of both policies holding position in ``eval_set``'s
    station-keeping rollouts on the prior corrected by each window's mean prior error, reading
    the force the observer reads there (policies with a force input); the vertical force the
    prior does not explain goes out as thrust feed-forward, as in flight."""
    eval_set = eval_set.subset(eval_set.holds)
    figures: dict = {"windows": len(eval_set.holds)}
    if figures["windows"] == 0:
        return None, figures
    prior = NominalModel(vehicle)
    dt_s = prior.config.dt_s
    correction = eval_set.mean_error * eval_set.mean_error.new_tensor(
        COMPONENT_MASKS["translational"]
    )
    # the observer predicts with the prior alone: it reads the window's mean prior error
    read_n = clip_to_observer(observer_reading(vehicle, dt_s, eval_set), observer_limit_n(vehicle))

    def pushed(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return apply_residual(prior(state, action), correction)

    figures.update(
        _both_costs(
            candidate,
            active,
            pushed,
            eval_set,
            config,
            dt_s,
            delay_ticks,
            (read_n, read_n),
            read_n,
        )
    )
    allowed = figures["active"] * (1.0 + config.force_margin_frac) + config.force_margin_m
    if not figures["candidate"] <= allowed:
        return (
            f"station keeping on the prior with the observed forces {figures['candidate']:.4f} m "
            f"exceeds the active policy's {figures['active']:.4f} m beyond the margin "
            f"(allowed {allowed:.4f} m)"
        ), figures
    return None, figures


def observer_reading(vehicle: VehicleParams, dt_s: float, eval_set: EvalSet) -> torch.Tensor:
    """What a flight's observer reads (R, 3) in ``eval_set``'s windows: it predicts with the
    prior alone, so the window's mean prior error as a force."""
    return vehicle.mass_kg * eval_set.mean_error[:, RES_VEL] / dt_s


def model_worse_than_prior(
    model: VNDModel,
    dataset: TransitionDataset,
    config: ValidationConfig,
    components: str = DEFAULT_COMPONENTS,
) -> tuple[str | None, dict]:
    """(reason or None, metrics): open-loop error of prior + the ``components`` of D(z) vs the
    prior alone."""
    errors = open_loop_errors(
        model, dataset, (config.model_check_horizon,), config.model_check_windows, components
    )
    key = str(config.model_check_horizon)
    if key not in errors["model_err_m"]:
        return None, {}
    prior_err, model_err = errors["prior_err_m"][key], errors["model_err_m"][key]
    metrics = {"prior_err_m": prior_err, "model_err_m": model_err, "horizon": key}
    if not model_err <= prior_err * (1.0 + config.model_margin_frac) + 1e-4:
        return (
            f"model {key}-step error {model_err:.4f} m is worse than the prior's {prior_err:.4f} m",
            metrics,
        )
    return None, metrics


def rotation_worse_than_prior(
    model: VNDModel,
    dataset: TransitionDataset,
    config: ValidationConfig,
    components: str = DEFAULT_COMPONENTS,
) -> tuple[str | None, dict]:
    """Gate 3b: (reason or None, figures) of the model's tilt and attitude errors after
    ``rotation_check_horizon`` open-loop steps on the calm replay windows (the prior's mean
    velocity error over the context below ``calm_accel_mps2``) against the prior's. Only a
    model whose policy trains against a residual of the attitude or body rates is checked
    (``components`` "translational_rates" or "full"); no calm window long enough: no check."""
    if not moves_attitude(components):
        return None, {}
    horizon, context_len = config.rotation_check_horizon, model.context_len
    starts = dataset.window_starts(context_len, horizon)
    with torch.no_grad():
        accel = window_unexplained_accel(
            None, dataset.context(starts, context_len), model.prior.config.dt_s
        )
    calm = evenly_spread(starts[accel <= config.calm_accel_mps2], config.rotation_check_windows)
    figures: dict = {"horizon": horizon, "calm_windows": len(calm)}
    if len(calm) == 0:
        return None, figures
    errors = window_errors(model, dataset, calm, horizon, components)
    worse = []
    for kind in ("tilt_rad", "attitude_rad"):
        prior_deg = math.degrees(errors["prior"][kind])
        model_deg = math.degrees(errors["model"][kind])
        name = kind.removesuffix("_rad")
        figures[f"prior_{name}_deg"], figures[f"model_{name}_deg"] = prior_deg, model_deg
        if not model_deg <= prior_deg * (1.0 + config.rotation_margin_frac) + 1e-3:
            worse.append(f"{name} error {model_deg:.2f} deg (prior {prior_deg:.2f} deg)")
    if worse:
        return (
            f"rotational residual worse than the prior by more than "
            f"{config.rotation_margin_frac:.0%} after {horizon} open-loop steps in calm flight "
            f"({len(calm)} replay windows): {', '.join(worse)}; the policy would train against "
            "rotations the vehicle does not make",
            figures,
        )
    return None, figures
