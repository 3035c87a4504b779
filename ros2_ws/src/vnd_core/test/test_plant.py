"""True plant: API contract, agreement with the prior when the extras are off, that it is NOT the
prior otherwise, latency, motor lag, saturation, noise, crashes, and every disturbance pushing the
vehicle the right way."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from vnd_core import so3
from vnd_core.dynamics import NominalModel
from vnd_core.plant import TruePlant
from vnd_core.plant_parts import ROTOR_POSITIONS, PlantConfig
from vnd_core.scenario import (
    PayloadEvent,
    PayloadOffEvent,
    Phase,
    PropDamageEvent,
    PropRepairEvent,
    Scenario,
    WindEvent,
    WindOffEvent,
    load_scenario,
)
from vnd_core.state import GRAVITY_MPS2, OMEGA, POS, QUAT, VEL, hover_state
from vnd_core.vehicle import load_vehicle

QUIET = PlantConfig(
    latency_s=0.0,
    position_noise_m=0.0,
    attitude_noise_rad=0.0,
    velocity_noise_mps=0.0,
    rate_noise_radps=0.0,
)


@pytest.fixture(scope="module")
def vehicle():
    return load_vehicle("agile")


def _hover_cmd(vehicle, batch: int = 1, scale: float = 1.0) -> torch.Tensor:
    return torch.tensor([[vehicle.hover_thrust_n * scale, 0.0, 0.0, 0.0]]).expand(batch, 4)


def _fly_open_loop(plant: TruePlant, action: torch.Tensor, seconds: float) -> torch.Tensor:
    for _ in range(round(seconds / 0.02)):
        plant.step(action)
    return plant.state


def _scenario(*events, duration_s: float = 10.0) -> Scenario:
    return Scenario(name="test", duration_s=duration_s, events=tuple(events))


# ---------------------------------------------------------------------------------- contract


def test_api_shapes_types_and_time(vehicle):
    plant = TruePlant(vehicle, batch_size=3, seed=1)
    assert plant.state.shape == (3, 13) and plant.state.dtype == torch.float32
    assert plant.measure().shape == (3, 13) and plant.measure().dtype == torch.float32
    assert plant.crashed.shape == (3,) and plant.crashed.dtype == torch.bool
    assert plant.disturbance_force_n().shape == (3, 3)
    assert plant.time_s == 0.0 and plant.condition() == "calm"
    out = plant.step(_hover_cmd(vehicle, 3))
    assert out.shape == (3, 13) and plant.time_s == pytest.approx(0.02)
    plant.advance(0.1)
    assert plant.time_s == pytest.approx(0.12)
    with pytest.raises(ValueError, match="multiple of the physics period"):
        plant.advance(0.003)
    with pytest.raises(ValueError, match=r"action must have shape \(3, 4\)"):
        plant.set_command(torch.zeros(2, 4))
    start = hover_state((3,), position_m=(1.0, 2.0, 3.0))
    plant.reset(start)
    assert plant.time_s == 0.0 and torch.equal(plant.state, start)


def test_config_is_validated(vehicle):
    with pytest.raises(ValueError, match="physics_rate_hz must be >= 200"):
        TruePlant(vehicle, config=PlantConfig(physics_rate_hz=100.0))
    with pytest.raises(ValueError, match="latency_s must be >= 0"):
        TruePlant(vehicle, config=PlantConfig(latency_s=-0.01))


def test_hover_command_holds_a_level_hover(vehicle):
    plant = TruePlant(vehicle, batch_size=2, config=QUIET)
    start = hover_state((2,), position_m=(0.0, 0.0, 1.2))
    plant.reset(start)
    state = _fly_open_loop(plant, _hover_cmd(vehicle, 2), 2.0)
    assert torch.allclose(state, start, atol=1e-5)


# ------------------------------------------------------------------------ plant versus prior


def _prior_like(vehicle):
    """The vehicle with the plant's extras switched off: no drag, an (almost) instant motor and
    a rate loop whose gain equals the prior's body-rate bandwidth."""
    tau = vehicle.body_rate_time_constant_s
    return dataclasses.replace(
        vehicle,
        drag_linear_nspm=(0.0, 0.0, 0.0),
        drag_quadratic_ns2pm2=(0.0, 0.0, 0.0),
        motor_time_constant_s=1e-4,
        rate_gain_p=(1.0 / tau,) * 3,
    )


