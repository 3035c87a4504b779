"""Bags recorded with another definition of a message type still read: decoded with the
definition stored in the bag, carried into this install's class field by field."""

from __future__ import annotations

from pathlib import Path

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from vnd_ros.bag_read import read_messages
from vnd_ros.messages import type_hash

STATUS = "vnd_msgs/msg/LearnerStatus"
# An older LearnerStatus: fewer fields, and `ticks_stored` after `latest_version` so that
# decoding its bytes with this install's layout would misread every field after `state`.
OLD_STATUS = """std_msgs/Header header
uint8 state
uint32 latest_version
uint64 ticks_stored
string message
string retired_field
"""


def write_old_bag(path: Path) -> str:
    """A bag of two LearnerStatus messages in OLD_STATUS's layout; returns its RIHS01 hash."""
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg(OLD_STATUS, STATUS))
    status, header, time = (
        store.types[name] for name in (STATUS, "std_msgs/msg/Header", "builtin_interfaces/msg/Time")
    )
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connection = writer.add_connection("/vnd/learner/status", STATUS, typestore=store)
        for k in (1, 2):
            msg = status(
                header=header(stamp=time(sec=k, nanosec=7), frame_id="f"),
                state=3,
                latest_version=10 + k,
                ticks_stored=500 * k,
                message=f"status {k}",
                retired_field="gone",
            )
            writer.write(connection, k * 1_000_000_000, store.serialize_cdr(msg, STATUS))
    return connection.digest


def test_a_message_recorded_with_an_older_definition_reads_by_field_name(tmp_path):
    digest = write_old_bag(tmp_path / "old")
    assert digest.startswith("RIHS01_") and digest != type_hash(STATUS)
    rows = list(read_messages(tmp_path / "old"))
    assert [(topic, stamp) for topic, _, stamp, _ in rows] == [
        ("/vnd/learner/status", 1_000_000_000),
        ("/vnd/learner/status", 2_000_000_000),
    ]
    first, second = (msg for *_, msg in rows)
    assert (first.state, first.latest_version, first.ticks_stored) == (3, 11, 500)
    assert (second.latest_version, second.ticks_stored, second.message) == (12, 1000, "status 2")
    assert (first.header.stamp.sec, first.header.stamp.nanosec, first.header.frame_id) == (
        1,
        7,
        "f",
    )
    # fields the recorded definition lacks keep this install's defaults
    assert first.improvements_accepted == 0 and first.refusal == "" and not first.latest_refused
    assert not hasattr(first, "retired_field")
