"""Message lookup and CDR: the dds backend's bytes equal rosbags' (what ROS 2 and its bags use)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
from cyclonedds.idl import IdlStruct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rosbags.typesys.base import Nodetype
from vnd_ros import messages
from vnd_ros.cyclone_compat import LITTLE_ENDIAN, idl_deserialize
from vnd_ros.messages import UnknownMessageTypeError
from vnd_ros.paths import find_package_share

VND_TYPES = tuple(
    f"vnd_msgs/msg/{path.stem}"
    for path in sorted((find_package_share("vnd_msgs") / "msg").glob("*.msg"))
)
STANDARD_TYPES = (
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/PoseStamped",
    "std_msgs/msg/Header",
    "rmw_dds_common/msg/ParticipantEntitiesInfo",
)
DISTROS = ("jazzy", "humble")
EXAMPLES_PER_TYPE = 30  # x 12 types x 2 distros = 720 randomized messages

INT_RANGES = {
    f"{sign}int{bits}": (
        (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if sign == "" else (0, 2**bits - 1)
    )
    for sign in ("", "u")
    for bits in (8, 16, 32, 64)
}
INT_RANGES.update(byte=(0, 255), char=(0, 255))
NUMPY_DTYPES = {
    **{name: np.dtype(name) for name in INT_RANGES if name not in ("byte", "char")},
    "byte": np.dtype(np.uint8),
    "char": np.dtype(np.uint8),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "bool": np.dtype(np.bool_),
}
BYTE_TYPES = ("uint8", "byte", "char")
MAX_SEQUENCE = 4  # elements per random sequence (keeps cases fast)


# --- random plain values (a dict tree) and their two constructions ----------------------------


def _scalar_strategy(base: str, bound: int) -> st.SearchStrategy:
    if base == "bool":
        return st.booleans()
    if base in INT_RANGES:
        low, high = INT_RANGES[base]
        return st.integers(low, high)
    if base == "float32":
        return st.floats(width=32, allow_nan=False)
    if base == "float64":
        return st.floats(allow_nan=False)
    if base == "string":
        # CDR strings are NUL terminated; a bound counts bytes, so bounded ones stay ASCII.
        alphabet = (
            st.characters(min_codepoint=1, max_codepoint=127)
            if bound
            else st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
        )
        return st.text(alphabet, max_size=min(bound, 12) if bound else 12)
    raise AssertionError(f"no strategy for {base}")


def _field_strategy(store, fielddesc) -> st.SearchStrategy:
    kind, detail = fielddesc
    if kind == Nodetype.BASE:
        return _scalar_strategy(*detail)
    if kind == Nodetype.NAME:
        return _message_strategy(store, detail)
    (element_kind, element_detail), count = detail
    is_array = kind == Nodetype.ARRAY
    size = {"min_size": count, "max_size": count} if is_array else {"max_size": MAX_SEQUENCE}
    if element_kind == Nodetype.BASE and element_detail[0] in BYTE_TYPES:
        return st.binary(**(size if is_array else {"max_size": 64}))
    if element_kind == Nodetype.BASE:
        element = _scalar_strategy(*element_detail)
    else:
        element = _message_strategy(store, element_detail)
    return st.lists(element, **size)


def _message_strategy(store, msgtype: str) -> st.SearchStrategy:
    _constants, fields = store.fielddefs[msgtype]
    return st.fixed_dictionaries(
        {name: _field_strategy(store, fielddesc) for name, fielddesc in fields}
    )


def _build_ours(distro: str, store, msgtype: str, plain: dict):
    """The dds backend's message built from the plain tree."""
    kwargs = {}
    for name, (kind, detail) in store.fielddefs[msgtype][1]:
        value = plain[name]
        if kind == Nodetype.NAME:
            value = _build_ours(distro, store, detail, value)
        elif kind != Nodetype.BASE and detail[0][0] == Nodetype.NAME:
            value = [_build_ours(distro, store, detail[0][1], item) for item in value]
        kwargs[name] = value
    return messages.get_message(msgtype, distro=distro)(**kwargs)


def _build_rosbags(store, msgtype: str, plain: dict):
    """rosbags' own class built from the plain tree, independent of vnd_ros' conversion."""
    kwargs = {}
    for name, (kind, detail) in store.fielddefs[msgtype][1]:
        value = plain[name]
        if kind == Nodetype.NAME:
            value = _build_rosbags(store, detail, value)
        elif kind != Nodetype.BASE:
            element_kind, element_detail = detail[0]
            if element_kind == Nodetype.NAME:
                value = [_build_rosbags(store, element_detail, item) for item in value]
            elif element_detail[0] in NUMPY_DTYPES:
                dtype = NUMPY_DTYPES[element_detail[0]]
                value = (
                    np.frombuffer(value, dtype=np.uint8).copy()
                    if isinstance(value, bytes)
                    else np.array(value, dtype=dtype)
                )
        kwargs[name] = value
    return store.types[msgtype](**kwargs)


