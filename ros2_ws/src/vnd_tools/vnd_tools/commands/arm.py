"""``vnd arm``: re-arm the policy node after a fallback landing or ``vnd disarm``.

    vnd arm [--vehicle NS] [--node NAME] [--timeout S]

Sends one ``vnd_msgs/CheckpointCommand`` ACTION_ARM to the policy node and prints its
``CheckpointStatus`` answer. The node accepts only while DISARMED (IDLE: accepted, nothing to
do) with fresh odometry showing the vehicle resting on the floor; it then goes to IDLE and the
policy takes over on the first good tick. Exit code 0 when accepted, 1 when rejected or not
answered in time.
"""

from __future__ import annotations

import argparse

from vnd_core.wire import CheckpointAction

from vnd_tools.commands.checkpoint import add_live_options, send

POLICY_NODE = "policy"  # only the policy node arms and disarms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vnd checkpoint``, addressed to the policy node by default."""
    add_live_options(parser, node=POLICY_NODE)


def run(args: argparse.Namespace) -> int:
    """Send the arm request; the exit code."""
    return send(args, CheckpointAction.ARM, "vnd arm")