def _divergence_after_one_second(vehicle, config: PlantConfig, batch: int = 8) -> dict:
    """Fly plant and prior with the same random small commands for 50 ticks; max errors."""
    plant = TruePlant(vehicle, batch_size=batch, config=config)
    prior = NominalModel(vehicle)
    start = hover_state((batch,))
    plant.reset(start)
    prior_state = start.double()
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        thrust = vehicle.hover_thrust_n * (1.0 + 0.2 * torch.randn(batch, 1, generator=gen))
        rates = 0.3 * torch.randn(batch, 3, generator=gen)
        action = torch.cat([thrust, rates], dim=-1).double()
        plant_state = plant.step(action).double()
        prior_state = prior.step(prior_state, action)
    diff = plant_state - prior_state
    return {
        "position_m": float(diff[:, POS].norm(dim=-1).max()),
        "velocity_mps": float(diff[:, VEL].norm(dim=-1).max()),
        "attitude_rad": float(
            so3.rotvec_diff(plant_state[:, QUAT], prior_state[:, QUAT]).norm(dim=-1).max()
        ),
        "rates_radps": float(diff[:, OMEGA].norm(dim=-1).max()),
    }


def test_plant_agrees_with_prior_when_extras_are_off(vehicle):
    """Tolerance after 1 s of random small commands: 2 mm, 3 mm/s, 3 mrad, 0.02 rad/s; the rest
    is the plant's first-order integration error, which halves when the physics rate doubles."""
    like = _prior_like(vehicle)
    coarse = _divergence_after_one_second(like, QUIET)
    assert coarse["position_m"] < 2e-3
    assert coarse["velocity_mps"] < 3e-3
    assert coarse["attitude_rad"] < 3e-3
    assert coarse["rates_radps"] < 2e-2
    fine = _divergence_after_one_second(like, dataclasses.replace(QUIET, physics_rate_hz=1000.0))
    for key, value in fine.items():
        assert value < 0.6 * coarse[key], key


def test_default_plant_is_not_the_prior(vehicle):
    """Latency, motor lag, the real rate loop and drag make a clear difference in 1 s."""
    quiet_noise = dataclasses.replace(QUIET, latency_s=0.03)
    errors = _divergence_after_one_second(vehicle, quiet_noise)
    assert errors["position_m"] > 5e-3
    assert errors["attitude_rad"] > 1e-2


# ---------------------------------------------------------------- latency, motors, saturation


def test_command_takes_effect_after_the_latency(vehicle):
    config = dataclasses.replace(QUIET, latency_s=0.03)
    plant = TruePlant(vehicle, config=config)
    hover_per_rotor = vehicle.hover_thrust_n / 4
    plant.step(_hover_cmd(vehicle, scale=1.5))  # t = 0.02 s: still the pre-filled hover command
    assert torch.allclose(plant.motor_thrust_n, torch.full((1, 4), hover_per_rotor))
    assert float(plant.state[0, 9]) == pytest.approx(0.0, abs=1e-9)
    plant.advance(0.02)  # t = 0.04 s: the command has been at the motors for 0.01 s
    assert (plant.motor_thrust_n > hover_per_rotor * 1.05).all()
    assert float(plant.state[0, 9]) > 0.0


def test_motor_thrust_follows_a_first_order_lag(vehicle):
    plant = TruePlant(vehicle, config=QUIET)
    hover_per_rotor = vehicle.hover_thrust_n / 4
    plant.set_command(_hover_cmd(vehicle, scale=2.0))
    tau = vehicle.motor_time_constant_s
    plant.advance(round(tau / 0.002) * 0.002)
    fraction = (plant.motor_thrust_n[0, 0] - hover_per_rotor) / hover_per_rotor
    assert fraction == pytest.approx(1.0 - math.exp(-1.0), abs=0.03)


