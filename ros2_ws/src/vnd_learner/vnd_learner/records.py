"""vnd_msgs/Transition messages as learner tick records, and their dedup key.

A tick is identified by its odometry stamp and the policy's tick counter: the stamp alone can
repeat (the policy keeps ticking on the last odometry while it is stale), the counter alone
restarts with the policy node. The pair is unique and is what the replay store dedups on.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from vnd_core.learner.records import TickRecords
from vnd_core.state import ACTION_DIM, STATE_DIM
from vnd_core.units import NS_PER_S
from vnd_flight.msgfields import stamp_ns
from vnd_ros.messages import deserialize, get_message

TRANSITION_TYPE = "vnd_msgs/msg/Transition"

_STAMP = struct.Struct("<iII")  # header.stamp.sec, header.stamp.nanosec, len(frame_id) + 1
_TICK = struct.Struct("<Q")
TickKey = tuple[int, int]  # (odometry stamp [ns], policy tick counter)


def tick_key(msg: Any) -> TickKey:
    """Dedup key of a Transition message."""
    return stamp_ns(msg.header.stamp), int(msg.tick)


def key_of_cdr(data: bytes) -> TickKey:
    """Dedup key of a Transition from its CDR bytes (what the replay store holds).

    Reads only the leading fields, in classic little-endian CDR: the 4-byte encapsulation
    header, ``header.stamp`` (int32 sec, uint32 nanosec), ``header.frame_id`` (uint32 length
    with the NUL, then the bytes), then ``tick`` (uint64, 8-byte aligned from the end of the
    encapsulation header). A reload of a long store decodes each record once instead of twice;
    test_learner_store checks it against the full decoder.
    """
    if len(data) < 16 or data[:2] != b"\x00\x01":
        raise ValueError(f"not a little-endian CDR Transition ({bytes(data[:4]).hex()})")
    sec, nanosec, frame_len = _STAMP.unpack_from(data, 4)
    tick_at = 4 + ((12 + frame_len + 7) & ~7)  # 12 = stamp + length field, relative to byte 4
    (tick,) = _TICK.unpack_from(data, tick_at)
    return sec * NS_PER_S + nanosec, tick


class TickBuffer:
    """Transitions accumulated row by row, handed out as :class:`TickRecords` batches."""

    def __init__(self) -> None:
        self._rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, msg: Any) -> None:
        """Append one Transition message."""
        self._rows.append(
            (
                stamp_ns(msg.header.stamp),
                np.asarray(msg.state, dtype=np.float64),
                np.asarray(msg.action, dtype=np.float64),
                int(msg.mode),
                int(msg.policy_version),
                int(msg.encoder_version),
            )
        )

    def take(self) -> TickRecords:
        """The accumulated rows as one batch (N may be 0); the buffer is emptied."""
        rows, self._rows = self._rows, []
        if not rows:
            return TickRecords.empty()
        stamps, states, actions, modes, policy_versions, encoder_versions = zip(*rows, strict=True)
        return TickRecords(
            stamp_ns=np.asarray(stamps, dtype=np.int64),
            state=np.stack(states).reshape(len(rows), STATE_DIM),
            action=np.stack(actions).reshape(len(rows), ACTION_DIM),
            mode=np.asarray(modes, dtype=np.uint8),
            policy_version=np.asarray(policy_versions, dtype=np.uint32),
            encoder_version=np.asarray(encoder_versions, dtype=np.uint32),
        )


def records_from_cdr(blobs: list[bytes]) -> TickRecords:
    """Tick records of stored Transition CDR blobs, in the given order."""
    cls = get_message(TRANSITION_TYPE)
    buffer = TickBuffer()
    for data in blobs:
        buffer.add(deserialize(cls, data))
    return buffer.take()
