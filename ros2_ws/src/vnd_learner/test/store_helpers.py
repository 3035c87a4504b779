"""Light helpers of the replay-store tests (no torch): also imported by a child process."""

from __future__ import annotations

from rosbags.typesys import Stores, get_typestore
from vnd_flight.learner_store.replay_store import StoreTopic


def string_topic() -> StoreTopic:
    """A store topic '/t' of std_msgs/String."""
    store = get_typestore(Stores.ROS2_JAZZY)
    msgdef, _ = store.generate_msgdef("std_msgs/msg/String", ros_version=2)
    return StoreTopic("/t", "std_msgs/msg/String", msgdef, store.hash_rihs01("std_msgs/msg/String"))


def string_cdr(text: str) -> bytes:
    """CDR of std_msgs/String ``text``: encapsulation header, uint32 length with NUL, bytes."""
    raw = text.encode() + b"\0"
    return b"\x00\x01\x00\x00" + len(raw).to_bytes(4, "little") + raw


def identity_key(data: bytes) -> bytes:
    """Dedup key: the message bytes themselves."""
    return data