def test_commands_saturate_per_motor(vehicle):
    plant = TruePlant(vehicle, config=QUIET)
    plant.set_command(torch.tensor([[1000.0, 0.0, 0.0, 0.0]]))
    plant.advance(0.3)
    full = torch.full((1, 4), vehicle.motor_thrust_max_n)
    assert torch.allclose(plant.motor_thrust_n, full, atol=1e-2)
    # An extreme yaw demand saturates half of the motors at zero, the others at most at full.
    plant.reset(hover_state((1,)))
    plant.set_command(torch.tensor([[vehicle.hover_thrust_n, 0.0, 0.0, 100.0]]))
    plant.advance(0.3)
    thrust = plant.motor_thrust_n[0]
    assert thrust.min() >= 0.0 and thrust.max() <= vehicle.motor_thrust_max_n + 1e-6
    assert float(plant.state[0, 12]) <= vehicle.body_rate_max_radps[2] + 1e-6


def test_rate_loop_tracks_the_commanded_body_rate(vehicle):
    plant = TruePlant(vehicle, config=QUIET)
    plant.set_command(torch.tensor([[vehicle.hover_thrust_n, 0.5, -0.4, 0.3]]))
    plant.advance(0.5)
    assert torch.allclose(plant.state[0, OMEGA], torch.tensor([0.5, -0.4, 0.3]), atol=0.02)


# -------------------------------------------------------------------------------- measurement


def test_noise_free_measure_is_the_state_and_noise_has_the_configured_size(vehicle):
    assert torch.equal(TruePlant(vehicle, config=QUIET).measure(), TruePlant(vehicle).state)
    config = PlantConfig()
    plant = TruePlant(vehicle, batch_size=2000, config=config, seed=3)
    error = plant.measure() - plant.state
    assert error[:, POS].std().item() == pytest.approx(config.position_noise_m, rel=0.1)
    assert error[:, VEL].std().item() == pytest.approx(config.velocity_noise_mps, rel=0.1)
    assert error[:, OMEGA].std().item() == pytest.approx(config.rate_noise_radps, rel=0.1)
    attitude = so3.rotvec_diff(plant.measure()[:, QUAT], plant.state[:, QUAT])
    assert attitude.std().item() == pytest.approx(config.attitude_noise_rad, rel=0.1)
    assert torch.allclose(plant.measure()[:, QUAT].norm(dim=-1), torch.ones(2000), atol=1e-6)


