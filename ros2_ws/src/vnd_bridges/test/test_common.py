"""Node-side helpers of the bridges: thrust model from parameters, CtbrCommand decoding, modes."""

import pytest
from vnd_bridges.common import (
    CommandInputConfig,
    ThrustConfig,
    flying_modes,
    make_gate,
    make_thrust_model,
    sample_from_msg,
)
from vnd_core.config_io import ConfigError, read_yaml, resolve_named
from vnd_ros.messages import get_message

CTBR = get_message("vnd_msgs/msg/CtbrCommand")


def test_default_thrust_model_is_linear_up_to_the_vehicles_maximum():
    model = make_thrust_model(ThrustConfig(vehicle="small"))
    thrust_max_n = read_yaml(resolve_named("vehicles", "small"))["thrust_max_n"]
    assert (model.quadratic_n, model.linear_n) == (0.0, thrust_max_n)


def test_configured_thrust_fit_wins():
    model = make_thrust_model(ThrustConfig(quadratic_n=12.0, linear_n=3.0, vehicle="no_such"))
    assert model.thrust_max_n == 15.0


def test_thrust_model_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="unknown vehicle 'no_such'"):
        make_thrust_model(ThrustConfig(vehicle="no_such"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nthrust_max_n: -3.0\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: thrust_max_n: .*not increasing"):
        make_thrust_model(ThrustConfig(vehicle=str(bad)))
    bad.write_text("name: bad\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: thrust_max_n: expected a number"):
        make_thrust_model(ThrustConfig(vehicle=str(bad)))
    with pytest.raises(ValueError, match="not increasing"):
        make_thrust_model(ThrustConfig(quadratic_n=-10.0, linear_n=1.0))


def test_sample_from_msg():
    msg = CTBR(thrust_n=6.5, body_rate_radps=[0.1, -0.2, 0.3], mode=CTBR.MODE_FALLBACK_LAND)
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_700_000_000, 250_000_000
    sample = sample_from_msg(msg)
    assert sample.stamp_s == 1_700_000_000.25
    assert sample.thrust_n == 6.5
    assert sample.body_rate_flu_radps == (0.1, -0.2, 0.3)
    assert sample.mode == CTBR.MODE_FALLBACK_LAND


def test_flying_modes_are_policy_and_fallbacks_only():
    assert flying_modes(CTBR) == {
        CTBR.MODE_POLICY,
        CTBR.MODE_FALLBACK_HOLD,
        CTBR.MODE_FALLBACK_LAND,
    }
    gate = make_gate(CommandInputConfig(max_age_s=0.05), CTBR)
    assert CTBR.MODE_IDLE not in gate.forward_modes
    assert CTBR.MODE_DISARMED not in gate.forward_modes
    assert gate.max_age_s == 0.05
