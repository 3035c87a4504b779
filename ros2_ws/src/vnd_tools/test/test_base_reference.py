"""The report's comparison of each condition's last occurrence with the base bundle's error."""

from __future__ import annotations

import pytest
from vnd_tools.base_reference import against_base


def _row(name: str, start_s: float, rmse_m: float | None) -> dict:
    return {"name": name, "start_s": start_s, "rmse_m": rmse_m, "steady_rmse_m": rmse_m}


def test_each_condition_compares_its_last_occurrence_with_the_base_on_that_span():
    flight = [_row("calm", 0, 0.02), _row("wind_a", 20, 0.10), _row("wind_a", 60, 0.03)]
    base = [_row("calm", 0, 0.02), _row("wind_a", 20, 0.11), _row("wind_a", 60, 0.12)]
    rows = {r["phase"]: r for r in against_base(flight, base)}
    assert rows["wind_a"]["start_s"] == 60 and rows["wind_a"]["base_rmse_m"] == 0.12
    assert rows["wind_a"]["reduction"] == pytest.approx(0.75)
    assert rows["calm"]["reduction"] == pytest.approx(0.0)


def test_a_phase_without_samples_is_left_out():
    flight = [_row("calm", 0, None), _row("wind", 5, 0.05)]
    base = [_row("calm", 0, 0.02), _row("wind", 5, 0.0)]
    assert against_base(flight, base) == []


def test_a_flight_from_another_bundle_is_also_compared_with_that_start():
    """The shipped base bundle is always a reference; a flight that started from the shipped
    observer bundle gets that start as a second reference, flown with its observer in the loop
    (it holds the wind the base bundle is blown off by)."""
    from vnd_core.bundle import shipped_bundle_path, shipped_observer_bundle_path
    from vnd_tools.base_reference import reference_phases

    spans = [("calm", 0.0, 3.0), ("wind_large", 3.0, 30.0)]
    meta = {"scenario_arg": "hover_wind_large", "seed": 0}
    from_base = reference_phases(
        {**meta, "launch_args": {"bundle": str(shipped_bundle_path())}}, spans, None
    )
    assert set(from_base) == {"base"}
    from_observer = reference_phases(
        {**meta, "launch_args": {"bundle": str(shipped_observer_bundle_path())}}, spans, None
    )
    assert set(from_observer) == {"base", "start"}
    wind_base, wind_start = from_observer["base"][1], from_observer["start"][1]
    # blind, the observer bundle's dr-trained policy would still drift 4-5 cm in this wind
    assert wind_base.rmse_m > 0.1 and wind_start.rmse_m < 0.025