def test_seeds_make_runs_reproducible_and_envs_independent(vehicle):
    gusty = _scenario(
        WindEvent("wind", 0.0, "gusts", (1.0, 0.0, 0.0), gust_std_mps=(1.0, 1.0, 0.2))
    )

    def run(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        plant = TruePlant(vehicle, gusty, batch_size=2, seed=seed)
        _fly_open_loop(plant, _hover_cmd(vehicle, 2), 0.2)
        return plant.measure(), plant.state

    (m1, s1), (m2, s2), (m3, _) = run(5), run(5), run(6)
    assert torch.equal(m1, m2) and torch.equal(s1, s2)
    assert not torch.equal(m1, m3)
    assert not torch.allclose(s1[0, VEL], s1[1, VEL])  # each env has its own gusts


# ------------------------------------------------------------------------------ disturbances


@pytest.mark.parametrize("direction", [(1.0, 0.0, 0.0), (0.0, -1.0, 0.0)])
def test_wind_pushes_the_vehicle_downwind(vehicle, direction):
    wind = tuple(4.0 * c for c in direction)
    plant = TruePlant(vehicle, _scenario(WindEvent("wind", 0.0, "constant", wind)), config=QUIET)
    force = plant.disturbance_force_n()[0]
    axis = torch.tensor(direction)
    assert float(force @ axis) > 0.5  # about 1 N of drag at 4 m/s
    assert torch.allclose(plant.wind_velocity_mps()[0], torch.tensor(wind))
    state = _fly_open_loop(plant, _hover_cmd(vehicle), 1.0)
    assert float(state[0, POS] @ axis) > 0.2
    assert float(state[0, VEL] @ axis) > 0.3
    # Drag falls as the vehicle drifts with the air.
    assert float(plant.disturbance_force_n()[0] @ axis) < float(force @ axis)


def test_wind_off_stills_the_air_and_sinusoid_oscillates(vehicle):
    scenario = _scenario(
        WindEvent("wind", 0.0, "sinusoidal", (1.0, 0.0, 0.0), amplitude_mps=(0.0, 2.0, 0.0)),
        WindOffEvent("wind_off", 2.0),
    )
    plant = TruePlant(vehicle, scenario, batch_size=4, config=QUIET)
    ticks_with_wind = round(2.0 / 0.02) - 1  # the last tick ends after the wind_off event
    winds = []
    for _ in range(ticks_with_wind + 2):
        plant.step(_hover_cmd(vehicle, 4))
        winds.append(plant.wind_velocity_mps())
    during = torch.stack(winds[:ticks_with_wind])  # (ticks, B, 3)
    assert torch.allclose(during[..., 0], torch.ones_like(during[..., 0]))
    assert during[..., 1].max() > 1.8 and during[..., 1].min() < -1.8
    assert not torch.allclose(during[0, 0], during[0, 1])  # envs have their own phases
    assert plant.wind_velocity_mps().abs().max() == 0.0
    assert plant.disturbance_force_n().abs().max() == 0.0


def test_gusts_have_the_configured_spread(vehicle):
    event = WindEvent(
        "wind",
        0.0,
        "gusts",
        (2.0, 0.0, 0.0),
        gust_std_mps=(1.5, 0.5, 0.0),
        gust_time_constant_s=0.2,
    )
    plant = TruePlant(vehicle, _scenario(event), batch_size=400, config=QUIET, seed=2)
    plant.advance(0.4)
    wind = plant.wind_velocity_mps()
    assert wind[:, 0].mean().item() == pytest.approx(2.0, abs=0.25)
    assert wind[:, 0].std().item() == pytest.approx(1.5, rel=0.15)
    assert wind[:, 1].std().item() == pytest.approx(0.5, rel=0.15)
    assert wind[:, 2].abs().max() == 0.0


def test_payload_makes_the_vehicle_sink_at_nominal_hover_thrust(vehicle):
    scenario = _scenario(PayloadEvent("payload", 0.0, 0.2), PayloadOffEvent("payload_off", 0.5))
    no_drag = dataclasses.replace(
        vehicle, drag_linear_nspm=(0.0,) * 3, drag_quadratic_ns2pm2=(0.0,) * 3
    )
    plant = TruePlant(no_drag, scenario, config=QUIET)
    force = plant.disturbance_force_n()[0]
    assert torch.allclose(force, torch.tensor([0.0, 0.0, -0.2 * GRAVITY_MPS2]))
    state = _fly_open_loop(plant, _hover_cmd(vehicle), 0.5)
    expected_accel = -0.2 * GRAVITY_MPS2 / (vehicle.mass_kg + 0.2)
    assert float(state[0, 9]) == pytest.approx(expected_accel * 0.5, rel=0.02)
    assert float(state[0, 2]) < 1.0 - 0.1
    sink_rate = float(state[0, 9])
    state = _fly_open_loop(plant, _hover_cmd(vehicle), 0.5)  # released: hover thrust balances
    assert float(state[0, 9]) == pytest.approx(sink_rate, abs=1e-3)
    assert plant.disturbance_force_n().abs().max() == 0.0


def test_payload_forward_of_the_centre_pitches_the_nose_down(vehicle):
    scenario = _scenario(PayloadEvent("payload", 0.0, 0.2, com_offset_m=(0.05, 0.0, 0.0)))
    plant = TruePlant(vehicle, scenario, config=QUIET)
    state = _fly_open_loop(plant, _hover_cmd(vehicle), 0.3)
    nose_world = so3.rotate(state[:, QUAT], torch.tensor([[1.0, 0.0, 0.0]]))[0]
    assert float(nose_world[2]) < -0.02
    assert float(state[0, 11]) > 0.1  # positive pitch rate (FLU: nose down)


@pytest.mark.parametrize("rotor", range(4))
def test_prop_damage_tilts_toward_the_damaged_rotor(vehicle, rotor):
    scenario = _scenario(
        PropDamageEvent("prop_damage", 0.0, rotor, 0.7), PropRepairEvent("prop_repair", 0.3)
    )
    plant = TruePlant(vehicle, scenario, config=QUIET)
    state = _fly_open_loop(plant, _hover_cmd(vehicle), 0.3)
    arms = torch.tensor([[px, py, 0.0] for px, py in ROTOR_POSITIONS])
    heights = so3.rotate(state[:, QUAT].expand(4, 4), arms)[:, 2]
    assert int(heights.argmin()) == rotor and float(heights[rotor]) < -0.01
    assert float(state[0, 9]) < 0.0  # the lost thrust also makes it sink
    # The P rate loop settles at a rate error that balances the torque loss; once repaired,
    # the rates return to the command (zero).
    assert float(state[0, OMEGA].norm()) > 0.3
    plant.advance(0.3)
    assert float(plant.state[0, OMEGA].norm()) < 0.05


# ---------------------------------------------------------------------------------- crashes


def test_crashes_are_detected_sticky_and_held(vehicle):
    plant = TruePlant(vehicle, batch_size=4, config=QUIET)
    start = hover_state((4,), position_m=(0.0, 0.0, 0.3))
    plant.reset(start)
    action = _hover_cmd(vehicle, 4).clone()
    action[0, 0] = 0.0  # falls to the floor
    action[1, 1] = 8.0  # rolls over
    action[2, 0] = float("nan")  # a broken policy
    for _ in range(40):
        plant.step(action)
    assert plant.crashed.tolist() == [True, True, True, False]
    assert torch.isfinite(plant.state).all()
    held = plant.state.clone()
    plant.step(_hover_cmd(vehicle, 4))
    assert plant.crashed[:3].all()
    assert torch.equal(plant.state[:3], held[:3])
    assert plant.state[:3, VEL].abs().max() == 0.0
    assert float(plant.state[3, 2]) == pytest.approx(0.3, abs=1e-4)  # the healthy one flies on


def test_leaving_the_arena_is_a_crash(vehicle):
    config = dataclasses.replace(QUIET, arena_half_m=(1.0, 1.0, 3.0))
    plant = TruePlant(vehicle, batch_size=1, config=config)
    start = hover_state((1,))
    start[0, VEL] = torch.tensor([3.0, 0.0, 0.0])
    plant.reset(start)
    _fly_open_loop(plant, _hover_cmd(vehicle), 0.6)
    assert bool(plant.crashed[0])
    assert float(plant.state[0, 0]) == pytest.approx(1.0, abs=0.1)


# ------------------------------------------------------------------------- scenarios, closed loop


def test_condition_follows_the_phases_and_reset_restarts_the_scenario(vehicle):
    scenario = Scenario(
        name="t",
        duration_s=1.0,
        phases=(Phase("calm", 0.0), Phase("wind_a", 0.4)),
        events=(WindEvent("wind", 0.4, "constant", (3.0, 0.0, 0.0)),),
    )
    plant = TruePlant(vehicle, scenario, config=QUIET)
    plant.advance(0.38)
    assert plant.condition() == "calm" and plant.wind_velocity_mps().abs().max() == 0
    plant.advance(0.04)
    assert plant.condition() == "wind_a" and plant.wind_velocity_mps()[0, 0] == 3.0
    plant.reset(hover_state((1,)))
    assert plant.condition() == "calm" and plant.wind_velocity_mps().abs().max() == 0


def test_closed_loop_through_a_shipped_scenario_stays_bounded(vehicle, tracking_controller):
    """A textbook controller flies 4 s of prop_damage around its damage onset (10 s)."""
    scenario = load_scenario("prop_damage")
    shifted = dataclasses.replace(
        scenario,
        events=tuple(dataclasses.replace(e, at_s=e.at_s - 9.0) for e in scenario.events),
    )
    batch = 4
    plant = TruePlant(vehicle, shifted, batch_size=batch, seed=4)
    plant.reset(shifted.start_state(batch))
    trajectory = shifted.trajectory(batch)
    worst = np.zeros(batch)
    for _ in range(200):
        ref = trajectory.sample(torch.full((batch,), plant.time_s))
        pva = (ref.position_m, ref.velocity_mps, ref.acceleration_mps2)
        plant.step(tracking_controller(plant.measure(), pva, vehicle))
        ref_now = trajectory.sample(torch.full((batch,), plant.time_s)).position_m
        worst = np.maximum(worst, (plant.state[:, POS] - ref_now).norm(dim=-1).numpy())
    assert not plant.crashed.any()
    assert worst.max() < 0.8


def test_single_vehicle_float_path_matches_the_batched_path(vehicle):
    """Batch 1 runs on plain floats for speed; it must be the same physics as the arrays."""
    scenario = _scenario(
        WindEvent("wind", 0.1, "gusts", (2.0, -1.0, 0.0), gust_std_mps=(1.0, 1.0, 0.3)),
        PayloadEvent("payload", 0.3, 0.2, com_offset_m=(0.02, -0.01, -0.04)),
        PropDamageEvent("prop_damage", 0.5, 2, 0.8),
        WindEvent("wind", 0.7, "sinusoidal", (0.0, 1.0, 0.0), amplitude_mps=(1.5, 0.0, 0.5)),
        PayloadOffEvent("payload_off", 0.9),
        PropRepairEvent("prop_repair", 1.1),
        duration_s=2.0,
    )
    fast, batched = TruePlant(vehicle, scenario, seed=9), TruePlant(vehicle, scenario, seed=9)
    batched.fast_single = False
    gen = torch.Generator().manual_seed(0)
    for _ in range(75):
        thrust = vehicle.hover_thrust_n * (1.0 + 0.3 * torch.randn(1, 1, generator=gen))
        action = torch.cat([thrust, 2.0 * torch.randn(1, 3, generator=gen)], dim=-1)
        fast.step(action)
        batched.step(action)
        np.testing.assert_allclose(fast._joined(), batched._joined(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(fast._motor_n, batched._motor_n, rtol=0, atol=1e-9)
    assert torch.equal(fast.measure(), batched.measure())


def test_a_gentle_touchdown_rests_on_the_floor_and_a_hard_one_crashes(vehicle):
    plant = TruePlant(vehicle, batch_size=3, config=QUIET)
    start = hover_state((3,), position_m=(0.0, 0.0, 0.05))
    start[:, VEL] = torch.tensor([[0.3, 0.0, -0.4], [0.0, 0.0, -2.0], [0.0, 0.0, -0.4]])
    pitch_rad = math.radians(40.0)  # the third comes down on one side
    start[2, QUAT] = torch.tensor([math.cos(pitch_rad / 2), 0.0, math.sin(pitch_rad / 2), 0.0])
    plant.reset(start)
    action = _hover_cmd(vehicle, 3).clone()
    action[:, 0] *= 0.8  # sinking
    for _ in range(10):
        plant.step(action)
    assert plant.crashed.tolist() == [False, True, True]
    assert plant.on_floor.tolist() == [True, False, False]
    rest = plant.state[0]
    assert float(rest[2]) == pytest.approx(0.0, abs=1e-9)  # at floor height, not below
    assert float(rest[VEL].abs().max()) == 0.0
    plant.step(_hover_cmd(vehicle, 3) * torch.tensor([1.3, 0.0, 0.0, 0.0]))
    plant.step(_hover_cmd(vehicle, 3) * torch.tensor([1.3, 0.0, 0.0, 0.0]))
    assert float(plant.state[0, 2]) > 0.0 and not bool(plant.on_floor[0])  # it takes off again
