"""The ROS-free wire constants (vnd_core.wire) equal the .msg constants on both backends.

vnd_core.wire is what the numerics, the flight runtime, the CLI and the reports use; the .msg
files are the source. The dds backend reads the .msg files of the source tree, rclpy the
classes ``make ros`` generated from them: both must agree with every enum member, and no
constant of the mirrored prefix may be missing from the enum.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
from vnd_core import wire
from vnd_ros import messages
from vnd_ros.paths import find_package_share


def _message_class(backend: str, msgtype: str) -> type:
    if backend == "rclpy":
        if importlib.util.find_spec("rclpy") is None:
            pytest.skip("rclpy is not importable (run `make ros`): rclpy classes not checked")
        return messages.rosidl_message(msgtype)
    return messages.get_message(msgtype)


def _declared(msgtype: str, prefix: str) -> dict[str, int]:
    """``NAME -> value`` of the constants with ``prefix`` as written in the .msg file."""
    path = find_package_share("vnd_msgs") / "msg" / f"{msgtype.rsplit('/', 1)[1]}.msg"
    pattern = rf"^\s*uint8\s+{prefix}(\w+)\s*=\s*(\d+)"
    return {name: int(value) for name, value in re.findall(pattern, path.read_text(), re.M)}


@pytest.mark.parametrize("backend", ["dds", "rclpy"])
@pytest.mark.parametrize("enum_cls", list(wire.MESSAGE_CONSTANTS), ids=lambda cls: cls.__name__)
def test_enum_members_equal_the_message_constants(backend: str, enum_cls: type) -> None:
    msgtype, prefix = wire.MESSAGE_CONSTANTS[enum_cls]
    cls = _message_class(backend, msgtype)
    declared = _declared(msgtype, prefix)
    assert declared, f"{msgtype} declares no {prefix}* constants"
    ours = {member.name: int(member) for member in enum_cls}
    assert ours == declared, f"vnd_core.wire.{enum_cls.__name__} differs from {msgtype}"
    for name, value in ours.items():
        assert getattr(cls, prefix + name) == value, f"{backend} {msgtype}.{prefix}{name}"


def test_status_messages_carry_the_mirrored_fields() -> None:
    # NodeStatus.mode and Transition.mode hold CtbrCommand MODE_* values; LearnerStatus.state
    # its own STATE_*: the fields the printable names are looked up for.
    for msgtype, field_name in (
        ("vnd_msgs/msg/NodeStatus", "mode"),
        ("vnd_msgs/msg/Transition", "mode"),
        ("vnd_msgs/msg/LearnerStatus", "state"),
    ):
        assert getattr(messages.get_message(msgtype)(), field_name) == 0


def test_printable_names() -> None:
    assert wire.MODE_NAMES == {0: "idle", 1: "policy", 2: "hold", 3: "land", 4: "disarmed"}
    assert wire.MODE_VALUES["hold"] == wire.Mode.FALLBACK_HOLD
    assert wire.mode_name(9) == "mode 9"
    assert wire.learner_state_name(wire.LearnerState.VALIDATING) == "validating"
    assert wire.learner_state_name(17) == "state 17"
    assert wire.ACTION_NAMES[wire.CheckpointAction.DISARM] == "disarm"
