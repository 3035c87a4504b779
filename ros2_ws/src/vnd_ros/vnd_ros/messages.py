"""Message classes by ROS name, CDR (de)serialisation and bag metadata, on either backend.

``get_message('nav_msgs/msg/Odometry')`` returns the rosidl class under the ``rclpy`` backend
and a generated Cyclone DDS class under ``dds`` (see ``vnd_ros._idl``): vnd_msgs from its own
``.msg`` files, the few vendored third-party interfaces the bridges need (``msg_defs/<package>/
msg/*.msg`` next to this module, e.g. px4_msgs), and standard types from the rosbags typestore
of ``ros_distro()`` (Jazzy default, Humble selectable: rmw_dds_common/Gid is 16 bytes on Jazzy
and 24 on Humble).

``serialize``/``deserialize`` produce and read exactly the bytes on the wire and in rosbag2
files: a 4-byte encapsulation header ``00 01 00 00`` (CDR little endian) then classic CDR.
``message_definition`` and ``type_hash`` give what rosbag2/MCAP and ROS graph discovery need.
Everything is cached: repeated lookups are dictionary hits.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from vnd_ros import backend
from vnd_ros.names import dds_type_name, normalize_type_name
from vnd_ros.paths import find_package_share

__all__ = [
    "UnknownMessageTypeError",
    "dds_type_name",
    "deserialize",
    "from_rosbags",
    "get_message",
    "message_definition",
    "message_type_name",
    "normalize_type_name",
    "rosidl_message",
    "serialize",
    "to_rosbags",
    "type_hash",
    "typestore",
]

# rosbags typestore of each supported distro.
DISTRO_STORES = {"jazzy": Stores.ROS2_JAZZY, "humble": Stores.ROS2_HUMBLE}
OWN_PACKAGE = "vnd_msgs"  # interface package whose .msg files this repository ships
VENDORED_DIR = Path(__file__).resolve().parent / "msg_defs"  # <package>/msg/*.msg copies

_LOCK = threading.RLock()


class UnknownMessageTypeError(LookupError):
    """A message type name that neither vnd_msgs, the vendored definitions nor the distro's
    standard types define (or, under rclpy, whose rosidl package does not import)."""


def typestore(distro: str | None = None) -> Typestore:
    """rosbags typestore of ``distro`` (default ``ros_distro()``) with vnd_msgs registered.

    Bag writers use it for ``serialize_cdr``/``generate_msgdef``; do not register into it.
    """
    return _typestore(_distro(distro))


def get_message(name: str, *, distro: str | None = None) -> Any:
    """Message class of ROS type ``name`` (``'vnd_msgs/msg/Latent'``) for the active backend.

    ``distro`` (dds backend only) overrides ``ros_distro()``. Raises UnknownMessageTypeError
    naming the type when it is not defined.
    """
    environ = os.environ
    key = (
        name,
        distro,
        environ.get("VND_MIDDLEWARE"),
        environ.get("VND_ROS_DISTRO"),
        environ.get("ROS_DISTRO"),
    )
    cls = _LOOKUPS.get(key)
    if cls is None:
        cls = _LOOKUPS[key] = _get_message(name, _backend(key[2]), _distro(distro))
    return cls


def rosidl_message(name: str) -> type:
    """The rosidl (rclpy) class of ROS type ``name`` whatever the active backend, as
    ``rosidl_runtime_py.utilities.get_message`` (not on PyPI) gives it.

    Raises UnknownMessageTypeError saying how to build the package when it does not import."""
    return _import_rosidl(normalize_type_name(name))


def message_type_name(msg_or_cls: Any) -> str:
    """ROS type name (``pkg/msg/Name``) of a message instance or class of either backend."""
    cls = msg_or_cls if isinstance(msg_or_cls, type) else type(msg_or_cls)
    msgtype = getattr(cls, "__msgtype__", None)
    if msgtype is not None:
        return msgtype
    module = cls.__module__.split(".")  # rosidl: 'nav_msgs.msg._odometry'
    if len(module) >= 2 and module[1] == "msg":
        return f"{module[0]}/msg/{cls.__name__}"
    raise TypeError(f"{cls.__qualname__} is not a ROS message class")


def serialize(msg: Any) -> bytes:
    """CDR bytes of ``msg`` with the 4-byte encapsulation header (wire and rosbag2 format)."""
    if hasattr(type(msg), "__idl__"):
        return msg.serialize()  # compiled little-endian XCDR1 codec (vnd_ros._cdr)
    from rclpy.serialization import serialize_message  # rosidl message: only under rclpy

    return serialize_message(msg)


def deserialize(name_or_cls: str | type, data: bytes | bytearray | memoryview) -> Any:
    """Message decoded from CDR ``data`` (with encapsulation header) as ``name_or_cls``."""
    cls = get_message(name_or_cls) if isinstance(name_or_cls, str) else name_or_cls
    if bytes(data[:2]) not in (b"\x00\x00", b"\x00\x01"):
        raise ValueError(
            f"{message_type_name(cls)}: data does not start with a classic CDR header "
            f"(got {bytes(data[:4]).hex()})"
        )
    if "cyclonedds.idl" in sys.modules:  # the dds backend: its classes are IdlStructs
        from cyclonedds.idl import IdlStruct

        if isinstance(cls, type) and issubclass(cls, IdlStruct):
            return cls.deserialize(bytes(data))  # no copy of bytes
    from rclpy.serialization import deserialize_message

    return deserialize_message(bytes(data), cls)


def message_definition(name: str, *, distro: str | None = None) -> tuple[str, str]:
    """(definition text, encoding) of ``name`` for rosbag2/MCAP schemas: the ``ros2msg``
    text with every nested type appended after a ``====`` separator, as rosbags writes it."""
    msgtype = _known(normalize_type_name(name), distro)
    return _message_definition(msgtype, _distro(distro))


def type_hash(name: str, *, distro: str | None = None) -> str:
    """``RIHS01_<sha256 hex>`` type description hash of ``name`` (Iron and later)."""
    msgtype = _known(normalize_type_name(name), distro)
    return _type_hash(msgtype, _distro(distro))


def to_rosbags(msg: Any, *, distro: str | None = None) -> Any:
    """The rosbags typestore object equal to ``msg`` (through its CDR bytes: exact)."""
    return typestore(distro).deserialize_cdr(serialize(msg), message_type_name(msg))


def from_rosbags(obj: Any) -> Any:
    """The message of the active backend equal to a rosbags typestore object."""
    msgtype = obj.__msgtype__
    return deserialize(msgtype, bytes(typestore().serialize_cdr(obj, msgtype)))


# --- internals -------------------------------------------------------------------------------


@functools.cache
def _typestore(distro: str) -> Typestore:
    store = get_typestore(DISTRO_STORES[distro])  # a fresh store: registering stays private
    store.register(_own_fielddefs())
    return store


def _distro(distro: str | None) -> str:
    if distro is None:
        return backend.ros_distro()
    if distro not in DISTRO_STORES:
        raise ValueError(f"ROS distro {distro!r} not supported (use one of {tuple(DISTRO_STORES)})")
    return distro


@functools.lru_cache(maxsize=8)
def _backend(_env_value: str | None) -> str:
    """backend_name(), cached per value of VND_MIDDLEWARE (auto probes the file system)."""
    return backend.backend_name()


def _own_msg_dir() -> Path:
    return find_package_share(OWN_PACKAGE) / "msg"


@functools.lru_cache(maxsize=1)
def _own_fielddefs() -> dict:
    """rosbags field definitions parsed from vnd_msgs' and the vendored .msg files."""
    msg_dir = _own_msg_dir()
    own = sorted(msg_dir.glob("*.msg"))
    if not own:
        raise FileNotFoundError(f"no .msg files in {msg_dir}")
    fielddefs: dict = {}
    for path in own:
        fielddefs.update(_parse_msg(path, f"{OWN_PACKAGE}/msg/{path.stem}"))
    for path in sorted(VENDORED_DIR.glob("*/msg/*.msg")):
        fielddefs.update(_parse_msg(path, f"{path.parts[-3]}/msg/{path.stem}"))
    return fielddefs


