"""The force input of a policy that reads one: the observer runs only while the policy flies
the vehicle in the air, its update waits for after the command, and the force reaches the
policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel
from vnd_core.force_observer import ObserverConfig
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.reference import ReferenceSpec
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.features import RES_POS, RES_VEL
from vnd_core.vnd.model import VNDModel, VNDModelConfig
from vnd_core.wire import Mode
from vnd_flight.controller import LatentSample, PolicyController
from vnd_flight.force_input import ForceInput
from vnd_flight.safety_config import SafetyConfig

PERIOD_NS = 20_000_000
T0_NS = 1_000_000_000_000
# the test plant applies each command at once: the observer is told so
INSTANT = ObserverConfig(latency_s=0.0, motor_time_constant_s=0.0)


@pytest.fixture(scope="module")
def vehicle():
    return load_vehicle("agile")


def force_bundle(vehicle) -> Bundle:
    torch.manual_seed(0)
    policy = PolicyNet(vehicle, PolicyConfig(hidden=(16, 16), force_dim=3)).eval()
    with torch.no_grad():  # trained weights on the force input
        policy.net[0].weight[:, -policy.condition_dim :].normal_(0.0, 0.5)
    return Bundle(1, 0, policy, vehicle)


def hover_state(z_m: float = 1.0) -> np.ndarray:
    state = np.zeros(13)
    state[2], state[3] = z_m, 1.0
    return state


def fly_in_force(vehicle, controller, force_n, ticks, start_z_m=1.0, bundle=None, latent=False):
    """Close the loop on the prior plus a constant world force; the last tick's record.
    ``latent``: a valid latent of the bundle's encoder arrives every tick."""
    prior = NominalModel(vehicle)
    accel = torch.tensor(force_n, dtype=torch.float64) / vehicle.mass_kg
    dt_s = prior.config.dt_s
    state = torch.from_numpy(hover_state(start_z_m))[None]
    bundle = bundle or force_bundle(vehicle)
    nz = bundle.policy.latent_dim
    record = None
    for k in range(ticks):
        now = T0_NS + k * PERIOD_NS
        sample = (
            LatentSample(now, bundle.version, True, np.zeros(nz, np.float32)) if latent else None
        )
        record = controller.tick(now, state[0].numpy(), now, bundle, sample)
        controller.after_publish()
        with torch.no_grad():
            state = prior(state, torch.from_numpy(record.action)[None])
        state[0, 7:10] += dt_s * accel
        state[0, 0:3] += 0.5 * dt_s * dt_s * accel
    return record


def test_the_observed_force_reaches_the_policy(vehicle):
    controller = PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(kind="hover"))
    controller.force_input = ForceInput(vehicle, config=INSTANT)
    force_n = [0.6, -0.3, 0.2]
    record = fly_in_force(vehicle, controller, force_n, 100)  # 2 s: seven filter time constants
    assert controller.mode == Mode.POLICY
    np.testing.assert_allclose(controller.force_input.force_n(), force_n, atol=0.03)
    # the tick record (vnd/force_input) carries the observer's estimate
    np.testing.assert_allclose(record.force_n, force_n, atol=0.03)


def test_the_record_holds_zero_force_until_the_observer_runs(vehicle):
    controller = PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(kind="hover"))
    record = fly_in_force(vehicle, controller, [0.6, 0.0, 0.0], 1)
    np.testing.assert_array_equal(record.force_n, np.zeros(3))


def test_the_observer_runs_only_while_the_policy_flies_in_the_air(vehicle):
    force_input = ForceInput(vehicle, min_altitude_m=0.15, config=INSTANT)
    command = np.array([vehicle.hover_thrust_n, 0.0, 0.0, 0.0])
    for _ in range(3):  # on the floor: the ground's reaction must not read as a force
        force_input.record(Mode.POLICY, hover_state(0.05), True, command)
        force_input.update()
    assert force_input.force_n() is None
    for _ in range(3):
        force_input.record(Mode.POLICY, hover_state(1.0), True, command)
        force_input.update()
    assert force_input.force_n() is not None
    force_input.record(Mode.FALLBACK_HOLD, hover_state(1.0), True, command)
    assert force_input.force_n() is None  # a fallback flies: the observer starts over


