"""Vehicle YAML: the shipped vehicles load with sane physics; malformed files name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from vnd_core.config_io import ConfigError, config_dir
from vnd_core.vehicle import VehicleParams, load_vehicle


def _write(tmp_path: Path, data: dict, name: str = "broken.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def agile_data() -> dict:
    return yaml.safe_load((config_dir() / "vehicles" / "agile.yaml").read_text())


def test_agile_is_an_agilicious_class_vehicle():
    v = load_vehicle("agile")
    assert isinstance(v, VehicleParams)
    assert 0.6 < v.mass_kg < 0.9
    assert 3.5 <= v.thrust_to_weight <= 4.5
    assert v.motor_thrust_max_n == pytest.approx(v.thrust_max_n / 4)
    assert v.hover_thrust_n == pytest.approx(v.mass_kg * 9.81)


def test_small_vehicle_is_about_200_grams():
    v = load_vehicle("small")
    assert 0.15 < v.mass_kg < 0.25
    assert 2.0 <= v.thrust_to_weight <= 4.5


def test_every_shipped_vehicle_loads():
    names = sorted(p.stem for p in (config_dir() / "vehicles").glob("*.yaml"))
    assert {"agile", "small"} <= set(names)
    for name in names:
        assert load_vehicle(name).name == name


def test_load_by_path(tmp_path, agile_data):
    path = _write(tmp_path, agile_data, "copy.yaml")
    assert load_vehicle(path) == load_vehicle("agile")


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"mass_kg": None}, "mass_kg", "missing field"),
        ({"mass_kg": "heavy"}, "mass_kg", "expected a number"),
        ({"inertia_kgm2": [0.1, 0.2]}, "inertia_kgm2", "expected 3 values"),
        ({"inertia_kgm2": 0.1}, "inertia_kgm2", "expected a list"),
        ({"wingspan_m": 1.0}, "wingspan_m", "unknown field"),
        ({"mass_kg": -0.5}, "mass_kg", "must be > 0"),
        ({"inertia_kgm2": [0.1, 0.0, 0.1]}, "inertia_kgm2", "must be > 0"),
        ({"thrust_max_n": 5.0}, "thrust_max_n", "hover thrust"),
        ({"thrust_model_factor": 1.5}, "thrust_model_factor", "must be in [0, 1]"),
        ({"name": 3}, "name", "expected a string"),
    ],
)
def test_malformed_vehicle_names_file_and_field(tmp_path, agile_data, change, field, message):
    data = dict(agile_data)
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_vehicle(path)
    text = str(info.value)
    assert str(path) in text and field in text and message in text


def test_unknown_vehicle_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown vehicle 'nope'.*agile"):
        load_vehicle("nope")


def test_invalid_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("mass_kg: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML"):
        load_vehicle(path)


def test_thrust_model_factor_is_optional_and_linear_by_default(tmp_path, agile_data):
    assert "thrust_model_factor" not in agile_data
    assert load_vehicle("agile").thrust_model_factor == 0.0
    curved = load_vehicle(_write(tmp_path, {**agile_data, "thrust_model_factor": 0.4}, "c.yaml"))
    assert curved.thrust_model_factor == 0.4