def _parse_msg(path: Path, msgtype: str) -> dict:
    try:
        return get_types_from_msg(path.read_text(), msgtype)
    except Exception as error:  # rosbags raises its own parse errors: name the file
        raise ValueError(f"{path}: cannot parse message definition: {error}") from error


@functools.cache
def _factory(distro: str) -> Any:
    from vnd_ros._idl import IdlClassFactory  # imports cyclonedds: only the dds backend needs it

    return IdlClassFactory(_typestore(distro).fielddefs, module=f"{__name__}.generated.{distro}")


def _known(msgtype: str, distro: str | None) -> str:
    """``msgtype`` if the distro's typestore (with vnd_msgs) defines it, else the clear error."""
    if msgtype not in typestore(distro).fielddefs:
        raise _unknown(msgtype, _distro(distro))
    return msgtype


def _unknown(msgtype: str, distro: str) -> UnknownMessageTypeError:
    return UnknownMessageTypeError(
        f"unknown message type '{msgtype}': not among vnd_msgs ({_own_msg_dir()}), the "
        f"vendored definitions ({VENDORED_DIR}) nor the standard types of ROS 2 {distro} "
        "known to rosbags"
    )


_CLASSES: dict[tuple[str, str, str], type] = {}  # (backend, distro, name as given) -> class
# (name, distro argument, the environment variables that select backend and distro) -> class:
# the one dictionary hit of a repeated lookup.
_LOOKUPS: dict[tuple[str | None, ...], type] = {}


def _get_message(name: str, backend_choice: str, distro: str) -> type:
    key = (backend_choice, distro, name)
    cls = _CLASSES.get(key)
    if cls is None:
        with _LOCK:
            msgtype = normalize_type_name(name)
            if backend_choice == "rclpy":
                cls = _import_rosidl(msgtype)
            else:
                factory = _factory(distro)
                if msgtype not in factory:
                    raise _unknown(msgtype, distro)
                cls = factory.get(msgtype)
            _CLASSES[key] = cls
    return cls


def _import_rosidl(msgtype: str) -> type:
    package, _, class_name = msgtype.split("/")
    try:
        return getattr(importlib.import_module(f"{package}.msg"), class_name)
    except (ImportError, AttributeError) as error:
        raise UnknownMessageTypeError(
            f"message type '{msgtype}' is not available to rclpy: {package}.msg.{class_name} "
            f"does not import ({error}); build it with `make ros` (rclpy from the PyPI wheels) "
            "or `colcon build` and source install/setup.bash (a ROS 2 install)"
        ) from error


@functools.cache
def _message_definition(msgtype: str, distro: str) -> tuple[str, str]:
    text, _md5 = typestore(distro).generate_msgdef(msgtype, ros_version=2)
    return text, "ros2msg"


@functools.cache
def _type_hash(msgtype: str, distro: str) -> str:
    return typestore(distro).hash_rihs01(msgtype)