def _cases():
    for distro in DISTROS:
        for msgtype in (*VND_TYPES, *STANDARD_TYPES):
            yield pytest.param(distro, msgtype, id=f"{distro}-{msgtype}")


# --- the byte-equality property ---------------------------------------------------------------


@pytest.mark.parametrize(("distro", "msgtype"), list(_cases()))
def test_cdr_bytes_equal_rosbags(distro: str, msgtype: str) -> None:
    store = messages.typestore(distro)
    cls = messages.get_message(msgtype, distro=distro)

    @settings(
        max_examples=EXAMPLES_PER_TYPE,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(plain=_message_strategy(store, msgtype))
    def check(plain: dict) -> None:
        ours = _build_ours(distro, store, msgtype, plain)
        data = messages.serialize(ours)  # the compiled codec
        assert data == bytes(store.serialize_cdr(_build_rosbags(store, msgtype, plain), msgtype))
        assert messages.deserialize(cls, data) == ours
        # cyclonedds' own machinery (used for big-endian peers) agrees in both directions
        assert IdlStruct.serialize(ours, use_version_2=False, endianness=LITTLE_ENDIAN) == data
        assert idl_deserialize(cls, data) == ours

    check()


def test_covers_every_vnd_message() -> None:
    assert set(VND_TYPES) == {
        f"vnd_msgs/msg/{name}"
        for name in (
            "CheckpointCommand",
            "CheckpointStatus",
            "CtbrCommand",
            "Latent",
            "LearnerStatus",
            "ModelBundle",
            "NodeStatus",
            "Reference",
            "Transition",
        )
    }


# --- construction, lookup, errors -------------------------------------------------------------


def test_keyword_construction_with_rosidl_defaults() -> None:
    odometry_cls = messages.get_message("nav_msgs/msg/Odometry")
    odometry = odometry_cls()
    assert odometry.header.stamp.sec == 0 and odometry.child_frame_id == ""
    assert odometry.pose.covariance == [0.0] * 36
    assert odometry.pose.pose.orientation.w == 1.0  # Quaternion.msg declares w = 1
    assert odometry_cls(child_frame_id="base_link").child_frame_id == "base_link"
    assert odometry_cls().pose is not odometry_cls().pose  # no shared mutable defaults
    command_cls = messages.get_message("vnd_msgs/msg/CtbrCommand")
    assert command_cls.MODE_FALLBACK_LAND == 3 and command_cls().body_rate_radps == [0.0] * 3


def test_byte_fields_carry_bytes_and_gid_size_follows_distro() -> None:
    bundle_cls = messages.get_message("vnd_msgs/msg/ModelBundle")
    bundle = bundle_cls(version=2, payload=bytes(range(256)) * 8)
    decoded = messages.deserialize("vnd_msgs/msg/ModelBundle", messages.serialize(bundle))
    assert isinstance(decoded.payload, bytes) and decoded == bundle
    array_payload = bundle_cls(version=2, payload=np.frombuffer(bundle.payload, np.uint8))
    assert messages.serialize(array_payload) == messages.serialize(bundle)
    assert len(messages.get_message("rmw_dds_common/msg/Gid", distro="jazzy")().data) == 16
    assert len(messages.get_message("rmw_dds_common/msg/Gid", distro="humble")().data) == 24


def test_numpy_values_serialize_like_lists() -> None:
    transition_cls = messages.get_message("vnd_msgs/msg/Transition")
    state = np.linspace(-1.0, 1.0, 13)
    from_numpy = transition_cls(state=state, z=np.array([0.25, -2.0], dtype=np.float32))
    from_lists = transition_cls(state=state.tolist(), z=[0.25, -2.0])
    assert messages.serialize(from_numpy) == messages.serialize(from_lists)


def test_wire_format_facts() -> None:
    latent_cls = messages.get_message("vnd_msgs/msg/Latent")
    assert latent_cls.__idl_typename__ == "vnd_msgs::msg::dds_::Latent_"
    assert messages.dds_type_name("nav_msgs/Odometry") == "nav_msgs::msg::dds_::Odometry_"
    assert messages.serialize(latent_cls())[:4] == b"\x00\x01\x00\x00"  # XCDR1, little endian
    assert messages.message_type_name(latent_cls()) == "vnd_msgs/msg/Latent"


def test_lookup_is_cached_and_cheap() -> None:
    first = messages.get_message("geometry_msgs/msg/PoseStamped")
    start = time.perf_counter()
    for _ in range(1000):
        assert messages.get_message("geometry_msgs/msg/PoseStamped") is first
    assert (time.perf_counter() - start) / 1000 < 50e-6
    assert messages.get_message("geometry_msgs/PoseStamped") is first


def test_unknown_and_malformed_names_are_named() -> None:
    with pytest.raises(UnknownMessageTypeError, match="'foo_msgs/msg/Bar'"):
        messages.get_message("foo_msgs/msg/Bar")
    with pytest.raises(UnknownMessageTypeError, match="'vnd_msgs/msg/Nope'"):
        messages.message_definition("vnd_msgs/msg/Nope")
    with pytest.raises(ValueError, match="'Odometry'"):
        messages.get_message("Odometry")
    with pytest.raises(ValueError, match="not supported"):
        messages.get_message("std_msgs/msg/Header", distro="rolling")


def test_deserialize_rejects_data_without_cdr_header() -> None:
    with pytest.raises(ValueError, match="std_msgs/msg/Header"):
        messages.deserialize("std_msgs/msg/Header", b"\x07\x07\x00\x00" + bytes(12))


# --- bag metadata -----------------------------------------------------------------------------


def test_message_definition_is_rosbags_ros2msg_text() -> None:
    text, encoding = messages.message_definition("nav_msgs/msg/Odometry")
    assert encoding == "ros2msg"
    assert text.startswith("std_msgs/Header header\n")
    assert "\nMSG: geometry_msgs/PoseWithCovariance\n" in text
    command_text, _ = messages.message_definition("vnd_msgs/msg/CtbrCommand")
    assert "uint8 MODE_POLICY=1" in command_text and "float64[3] body_rate_radps" in command_text


def test_type_hash_is_rihs01() -> None:
    header_hash = messages.type_hash("std_msgs/msg/Header")
    assert re.fullmatch(r"RIHS01_[0-9a-f]{64}", header_hash)
    assert header_hash != messages.type_hash("vnd_msgs/msg/Latent")
    assert messages.type_hash("std_msgs/msg/Header") == header_hash


def test_new_constants_keep_the_type_hash() -> None:
    """CheckpointCommand gained ACTION_ARM / ACTION_DISARM; constants are not hashed (REP-2011),
    so peers built before them still match: the hash is the one from before the change."""
    command_hash = messages.type_hash("vnd_msgs/msg/CheckpointCommand")
    assert command_hash == "RIHS01_b701521d37606b602ed1ac163ea1babaf6f8d40c34f025ff83f4714856ab29dc"
    assert messages.get_message("vnd_msgs/msg/CheckpointCommand").ACTION_DISARM == 7


def test_rosbags_conversion_round_trip() -> None:
    latent_cls = messages.get_message("vnd_msgs/msg/Latent")
    latent = latent_cls(encoder_version=4, valid=True, z=[0.5, -1.5, 2.0])
    converted = messages.to_rosbags(latent)
    assert converted.__msgtype__ == "vnd_msgs/msg/Latent"
    assert converted.z.dtype == np.float32 and converted.z.tolist() == [0.5, -1.5, 2.0]
    assert messages.from_rosbags(converted) == latent


# --- the .msg files themselves ----------------------------------------------------------------


def _msg_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("msgtype", VND_TYPES)
def test_msg_files_follow_conventions(msgtype: str) -> None:
    path = find_package_share("vnd_msgs") / "msg" / f"{msgtype.rsplit('/', 1)[1]}.msg"
    fields = [line for line in _msg_lines(path) if "=" not in line.split("#")[0]]
    constants = [line for line in _msg_lines(path) if "=" in line.split("#")[0]]
    assert fields[0].split()[:2] == ["std_msgs/Header", "header"], f"{path}: header first"
    for line in fields:
        assert "#" in line and line.split("#", 1)[1].strip(), f"{path}: comment missing: {line}"
    for line in constants:
        name = line.split()[1].split("=")[0]
        assert name == name.upper(), f"{path}: constant {name} not ALL_CAPS"


# --- the compiled codec's input checks ----------------------------------------------------------


def test_wrong_values_are_refused_with_the_field_named() -> None:
    command_cls = messages.get_message("vnd_msgs/msg/CtbrCommand")
    with pytest.raises(ValueError, match="body_rate_radps: expected 3 elements, got 2"):
        messages.serialize(command_cls(body_rate_radps=[0.0, 1.0]))
    bundle_cls = messages.get_message("vnd_msgs/msg/ModelBundle")
    with pytest.raises(TypeError, match="items of 8 bytes"):
        messages.serialize(bundle_cls(payload=np.arange(4, dtype=np.int64)))
    from_list = messages.serialize(bundle_cls(payload=[1, 2, 255]))
    assert messages.deserialize(bundle_cls, from_list).payload == b"\x01\x02\xff"
    node_cls = messages.get_message("rmw_dds_common/msg/NodeEntitiesInfo", distro="humble")
    with pytest.raises(ValueError, match="node_name: 300 elements exceed the bound 256"):
        messages.serialize(node_cls(node_name="n" * 300))


def test_dds_writer_and_reader_use_the_same_bytes() -> None:
    transition_cls = messages.get_message("vnd_msgs/msg/Transition")
    sample = transition_cls(tick=7, z=[1.5, -0.5], z_valid=True)
    assert sample.serialize(use_version_2=False) == messages.serialize(sample)
    assert transition_cls.deserialize(messages.serialize(sample)) == sample
