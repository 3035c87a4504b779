"""Faults in flight, judged by what the simulated vehicle does (ground truth), not by the modes
the safety filter reports: the stack's flight runtime flies the true plant in simulated time
(vnd_flight.fault_flight) through every odometry fault at hover, at the figure-eight's
peak speed and in a 4 m/s wind."""

from __future__ import annotations

import math

import pytest
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.vehicle import load_vehicle
from vnd_flight.fault_flight import FLIGHT_STATES, FaultFlight, fly_fault
from vnd_flight.safety_config import SafetyConfig

VEHICLE = load_vehicle("agile")
LOSING = ("stop", "freeze_fresh", "freeze_old", "nan")  # odometry gone or unusable
LANDING_RADIUS_M = {"hover": 0.6, "figure8": 1.2, "wind": 1.2}  # from where odometry was lost


@pytest.fixture(scope="module")
def bundle():
    torch.set_num_threads(1)
    return load_bundle(shipped_bundle_path())


@pytest.fixture(scope="module")
def level_hover_excursions(bundle) -> dict[str, float]:
    """How far an ideal cut to a level hover (true attitude, weight-compensating thrust) lets
    the vehicle travel after odometry stops, per flight state."""
    return {
        state: fly_fault(VEHICLE, bundle, FaultFlight(state, "stop", response="level_hover"))[
            0
        ].excursion_m
        for state in FLIGHT_STATES
    }


@pytest.mark.slow
@pytest.mark.parametrize("flight_state", FLIGHT_STATES)
@pytest.mark.parametrize("fault", LOSING)
def test_losing_odometry_levels_and_lands_near_where_it_was_lost(bundle, flight_state, fault):
    outcome, _ = fly_fault(VEHICLE, bundle, FaultFlight(flight_state, fault))
    limit_deg = math.degrees(SafetyConfig().blind_max_tilt_rad) + 5.0
    assert not outcome.crashed, outcome
    assert outcome.landed and outcome.final_mode == "disarmed", outcome
    assert outcome.time_to_level_s <= 0.5, outcome
    assert outcome.max_tilt_after_0_5_s_deg <= limit_deg, outcome
    assert outcome.landing_error_m <= LANDING_RADIUS_M[flight_state], outcome
    assert outcome.ticks_lost == 0, outcome  # the watchdog keeps the 50 Hz grid


@pytest.mark.slow
@pytest.mark.parametrize("flight_state", FLIGHT_STATES)
def test_odometry_lost_while_a_new_bundle_goes_live_still_levels_and_lands(bundle, flight_state):
    outcome, _ = fly_fault(VEHICLE, bundle, FaultFlight(flight_state, "stop", swap_at_fault=True))
    assert not outcome.crashed, outcome
    assert outcome.landed and outcome.final_mode == "disarmed", outcome
    assert outcome.time_to_level_s <= 0.5, outcome
    assert outcome.landing_error_m <= LANDING_RADIUS_M[flight_state], outcome


@pytest.mark.slow
@pytest.mark.parametrize("flight_state", FLIGHT_STATES)
def test_blind_landing_travels_no_further_than_an_ideal_level_hover(
    bundle, flight_state, level_hover_excursions
):
    outcome, _ = fly_fault(VEHICLE, bundle, FaultFlight(flight_state, "stop"))
    assert outcome.excursion_m <= level_hover_excursions[flight_state] + 0.2, (
        outcome,
        level_hover_excursions,
    )


@pytest.mark.slow
@pytest.mark.parametrize("flight_state", FLIGHT_STATES)
def test_a_one_metre_odometry_jump_is_caught_and_flown_out_without_a_crash(bundle, flight_state):
    outcome, _ = fly_fault(VEHICLE, bundle, FaultFlight(flight_state, "jump"))
    assert not outcome.crashed, outcome
    assert outcome.modes[0] != "policy" or "fallback_hold" in outcome.modes, outcome
    # landed, holding, or the policy flying again (in the re-origined frame) inside the fence
    assert outcome.landed or outcome.holding or outcome.final_mode == "policy", outcome
    assert outcome.inside_geofence, outcome
    # the policy takes over again on a reference that rejoins from where the vehicle is: no
    # 1 m step response at the edge of the envelope
    assert outcome.max_tilt_after_0_5_s_deg < 32.0, outcome


@pytest.mark.slow
@pytest.mark.parametrize("flight_state", FLIGHT_STATES)
def test_half_rate_odometry_keeps_the_policy_flying(bundle, flight_state):
    outcome, _ = fly_fault(VEHICLE, bundle, FaultFlight(flight_state, "half_rate"))
    assert not outcome.crashed and outcome.modes == ("policy",), outcome
    assert outcome.ticks_lost == 0, outcome


@pytest.mark.slow
def test_hover_stop_lands_on_every_seed(bundle):
    for seed in (1, 2):
        outcome, _ = fly_fault(VEHICLE, bundle, FaultFlight("hover", "stop", seed=seed))
        assert not outcome.crashed and outcome.landed, (seed, outcome)
        assert outcome.landing_error_m <= LANDING_RADIUS_M["hover"], (seed, outcome)
