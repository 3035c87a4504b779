"""Scenario YAML: the shipped set, phase lookup, start states, and errors that name the field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from vnd_core.config_io import ConfigError, config_dir
from vnd_core.scenario import (
    PayloadEvent,
    PropDamageEvent,
    PropRepairEvent,
    WindEvent,
    WindOffEvent,
    calm_scenario,
    load_scenario,
)
from vnd_core.state import POS, QUAT, VEL

REQUIRED = (
    "hover_calm",
    "figure8_calm",
    "hover_wind_large",
    "figure8_wind_mixed",
    "recurring_wind",
    "payload",
    "prop_damage",
)


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _base() -> dict:
    return {
        "name": "t",
        "duration_s": 10.0,
        "reference": {"kind": "hover", "center_m": [0.0, 0.0, 1.0]},
        "phases": [{"name": "calm", "start_s": 0.0}, {"name": "wind_a", "start_s": 5.0}],
        "events": [{"at_s": 5.0, "type": "wind", "kind": "constant", "velocity_mps": [3, 0, 0]}],
    }


def test_every_required_scenario_loads_with_condition_phases():
    shipped = {p.stem for p in (config_dir() / "scenarios").glob("*.yaml")}
    assert set(REQUIRED) <= shipped
    for name in shipped:
        scenario = load_scenario(name)
        assert scenario.name == name
        assert scenario.phases[0].start_s == 0.0
        center_z = scenario.reference.center_m[2]
        assert 1.0 <= center_z <= 1.5


def test_figure_eights_have_the_agreed_shape():
    for name in ("figure8_calm", "figure8_wind_mixed", "recurring_wind", "prop_damage"):
        ref = load_scenario(name).reference
        assert ref.kind == "figure8" and ref.amplitude_m == pytest.approx(1.2)
        assert 1.5 <= ref.peak_speed_mps() <= 2.0


def test_recurring_wind_schedule():
    s = load_scenario("recurring_wind")
    assert [p.name for p in s.phases] == ["calm", "wind_a", "calm", "wind_b", "wind_a"]
    assert s.duration_s <= 215.0  # make demo: <= 4 minutes with start-up and shutdown
    winds = [e for e in s.events if isinstance(e, WindEvent)]
    by_phase = {s.phase_at(e.at_s): e.velocity_mps for e in winds}
    assert set(by_phase) == {"wind_a", "wind_b"}
    first_a, b, second_a = (e.velocity_mps for e in winds)
    assert first_a == second_a
    difference = math.dist(first_a, b)
    assert difference > 0.5 * math.hypot(*first_a)  # clearly different conditions
    calm_again = s.phases[2].start_s
    assert any(isinstance(e, WindOffEvent) and e.at_s == calm_again for e in s.events)


def test_disturbance_scenarios_add_and_remove_their_disturbance():
    payload = load_scenario("payload")
    kinds = [type(e) for e in payload.events]
    assert kinds[0] is PayloadEvent and kinds[-1].__name__ == "PayloadOffEvent"
    assert payload.phase_at(payload.events[0].at_s + 1.0) == "payload"
    damage = load_scenario("prop_damage")
    assert isinstance(damage.events[0], PropDamageEvent) and damage.events[0].efficiency < 1.0
    assert isinstance(damage.events[-1], PropRepairEvent)
    assert damage.phase_at(damage.events[0].at_s + 1.0) == "damage"
    mixed = load_scenario("figure8_wind_mixed")
    assert {e.kind for e in mixed.events if isinstance(e, WindEvent)} == {
        "constant",
        "gusts",
        "sinusoidal",
    }
    wind = load_scenario("hover_wind_large").events[0]
    assert isinstance(wind, WindEvent) and 4.0 <= math.hypot(*wind.velocity_mps) <= 6.0


def test_phase_at_boundaries():
    s = load_scenario("recurring_wind")
    assert s.phase_at(0.0) == "calm"
    assert s.phase_at(19.99) == "calm"
    assert s.phase_at(20.0) == "wind_a"
    assert s.phase_at(100.0) == "wind_b"
    assert s.phase_at(169.0) == "wind_b"
    assert s.phase_at(209.0) == "wind_a"
    assert s.phase_names() == ["calm", "wind_a", "wind_b"]
    assert s.phase_spans()[1] == ("wind_a", 20.0, 60.0)
    assert s.phase_spans()[-1] == ("wind_a", 170.0, 210.0)


def test_start_state_sits_on_the_reference():
    s = load_scenario("figure8_calm")
    state = s.start_state(3)
    sample = s.trajectory(3).sample(torch.zeros(3))
    assert state.shape == (3, 13)
    assert torch.allclose(state[:, POS], sample.position_m)
    assert torch.allclose(state[:, VEL], sample.velocity_mps)
    assert torch.allclose(state[:, QUAT], torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(3, 4))
    assert s.start_state(1, match_velocity=False)[0, VEL].abs().max() == 0


def test_calm_scenario_has_no_events():
    s = calm_scenario(5.0)
    assert s.events == () and s.phase_at(4.0) == "calm"


def test_a_valid_file_round_trips(tmp_path):
    s = load_scenario(_write(tmp_path, _base()))
    assert s.events[0] == WindEvent("wind", 5.0, "constant", (3.0, 0.0, 0.0))


def _broken(**edits):
    data = _base()
    for path, value in edits.items():
        *parents, key = path.split("__")
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        index = int(key) if key.isdigit() else key
        if value is _DELETE:
            del node[index]
        else:
            node[index] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (_broken(duration_s=_DELETE), "missing field 'duration_s'"),
        (_broken(duration_s="long"), "duration_s: expected a number"),
        (_broken(colour="red"), "unknown field 'colour'"),
        (_broken(duration_s=-1.0), "duration_s must be > 0"),
        (_broken(reference__kind="spiral"), "reference: kind must be one of"),
        (_broken(reference__period_s=0.0), "reference: period_s must be > 0"),
        (_broken(phases__0__start_s=1.0), "phases[0].start_s must be 0"),
        (_broken(phases__1__start_s=20.0), "phases[1].start_s must increase"),
        (_broken(phases__1__name=5), "phases[1]: name: expected a string"),
        (_broken(events__0__type="tornado"), "events[0]: type: must be one of"),
        (_broken(events__0__kind="breeze"), "events[0]: kind must be one of"),
        (_broken(events__0__velocity_mps=[1, 2]), "events[0]: velocity_mps: expected 3"),
        (_broken(events__0__speed=3.0), "events[0]: unknown field 'speed'"),
        (_broken(events__0__at_s=_DELETE), "events[0]: missing field 'at_s'"),
        (_broken(events__0__at_s=11.0), "events[0].at_s must be within"),
        (
            _broken(events__0={"at_s": 1.0, "type": "prop_damage", "rotor": 4, "efficiency": 1}),
            "events[0]: rotor must be 0-3",
        ),
        (
            _broken(events__0={"at_s": 1.0, "type": "prop_damage", "rotor": 1, "efficiency": 2}),
            "events[0]: efficiency must be within 0-1",
        ),
        (
            _broken(events__0={"at_s": 1.0, "type": "payload", "mass_kg": -0.1}),
            "events[0]: mass_kg must be > 0",
        ),
        (
            _broken(
                events__0={"at_s": 1.0, "type": "wind", "kind": "gusts", "velocity_mps": [0] * 3}
            ),
            "events[0]: gust_std_mps",
        ),
    ],
)
def test_malformed_scenario_names_file_and_field(tmp_path, data, needle):
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    text = str(info.value)
    assert text.startswith(str(path)), text
    assert needle in text, text


def test_unordered_events_are_refused(tmp_path):
    data = _base()
    data["events"] = [
        {"at_s": 6.0, "type": "wind_off"},
        {"at_s": 5.0, "type": "wind", "kind": "constant", "velocity_mps": [1, 0, 0]},
    ]
    with pytest.raises(ConfigError, match="events must be ordered by at_s"):
        load_scenario(_write(tmp_path, data))


def test_unknown_scenario_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown scenario 'nope'.*hover_calm"):
        load_scenario("nope")
