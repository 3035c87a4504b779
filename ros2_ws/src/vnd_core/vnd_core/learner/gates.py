"""The gates every learner candidate passes before it becomes a bundle version
(:mod:`validation` holds each check).

A fitted model passes :func:`model_gates` first: finite weights and model sanity (translational
and rotational). They need no policy, so a model update runs them before it trains one and a
model that fails costs no policy training. The candidate policy then passes
:func:`run_gates`, in order: finite weights, command limits, cost on learned-model roll-outs
against the active policy, calm tracking on the bare prior, hover stability, and the behaviour
check every policy node runs on load. Improvement rounds train against a model that passed
its model gates when its update was accepted and run :func:`run_gates` alone."""

from __future__ import annotations

from collections.abc import Callable

import torch

from vnd_core.behaviour import BehaviourCheckConfig, behaviour_check
from vnd_core.bundle import Bundle, BundleError
from vnd_core.force_observer import clip_to_observer, model_hover_force_n, observer_limit_n
from vnd_core.learner.validation import (
    ValidationConfig,
    action_limit_violation,
    calm_tracking_regression,
    hover_deviation_m,
    make_eval_set,
    model_worse_than_prior,
    non_finite_tensor,
    observed_force_regression,
    rollout_errors,
    rotation_worse_than_prior,
)
from vnd_core.policy import PolicyNet
from vnd_core.trainer import Dynamics
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.model import VNDModel

# gates(policy, dynamics, model, dataset) -> (why rejected or None, JSON-able checks)
Gates = Callable[[PolicyNet, Dynamics, VNDModel, TransitionDataset], tuple[str | None, dict]]


def gates_against(
    active: Bundle, vehicle: VehicleParams, validation: ValidationConfig, components: str
) -> Gates:
    """:func:`run_gates` against ``active``, for a candidate of the next version."""

    def gates(
        policy: PolicyNet, dynamics: Dynamics, model: VNDModel, dataset: TransitionDataset
    ) -> tuple[str | None, dict]:
        return run_gates(
            policy,
            dynamics,
            model,
            dataset,
            active=active,
            vehicle=vehicle,
            validation=validation,
            components=components,
        )

    return gates


def model_gates(
    model: VNDModel, dataset: TransitionDataset, validation: ValidationConfig, components: str
) -> tuple[str | None, dict]:
    """The gates on a fitted ``model`` (fitted on ``dataset``; ``components``: the residual
    parts its policy will train against): (first failure reason or None, figures of every
    gate run)."""
    checks: dict = {}
    reason = non_finite_tensor(model, "model")
    if reason:
        return reason, checks
    reason, checks["model_check"] = model_worse_than_prior(model, dataset, validation, components)
    if reason:
        return reason, checks
    reason, checks["rotation_check"] = rotation_worse_than_prior(
        model, dataset, validation, components
    )
    return reason, checks


def run_gates(
    policy: PolicyNet,
    dynamics: Dynamics,
    model: VNDModel,
    dataset: TransitionDataset,
    *,
    active: Bundle,
    vehicle: VehicleParams,
    validation: ValidationConfig,
    components: str,
) -> tuple[str | None, dict]:
    """Run the policy gates on candidate ``policy`` (trained on ``dynamics``, the frozen
    ``model`` fitted on ``dataset``, which passed :func:`model_gates`) against the ``active``
    bundle; (first failure reason or None, figures of every gate run)."""
    v = validation
    checks: dict = {}
    reason = non_finite_tensor(policy, "policy")
    if reason:
        return reason, checks
    reason = action_limit_violation(policy, vehicle, v.probe_observations, v.seed)
    if reason:
        return reason, checks
    eval_set = make_eval_set(model, active.model, active.policy.latent_dim, dataset, v)
    dt_s = model.prior.config.dt_s
    # the model maps the action issued d ticks ago to the next state: roll out with that lag
    delay = model.config.action_delay_ticks or v.delay_ticks

    # what a force observer reads under the conditions the rollouts fly (policies with a force
    # input read it, whichever latent they read; the others never do); the vertical force
    # the observer feeds forward is the residual's, which ``dynamics`` cancels as it did in
    # the candidate's training
    observed_n = None
    if policy.force_dim or active.policy.force_dim:
        known_n = model_hover_force_n(model, eval_set.z_model)
        observed_n = clip_to_observer(known_n, observer_limit_n(vehicle))

    def cost(p: PolicyNet, z: torch.Tensor) -> float:  # mean position error [m]
        errors = rollout_errors(
            p, z, dynamics, eval_set, v.eval_ticks, v.crash_distance_m, dt_s, delay, observed_n
        )
        return float(errors.mean())

    candidate_cost = cost(policy, eval_set.z_model)
    active_cost = cost(active.policy, eval_set.z_active)
    checks["cost_m"] = {"candidate": candidate_cost, "active": active_cost}
    allowed = active_cost * (1.0 + v.cost_margin_frac) + v.cost_margin_m
    if not candidate_cost <= allowed:
        return (
            f"cost on learned-model rollouts {candidate_cost:.4f} m exceeds the active "
            f"policy's {active_cost:.4f} m beyond the margin (allowed {allowed:.4f} m)",
            checks,
        )
    reason, checks["calm_cost_m"] = calm_tracking_regression(
        policy, active.policy, vehicle, eval_set, v, delay
    )
    if reason:
        return reason, checks
    if policy.force_dim and active.policy.force_dim:
        reason, checks["observed_force_cost_m"] = observed_force_regression(
            policy, active.policy, vehicle, eval_set, v, delay
        )
        if reason:
            return reason, checks
    deviation = hover_deviation_m(policy, vehicle, v.hover_ticks)
    checks["hover_deviation_m"] = deviation
    if not deviation <= v.hover_max_dev_m:
        return (
            f"hover sanity: deviation {deviation:.3f} m from rest on the prior with z = 0 "
            f"exceeds {v.hover_max_dev_m} m",
            checks,
        )
    if v.behaviour_check:
        candidate = Bundle(active.version + 1, active.version, policy, vehicle, model)
        # The check's own tilt and rate limits: the default safety filter's are looser, and
        # the policy node checks the bundle again against its configured filter on load.
        envelope = BehaviourCheckConfig.for_flight(vehicle)
        try:
            report = behaviour_check(candidate, envelope)
        except BundleError as err:
            return str(err), checks
        checks["behaviour"] = {
            "max_tilt_rad": report.max_tilt_rad,
            "max_body_rate_radps": report.max_body_rate_radps,
            "max_position_error_m": report.max_position_error_m,
        }
    return None, checks
