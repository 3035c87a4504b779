"""``vnd disarm``: the operator kill switch of the policy node.

    vnd disarm [--vehicle NS] [--node NAME] [--timeout S]

Sends one ``vnd_msgs/CheckpointCommand`` ACTION_DISARM to the policy node and prints its
answer. Always accepted: the mode becomes DISARMED and thrust is zero from the next tick until
``vnd arm``. Exit code 0 when accepted, 1 when not answered in time.
"""

from __future__ import annotations

import argparse

from vnd_core.wire import CheckpointAction

from vnd_tools.commands.arm import add_arguments
from vnd_tools.commands.checkpoint import send

__all__ = ["add_arguments", "run"]  # the options are those of ``vnd arm``


def run(args: argparse.Namespace) -> int:
    """Send the disarm request; the exit code."""
    return send(args, CheckpointAction.DISARM, "vnd disarm")
