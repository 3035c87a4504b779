"""The vnd_msgs constants the ROS-free code needs, one Python definition of each.

The .msg files are the source: ``CtbrCommand.MODE_*`` (also the mode of ``Transition`` and
``NodeStatus``), ``LearnerStatus.STATE_*`` and ``CheckpointCommand.ACTION_*``. Both backends
expose those as class attributes of the message classes, but the numerics, the flight runtime
and the report writers run without a middleware, so they use the enums below instead;
``vnd_ros/test/test_wire_constants.py`` checks that every member equals its .msg constant on
both backends. The printable names (``vnd status``, ``vnd preflight``, ``vnd fly``) are
derived here too, so a new constant needs one line in its .msg file and one in its enum.
"""

from __future__ import annotations

import enum


class Mode(enum.IntEnum):
    """Controller mode: ``vnd_msgs/CtbrCommand.MODE_*``."""

    IDLE = 0  # no command is being produced (waiting for odometry or a model)
    POLICY = 1  # the learned policy produced the command
    FALLBACK_HOLD = 2  # safety fallback: hold position with the nominal controller
    FALLBACK_LAND = 3  # safety fallback: descend and land
    DISARMED = 4  # motors disarmed, thrust is zero


class LearnerState(enum.IntEnum):
    """Progress of the asynchronous learner: ``vnd_msgs/LearnerStatus.STATE_*``."""

    IDLE = 0  # waiting for enough data
    COLLECTING = 1  # storing transitions
    FITTING = 2  # fitting encoder, residual and decoder
    TRAINING = 3  # training the policy through model rollouts
    VALIDATING = 4  # validating a candidate bundle
    ERROR = 5  # stopped on an error


class CheckpointAction(enum.IntEnum):
    """Operator request to a model-holding node: ``vnd_msgs/CheckpointCommand.ACTION_*``."""

    LIST = 0  # report active and available versions
    LOAD = 1  # load a bundle file (validated, not activated)
    ACTIVATE = 2  # activate an available version at the next tick boundary
    ROLLBACK = 3  # activate the previously active version
    PIN = 4  # ignore new learner bundles until unpinned
    UNPIN = 5  # accept new learner bundles again
    ARM = 6  # policy node: leave DISARMED for IDLE
    DISARM = 7  # policy node: DISARMED now, zero thrust


# Each enum with the message type and constant prefix it mirrors.
MESSAGE_CONSTANTS: dict[type[enum.IntEnum], tuple[str, str]] = {
    Mode: ("vnd_msgs/msg/CtbrCommand", "MODE_"),
    LearnerState: ("vnd_msgs/msg/LearnerStatus", "STATE_"),
    CheckpointAction: ("vnd_msgs/msg/CheckpointCommand", "ACTION_"),
}

# Short mode names operators see: "hold" and "land" for the two fallbacks.
MODE_NAMES: dict[int, str] = {mode: mode.name.lower().removeprefix("fallback_") for mode in Mode}
MODE_VALUES: dict[str, int] = {name: value for value, name in MODE_NAMES.items()}
LEARNER_STATE_NAMES: dict[int, str] = {state: state.name.lower() for state in LearnerState}
ACTION_NAMES: dict[int, str] = {action: action.name.lower() for action in CheckpointAction}


def mode_name(value: int) -> str:
    """Printable name of a ``mode`` field value; ``mode <value>`` for one this code predates."""
    return MODE_NAMES.get(int(value), f"mode {value}")


def learner_state_name(value: int) -> str:
    """Printable name of a ``LearnerStatus.state`` value; ``state <value>`` when unknown."""
    return LEARNER_STATE_NAMES.get(int(value), f"state {value}")
