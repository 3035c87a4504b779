"""The observer's compensation, judged on the true plant: a weak rotor's torque leaves a rate
offset under the proportional rate loop; the observer reads it, reads about none in calm air,
and the compensated commands hold the hover where the same controller uncompensated is pushed
off it. A payload's weight is answered by the thrust feed-forward: the same controller holds
its height with it, also when a learned model explains the weight, and sags without."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vnd_core.force_observer import ForceObserver, ObserverConfig
from vnd_core.plant import TruePlant
from vnd_core.scenario import scenario_from_mapping
from vnd_core.state import OMEGA, POS, QUAT
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.components import compensated_components

VEHICLE = load_vehicle("agile")
HOVER_M = (0.0, 0.0, 1.0)
SECONDS = 6.0


def hover_scenario(efficiency: float, payload_kg: float = 0.0):
    """Hover at 1 m; rotor 0 at ``efficiency`` from 1 s on (1.0: no damage) and a payload of
    ``payload_kg`` under the centre of mass from 1 s on (0: none)."""
    events = []
    if efficiency < 1.0:
        events.append({"at_s": 1.0, "type": "prop_damage", "rotor": 0, "efficiency": efficiency})
    if payload_kg > 0.0:
        events.append({"at_s": 1.0, "type": "payload", "mass_kg": payload_kg})
    return scenario_from_mapping(
        {
            "name": "hover_weak_rotor",
            "duration_s": SECONDS,
            "reference": {"kind": "hover", "center_m": list(HOVER_M)},
            "phases": [{"name": "calm", "start_s": 0.0}],
            "events": events,
        },
        "test",
    )


def hover(
    controller,
    efficiency: float,
    compensate: bool,
    payload_kg: float = 0.0,
) -> dict[str, np.ndarray]:
    """Hold the hover on the true plant for ``SECONDS``; per tick: the position error (N,) in
    m, the height error (N,) in m, the observer's rate offset (N, 3), the true one (N, 3): the
    body rates the vehicle turns at beyond the rates it was sent, how far it turns beyond
    the rates the controller asked for (N, 3), and the force a policy would read (N, 3)."""
    scenario = hover_scenario(efficiency, payload_kg)
    plant = TruePlant(VEHICLE, scenario, 1, seed=0)
    plant.reset(scenario.start_state(1))
    observer = ForceObserver(VEHICLE, ObserverConfig())
    target = (torch.tensor([HOVER_M]), torch.zeros(1, 3), torch.zeros(1, 3))
    keys = ("error_m", "height_error_m", "offset_radps", "true_offset_radps")
    out: dict[str, list] = {key: [] for key in keys}
    out["beyond_asked_radps"] = []
    out["read_force_n"] = []
    for _ in range(round(SECONDS / 0.02)):
        measured = plant.measure()
        observer.observe(measured[0].double().numpy())
        action = controller(measured.double(), target, VEHICLE)[0].numpy()
        sent = (
            observer.compensate(action, measured[0, QUAT].double().numpy())
            if compensate
            else action
        )
        state = plant.step(torch.from_numpy(sent).float()[None])
        observer.command(sent)
        out["error_m"].append(float((state[0, POS] - torch.tensor(HOVER_M)).norm()))
        out["height_error_m"].append(float(state[0, POS][2]) - HOVER_M[2])
        out["offset_radps"].append(observer.rate_offset_radps.copy())
        rates = state[0, OMEGA].double().numpy()
        out["true_offset_radps"].append(rates - sent[1:])
        out["beyond_asked_radps"].append(rates - action[1:])
        out["read_force_n"].append(observer.policy_force_n())
    return {key: np.array(value) for key, value in out.items()}


def test_the_observer_reads_a_weak_rotors_rate_offset_and_none_in_calm_air(tracking_controller):
    calm = hover(tracking_controller, 1.0, compensate=False)
    damaged = hover(tracking_controller, 0.75, compensate=False)
    assert np.abs(calm["offset_radps"][-100:]).max() < 0.03
    truth = damaged["true_offset_radps"][-50:].mean(0)
    assert np.linalg.norm(truth) > 1.0  # the weak rotor turns the vehicle by over 1 rad/s
    np.testing.assert_allclose(damaged["offset_radps"][-50:].mean(0), truth, atol=0.05)


def test_compensated_commands_hold_the_hover_with_a_weak_rotor(tracking_controller):
    """Ground truth: the same controller, compensated, turns at the rates it asks for and
    stays near the hover point; without the compensation the torque pushes it off."""
    settled = slice(-100, None)
    plain = hover(tracking_controller, 0.75, compensate=False)
    compensated = hover(tracking_controller, 0.75, compensate=True)
    assert np.abs(plain["beyond_asked_radps"][-50:].mean(0)).max() > 1.0
    assert np.abs(compensated["beyond_asked_radps"][-50:].mean(0)).max() < 0.05
    assert compensated["error_m"][settled].mean() < 0.4 * plain["error_m"][settled].mean()
    calm = hover(tracking_controller, 1.0, compensate=False)["error_m"][settled].mean()
    calm_compensated = hover(tracking_controller, 1.0, compensate=True)["error_m"][settled]
    assert calm_compensated.mean() < calm + 0.002


def test_the_thrust_feedforward_holds_a_payloads_weight(tracking_controller):
    """Ground truth: with a 0.2 kg payload (a quarter of the vehicle's mass) the controller,
    which has no integral action, sags by centimetres; compensated, the observer's vertical
    force goes out as thrust and the vehicle holds its height within millimetres."""
    settled = slice(-100, None)
    plain = hover(tracking_controller, 1.0, compensate=False, payload_kg=0.2)
    compensated = hover(tracking_controller, 1.0, compensate=True, payload_kg=0.2)
    sag_m = -plain["height_error_m"][settled].mean()
    assert sag_m > 0.02
    assert abs(compensated["height_error_m"][settled].mean()) < 0.15 * sag_m
    assert compensated["error_m"][settled].mean() < 0.005


def test_compensation_does_not_feed_back_into_the_estimate(tracking_controller):
    """The estimate compares the rates with the commands sent: compensating the commands
    leaves it where it was."""
    plain = hover(tracking_controller, 0.75, compensate=False)["offset_radps"]
    compensated = hover(tracking_controller, 0.75, compensate=True)["offset_radps"]
    np.testing.assert_allclose(compensated[-50:].mean(0), plain[-50:].mean(0), atol=0.05)


def test_a_force_input_policy_trains_without_the_body_rate_residual():
    assert compensated_components("translational_rates", 3) == "translational"
    assert compensated_components("translational_rates", 0) == "translational_rates"
    assert compensated_components("translational", 3) == "translational"
    with pytest.raises(ValueError, match="rate compensation"):
        compensated_components("full", 3)
