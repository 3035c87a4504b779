"""Vendored px4_msgs / mavros_msgs definitions: they parse, name their source release, match
the bridge's field sets, and the dds backend's generated classes serialise byte for byte like
rosbags (the CDR that ROS 2 and PX4's uXRCE-DDS agent use)."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from vnd_bridges.mavros_bridge_node import fill_attitude_target
from vnd_bridges.px4_bridge_node import fill_message
from vnd_flight.bridges.gate import CtbrSample
from vnd_flight.bridges.mavros import IGNORE_ATTITUDE, ctbr_to_attitude_target
from vnd_flight.bridges.px4 import (
    OffboardControlModeFields,
    VehicleRatesSetpointFields,
    ctbr_to_px4,
)
from vnd_flight.bridges.thrust import ThrustModel
from vnd_ros import messages

MSG_DEFS = Path(__file__).resolve().parents[2] / "vnd_ros/vnd_ros/msg_defs"
VENDORED = {
    "px4_msgs/msg/OffboardControlMode": OffboardControlModeFields,
    "px4_msgs/msg/VehicleRatesSetpoint": VehicleRatesSetpointFields,
    "mavros_msgs/msg/AttitudeTarget": None,
}


def msg_path(msgtype: str) -> Path:
    package, _, name = msgtype.split("/")
    return MSG_DEFS / package / "msg" / f"{name}.msg"


@pytest.fixture(scope="module")
def store():
    """A Jazzy typestore with the vendored definitions registered from their .msg text."""
    typestore = get_typestore(Stores.ROS2_JAZZY)
    for msgtype in VENDORED:
        typestore.register(get_types_from_msg(msg_path(msgtype).read_text(), msgtype))
    return typestore


def test_exactly_the_bridge_types_are_vendored():
    found = {f"{p.parts[-3]}/msg/{p.stem}" for p in MSG_DEFS.glob("*/msg/*.msg")}
    assert found == set(VENDORED)


@pytest.mark.parametrize("msgtype", VENDORED)
def test_definition_names_its_source_release(msgtype):
    header = msg_path(msgtype).read_text().split("\n\n")[0]
    assert "Source:" in header
    assert ("v1.15" in header) if msgtype.startswith("px4_msgs") else ("MAVROS 2.x" in header)


@pytest.mark.parametrize("msgtype", [t for t, fields in VENDORED.items() if fields])
def test_px4_field_dataclasses_cover_the_message(store, msgtype):
    _, msg_fields = store.fielddefs[msgtype]
    assert [f.name for f in dataclasses.fields(VENDORED[msgtype])] == [n for n, _ in msg_fields]


def test_mavros_constants(store):
    constants = {
        name: value for name, _, value in store.fielddefs["mavros_msgs/msg/AttitudeTarget"][0]
    }
    assert constants["IGNORE_ATTITUDE"] == IGNORE_ATTITUDE


COMMAND = CtbrSample(stamp_s=0.0, thrust_n=7.5, body_rate_flu_radps=(0.5, -0.25, 1.0), mode=1)
STAMP_NS = 1_700_000_000_123_456_789


def test_px4_bytes_equal_rosbags(store):
    setpoint = ctbr_to_px4(COMMAND, ThrustModel.linear(30.0), STAMP_NS // 1000)
    ocm = fill_message(
        messages.get_message("px4_msgs/msg/OffboardControlMode")(), setpoint.offboard_control_mode
    )
    rates = fill_message(
        messages.get_message("px4_msgs/msg/VehicleRatesSetpoint")(), setpoint.vehicle_rates_setpoint
    )
    types = store.types
    expected_ocm = types["px4_msgs/msg/OffboardControlMode"](
        timestamp=1_700_000_000_123_456,
        position=False,
        velocity=False,
        acceleration=False,
        attitude=False,
        body_rate=True,
        thrust_and_torque=False,
        direct_actuator=False,
    )
    expected_rates = types["px4_msgs/msg/VehicleRatesSetpoint"](
        timestamp=1_700_000_000_123_456,
        roll=0.5,
        pitch=0.25,
        yaw=-1.0,
        thrust_body=np.array([0.0, 0.0, -0.25], dtype=np.float32),
        reset_integral=False,
    )
    for ours, theirs in ((ocm, expected_ocm), (rates, expected_rates)):
        expected = bytes(store.serialize_cdr(theirs, theirs.__msgtype__))
        assert messages.serialize(ours) == expected


def test_mavros_bytes_equal_rosbags(store):
    fields = ctbr_to_attitude_target(COMMAND, ThrustModel.linear(30.0), STAMP_NS)
    ours = fill_attitude_target(messages.get_message("mavros_msgs/msg/AttitudeTarget")(), fields)
    types = store.types
    theirs = types["mavros_msgs/msg/AttitudeTarget"](
        header=types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=1_700_000_000, nanosec=123_456_789),
            frame_id="base_link",
        ),
        type_mask=128,
        orientation=types["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
        body_rate=types["geometry_msgs/msg/Vector3"](x=0.5, y=-0.25, z=1.0),
        thrust=0.25,
    )
    expected = bytes(store.serialize_cdr(theirs, "mavros_msgs/msg/AttitudeTarget"))
    assert messages.serialize(ours) == expected
    decoded = store.deserialize_cdr(messages.serialize(ours), "mavros_msgs/msg/AttitudeTarget")
    assert math.isclose(decoded.thrust, 0.25)
