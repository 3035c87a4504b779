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
