"""Contract of the private cyclonedds-python parts the dds backend relies on (cyclone_compat).

Each test exercises one of them on real DDS entities (a participant on loopback, a writer and a
reader on one topic) and fails when an upgrade of cyclonedds changes the name, the signature or
the behaviour the backend needs: raw CDR write and take, deleting an entity at once, the final
struct namespace and the swapped member machines of the interpreted codec.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cyclonedds.core import InstanceState, SampleState, ViewState
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlMeta, IdlStruct
from cyclonedds.idl import types as idl_types
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from vnd_ros import cyclone_compat
from vnd_ros.cyclone_compat import (
    LITTLE_ENDIAN,
    BytesMachine,
    Endianness,
    delete_entity,
    entity_is_live,
    forget_entity,
    idl_deserialize,
    replace_member_machines,
    struct_namespace,
    take_cdr,
    write_cdr,
)
from vnd_ros.messages import get_message, serialize
from vnd_ros.qos import qos_profile_default, to_cyclone_qos

REPO_ROOT = Path(__file__).resolve().parents[4]
SETUP_PY = Path(__file__).resolve().parents[1] / "setup.py"
ANY_STATE = SampleState.Any | ViewState.Any | InstanceState.Any
CDR_XCDR2_LE = b"\x00\x07"  # encapsulation id of a final struct in XCDR2 (no DHEADER)
CDR_D_XCDR2_LE = b"\x00\x09"  # appendable struct in XCDR2: a DHEADER precedes the members


def wait_until(condition: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Poll ``condition`` until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def endpoints():
    """(participant, writer, reader) of one matched std_msgs/String topic on loopback."""
    participant = DomainParticipant(0)
    topic = Topic(participant, "rt/vnd_cyclone_compat", get_message("std_msgs/msg/String"))
    qos = to_cyclone_qos(qos_profile_default)
    writer = DataWriter(participant, topic, qos)
    reader = DataReader(participant, topic, qos)
    wait_until(lambda: reader.get_matched_publications())
    yield participant, writer, reader
    delete_entity(participant)


def padded_cdr(msg: object) -> bytes:
    """Serialized ``msg`` padded to a multiple of 4 bytes, as the backend writes it."""
    data = serialize(msg)
    return data.ljust((len(data) + 3) & ~3, b"\0")


def test_installed_cyclonedds_is_the_pinned_version() -> None:
    installed = importlib.metadata.version("cyclonedds")
    requirements = (REPO_ROOT / "requirements.txt").read_text()
    pinned = re.search(r"^cyclonedds==(\S+)", requirements, re.MULTILINE)
    assert pinned is not None, "requirements.txt must pin cyclonedds with =="
    assert installed == pinned.group(1)
    declared = re.search(r'"cyclonedds>=([\d.]+),<([\d.]+)"', SETUP_PY.read_text())
    assert declared is not None, "vnd_ros/setup.py must bound cyclonedds from both sides"

    def as_tuple(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    low, high = (as_tuple(bound) for bound in declared.groups())
    assert low <= as_tuple(installed) < high


def test_raw_write_and_take_carry_the_cdr_bytes(endpoints) -> None:
    _participant, writer, reader = endpoints
    string_cls = get_message("std_msgs/msg/String")
    data = padded_cdr(string_cls(data="over the raw path"))
    before_ns = time.time_ns()
    assert write_cdr(writer, data) == 0
    samples: list = []

    def took() -> bool:
        taken = take_cdr(reader, ANY_STATE, 16)
        assert not isinstance(taken, int), f"take failed with DDS return code {taken}"
        samples.extend(taken)
        return bool(samples)

    wait_until(took)
    (received, info), *rest = samples
    assert rest == []
    assert bytes(received) == data  # undecoded, as written
    assert info.valid_data
    assert before_ns - 1_000_000_000 <= info.source_timestamp <= time.time_ns()
    assert string_cls.deserialize(received).data == "over the raw path"
    assert take_cdr(reader, ANY_STATE, 16) == []  # taken, not read: nothing left


def test_deleting_an_entity_takes_effect_at_once_and_only_once(endpoints) -> None:
    _participant, writer, reader = endpoints
    assert entity_is_live(writer)
    delete_entity(writer)
    assert not entity_is_live(writer)
    wait_until(lambda: not reader.get_matched_publications(), timeout_s=2.0)  # peers see it go
    delete_entity(writer)  # a second delete is a no-op
    delete_entity(None)
    assert write_cdr(writer, padded_cdr(get_message("std_msgs/msg/String")())) < 0
    delete_entity(reader)
    assert take_cdr(reader, ANY_STATE, 16) < 0  # the handle is gone: an error code, no crash


def test_forgetting_a_child_leaves_its_deletion_to_the_parent() -> None:
    participant = DomainParticipant(0)
    topic = Topic(participant, "rt/vnd_cyclone_compat", get_message("std_msgs/msg/String"))
    writer = DataWriter(participant, topic, to_cyclone_qos(qos_profile_default))
    delete_entity(participant)  # deletes its children in C
    forget_entity(writer)
    forget_entity(topic)
    assert not entity_is_live(writer) and not entity_is_live(topic)
    del writer, topic  # collection must not delete the handles a second time


def _probe_class(name: str, extensibility: str | None = None) -> type:
    """An IdlStruct with an int32 and a uint8 sequence, built the way vnd_ros._idl builds."""
    namespace = struct_namespace(name, f"vnd_probe::msg::dds_::{name}_")
    if extensibility is not None:
        namespace["__idl_annotations__"]["extensibility"] = extensibility
    namespace["__annotations__"]["count"] = idl_types.int32
    namespace["count"] = dataclasses.field(default=0)
    namespace["__annotations__"]["blob"] = idl_types.sequence[idl_types.uint8]
    namespace["blob"] = dataclasses.field(default_factory=bytes)
    return dataclasses.dataclass(IdlMeta(name, (IdlStruct,), namespace))


def test_struct_namespace_builds_a_final_struct() -> None:
    final_cls = _probe_class("FinalProbe")
    assert final_cls.__idl_typename__ == "vnd_probe::msg::dds_::FinalProbe_"
    final = final_cls(count=5, blob=[1, 2]).serialize(use_version_2=True)
    assert final[:2] == CDR_XCDR2_LE and len(final) == 4 + 4 + 4 + 2
    # The namespace key is what sets the extensibility: appendable adds a DHEADER.
    appendable = _probe_class("AppendableProbe", "appendable")
    wide = appendable(count=5, blob=[1, 2]).serialize(use_version_2=True)
    assert wide[:2] == CDR_D_XCDR2_LE and len(wide) == len(final) + 4


def test_swapped_member_machines_serialize_and_read_the_field() -> None:
    probe_cls = _probe_class("MachineProbe")
    data = probe_cls(count=7, blob=[1, 2, 3]).serialize()
    assert isinstance(idl_deserialize(probe_cls, data).blob, list)  # the stock machine

    class BlockBytes(BytesMachine):
        """uint8[] read back as bytes (what vnd_ros._idl installs)."""

    replace_member_machines(probe_cls, {"blob": BlockBytes()})
    decoded = idl_deserialize(probe_cls, data)
    assert decoded == probe_cls(count=7, blob=b"\x01\x02\x03")
    assert isinstance(decoded.blob, bytes)
    big = IdlStruct.serialize(probe_cls(count=7, blob=b"\x01\x02\x03"), endianness=Endianness.Big)
    assert big[:2] == b"\x00\x00" and idl_deserialize(probe_cls, big) == decoded
    little = IdlStruct.serialize(decoded, endianness=LITTLE_ENDIAN, use_version_2=False)
    assert little == data


def test_generated_messages_use_the_swapped_machines() -> None:
    bundle_cls = get_message("vnd_msgs/msg/ModelBundle")
    msg = bundle_cls(payload=b"\x00\xffweights", version=3)
    big = IdlStruct.serialize(msg, endianness=Endianness.Big)  # cyclonedds' interpreted path
    decoded = idl_deserialize(bundle_cls, big)
    assert decoded.payload == b"\x00\xffweights" and isinstance(decoded.payload, bytes)
    assert decoded == bundle_cls.deserialize(serialize(msg))  # compiled codec agrees


def test_every_private_name_is_listed_and_importable() -> None:
    assert set(cyclone_compat.__all__) <= set(dir(cyclone_compat))
    documented = cyclone_compat.__doc__
    for private in ("ddspy_write", "ddspy_take", "_ref", "_entities", "_delete", "__idl__"):
        assert private in documented, f"{private} is used but not documented"
