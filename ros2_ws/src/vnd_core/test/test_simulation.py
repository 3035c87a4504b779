"""SimulatedVehicle: the stand before the start, drift-free pacing, real-time factor, stall
slipping, scenario phases through to 'done', and command handling."""

from __future__ import annotations

import numpy as np
import pytest
from vnd_core.plant_parts import PlantConfig
from vnd_core.scenario import Phase, Scenario, WindEvent, calm_scenario
from vnd_core.simulation import (
    CONDITION_DONE,
    CONDITION_WAITING,
    SimulatedVehicle,
    SimulationConfig,
)
from vnd_core.state import POS, VEL
from vnd_core.vehicle import load_vehicle

NS = 1_000_000_000
T0_NS = 1_700_000_000 * NS  # an epoch-like clock value, to catch precision loss
VEHICLE = load_vehicle("agile")
HOVER = np.array([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0])


def windy_scenario() -> Scenario:
    """1 s calm, then 4 m/s wind along +x until the end at 2 s."""
    return Scenario(
        name="test_wind",
        duration_s=2.0,
        phases=(Phase("calm", 0.0), Phase("wind_a", 1.0)),
        events=(WindEvent("wind", 1.0, "constant", (4.0, 0.0, 0.0)),),
    )


def fly(sim: SimulatedVehicle, start_ns: int, duration_s: float, period_s: float = 0.01):
    """Advance in ``period_s`` steps with +-3 ms jitter, re-sending ``HOVER`` every tick."""
    rng = np.random.default_rng(0)
    samples = []
    n_ticks = round(duration_s / period_s)
    for i in range(1, n_ticks + 1):
        jitter_ns = int(rng.uniform(-3e-3, 3e-3) * NS) if i < n_ticks else 0
        now_ns = start_ns + round(i * period_s * NS) + jitter_ns
        samples += sim.advance_to(now_ns)
        sim.command(HOVER, now_ns)
    return samples


def test_stand_holds_still_until_the_first_command():
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), seed=1)
    samples = [s for k in range(50) for s in sim.advance_to(T0_NS + k * 5_000_000)]
    assert not sim.started and sim.time_s == 0.0
    assert len(samples) == 25  # 0.245 s of clock at 100 Hz, the first at once
    assert all(s.condition == CONDITION_WAITING for s in samples)
    stamps = np.array([s.stamp_ns for s in samples])
    assert (np.diff(stamps) == 10_000_000).all()
    heights = np.array([s.truth[2] for s in samples])
    np.testing.assert_allclose(heights, 1.0, atol=1e-6)  # calm_scenario hovers at 1 m
    noise = np.array([s.measured[POS] - s.truth[POS] for s in samples])
    assert 0.0 < noise.std() < 0.005  # mocap noise is on, and small


def test_pacing_is_drift_free_and_stamps_follow_simulated_time():
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), seed=2)
    sim.advance_to(T0_NS - 3_000_000)  # one stand sample before the start
    assert sim.command(HOVER, T0_NS)
    samples = fly(sim, T0_NS, 2.0)
    assert sim.time_s == pytest.approx(2.0)
    assert len(samples) == 201  # t = 0, 0.01, ..., 2.0
    stamps = np.array([s.stamp_ns for s in samples])
    np.testing.assert_array_equal(stamps - T0_NS, np.arange(201) * 10_000_000)
    times = np.array([s.time_s for s in samples])
    np.testing.assert_allclose(times, np.arange(201) * 0.01, atol=1e-9)
    # Hover thrust in still air holds the height and the vehicle stays at rest.
    final = samples[-1].truth
    assert abs(final[2] - 1.0) < 0.02
    assert np.linalg.norm(final[VEL]) < 0.05


def test_real_time_factor_runs_simulated_time_faster():
    config = SimulationConfig(real_time_factor=2.0)
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), config, seed=3)
    sim.command(HOVER, T0_NS)
    samples = fly(sim, T0_NS, 1.0)
    assert sim.time_s == pytest.approx(2.0)
    assert len(samples) == 201
    assert (np.diff([s.stamp_ns for s in samples]) == 5_000_000).all()


def test_thrust_changes_height_through_the_latency():
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), seed=4)
    sim.command(HOVER * 1.2, T0_NS)
    sim.advance_to(T0_NS + 20_000_000)  # within the 30 ms latency: still hovering
    assert abs(sim.plant.state[0, 9].item()) < 1e-3
    for k in range(1, 11):
        sim.advance_to(T0_NS + k * 50_000_000)
    assert sim.plant.state[0, 2].item() > 1.1  # 0.2 g up for most of 0.5 s


def test_a_stall_slips_instead_of_bursting():
    config = SimulationConfig(max_catch_up_s=0.1)
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), config, seed=5)
    sim.command(HOVER, T0_NS)
    samples = sim.advance_to(T0_NS + 1 * NS)  # a 1 s stall
    assert sim.time_s == pytest.approx(0.1)
    assert len(samples) == 11
    assert sim.slipped_s == pytest.approx(0.9)
    later = sim.advance_to(T0_NS + 1 * NS + 50_000_000)  # paced normally afterwards
    assert sim.time_s == pytest.approx(0.15)
    assert later[0].stamp_ns > samples[-1].stamp_ns
    assert later[-1].stamp_ns <= T0_NS + 1 * NS + 50_000_000


def test_scenario_phases_events_and_done():
    sim = SimulatedVehicle(VEHICLE, windy_scenario(), seed=6)
    sim.command(HOVER, T0_NS)
    samples = fly(sim, T0_NS, 3.0)
    by_time = {round(s.time_s, 2): s for s in samples}
    assert by_time[0.5].condition == "calm"
    np.testing.assert_allclose(by_time[0.5].disturbance_n, 0.0)
    assert by_time[1.5].condition == "wind_a"
    assert by_time[1.5].disturbance_n[0] > 0.3  # drag of a 4 m/s +x wind pushes along +x
    assert by_time[1.99].condition == "wind_a" and by_time[2.0].condition == CONDITION_DONE
    assert sim.done and sim.condition == CONDITION_DONE
    # After the end the vehicle keeps flying (drifting downwind under plain hover thrust).
    assert sim.time_s == pytest.approx(3.0)
    assert by_time[3.0].truth[0] > by_time[2.0].truth[0]


def test_invalid_commands_are_refused_and_do_not_start():
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), seed=7)
    assert not sim.command(np.array([np.nan, 0.0, 0.0, 0.0]), T0_NS)
    assert not sim.command(np.array([7.0, 0.0, 0.0]), T0_NS)
    assert not sim.started and sim.commands_applied == 0


def test_start_without_a_command_and_config_errors():
    config = SimulationConfig(start_on_command=False)
    sim = SimulatedVehicle(VEHICLE, calm_scenario(5.0), config, seed=8)
    assert sim.advance_to(T0_NS)[0].condition == "calm"
    assert sim.started
    with pytest.raises(ValueError, match="pose_rate_hz=300"):
        SimulatedVehicle(VEHICLE, calm_scenario(), SimulationConfig(pose_rate_hz=300.0))
    with pytest.raises(ValueError, match="real_time_factor"):
        SimulatedVehicle(VEHICLE, calm_scenario(), SimulationConfig(real_time_factor=0.0))
    with pytest.raises(ValueError, match="physics_rate_hz"):
        SimulatedVehicle(VEHICLE, calm_scenario(), plant_config=PlantConfig(physics_rate_hz=100))