def test_a_bundle_without_a_force_input_drops_the_observer(vehicle):
    """Swapping to a bundle without a force input drops the observer, so a later force bundle
    starts on fresh measurements instead of pairing one from before the swap."""
    controller = PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(kind="hover"))
    fly_in_force(vehicle, controller, [0.5, 0.0, 0.0], 20)
    assert controller.force_input is not None
    plain = Bundle(2, 0, PolicyNet(vehicle, PolicyConfig(hidden=(16, 16))).eval(), vehicle)
    now = T0_NS + 21 * PERIOD_NS
    record = controller.tick(now, hover_state(), now, plain, None)
    controller.after_publish()
    assert controller.force_input is None
    assert record.force_n is None  # no vnd/force_input for a policy that reads no force


def model_force_bundle(vehicle) -> Bundle:
    """A force-input bundle with a learned model whose residual changes with the motion (random
    output weights: what it predicts does not matter here, only that the observer uses it).
    Its vertical outputs stay zero: the thrust feed-forward would fly a random lift."""
    bundle = force_bundle(vehicle)
    model = VNDModel(vehicle, VNDModelConfig(latent_dim=bundle.policy.latent_dim))
    with torch.no_grad():
        model.residual.head[-1].weight.normal_(0.0, 1.0)
        for vertical in (RES_POS.start + 2, RES_VEL.start + 2):
            model.residual.head[-1].weight[vertical] = 0.0
    return Bundle(bundle.version, 0, bundle.policy, vehicle, model=model)


def test_the_observer_reads_the_same_force_whatever_the_latent_and_the_model(vehicle):
    """The policy trained reading the force the prior does not explain, so the observer
    predicts with the prior alone: the same flight with and without a valid latent, and with a
    bundle without a model, reads the same force."""
    bundle = model_force_bundle(vehicle)
    estimates = []
    for flown, latent in ((bundle, False), (bundle, True), (force_bundle(vehicle), False)):
        controller = PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(kind="hover"))
        controller.force_input = ForceInput(vehicle, config=INSTANT)
        fly_in_force(vehicle, controller, [0.6, 0.0, 0.0], 60, bundle=flown, latent=latent)
        estimates.append(controller.force_input.force_n())
    assert estimates[0][0] > 0.3  # the push is read
    np.testing.assert_allclose(estimates[1], estimates[0], atol=1e-9)
    np.testing.assert_allclose(estimates[2], estimates[0], atol=0.02)  # the same push


def test_commands_go_out_rate_compensated_and_the_policy_keeps_its_own(vehicle):
    """While the observer runs, the command sent (the record, what the node publishes and the
    replay logs) has the observer's rate offset taken off its body rates and its vertical
    force added to its thrust; the policy's history keeps the command the safety filter
    passed. Under a fallback nothing is compensated."""
    controller = PolicyController.create(vehicle, SafetyConfig(), ReferenceSpec(kind="hover"))
    controller.force_input = ForceInput(vehicle, config=INSTANT)
    bundle = force_bundle(vehicle)
    fly_in_force(vehicle, controller, [0.0, 0.0, -0.5], 20, bundle=bundle)  # a payload
    offset = np.array([0.3, -0.2, 0.1])
    controller.force_input.observer.rate_offset_radps = offset.copy()
    now = T0_NS + 21 * PERIOD_NS
    record = controller.tick(now, hover_state(), now, bundle, None)
    assert record.mode == Mode.POLICY
    kept = controller._runner.prev_actions[0]
    np.testing.assert_allclose(record.action[1:], kept[1:] - offset)
    # level: the weight the observer reads goes out as thrust on top of the policy's
    assert record.force_n is not None and record.force_n[2] < -0.2
    assert record.action[0] == pytest.approx(kept[0] - record.force_n[2])
    controller.after_publish()
    # the observer was told the command sent: its history holds the compensated rates
    np.testing.assert_allclose(controller.force_input.observer._commands[0], record.action)


def test_a_fallback_command_goes_out_uncompensated(vehicle):
    force_input = ForceInput(vehicle, config=INSTANT)
    command = np.array([vehicle.hover_thrust_n, 0.1, 0.0, 0.0])
    for _ in range(3):
        force_input.record(Mode.POLICY, hover_state(1.0), True, command)
        force_input.update()
    force_input.observer.rate_offset_radps = np.array([0.5, 0.0, 0.0])
    level = hover_state(1.0)
    np.testing.assert_allclose(
        force_input.compensate(Mode.POLICY, command, level)[1:], [-0.4, 0, 0]
    )
    sent = force_input.compensate(Mode.FALLBACK_LAND, command, level)
    np.testing.assert_array_equal(sent, command)
