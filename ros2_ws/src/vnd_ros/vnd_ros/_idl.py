"""Generate Cyclone DDS ``IdlStruct`` classes from rosbags message field definitions.

The generated classes speak ROS 2's wire format (classic CDR, XCDR1, ``@final`` structs, DDS
type name ``pkg::msg::dds_::Name_``) and construct like rosidl classes: keyword arguments with a
default for every field, nested messages default-constructed, fixed arrays filled with zeros,
constants as class attributes.

Python value types of the fields:
    bool, int*/uint*, float*      -> bool, int, float
    string                        -> str
    uint8/byte/char[] and [N]     -> bytes (one CDR block copy instead of one int per byte)
    other primitive[] and [N]     -> list of numbers (numpy arrays are accepted when writing)
    Msg, Msg[], Msg[N]            -> generated class, list of generated classes

``serialize``/``deserialize`` of the classes (which cyclonedds' DataWriter and DataReader call)
run the compiled codec of ``vnd_ros._cdr`` for little-endian XCDR1, 10x faster than
cyclonedds' interpreted machinery, which stays in place for other encodings.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from cyclonedds.idl import IdlMeta, IdlStruct
from cyclonedds.idl import types as idl_types
from rosbags.interfaces.typing import Typesdict
from rosbags.typesys.base import Nodetype

from vnd_ros._cdr import CodecFactory
from vnd_ros.cyclone_compat import (
    LITTLE_ENDIAN,
    ByteArrayMachine,
    BytesMachine,
    Machine,
    PlainCdrV2SequenceOfPrimitiveMachine,
    idl_array,
    idl_bounded_str,
    idl_deserialize,
    idl_sequence,
    replace_member_machines,
    struct_namespace,
)
from vnd_ros.names import dds_type_name

CDR_LE_PREFIX = b"\x00\x01"  # first two header bytes of little-endian classic CDR

# One-byte element types that become ``bytes`` when they form an array or a sequence.
BYTE_TYPES = frozenset({"uint8", "byte", "char", "octet"})

# ROS primitive name -> cyclonedds annotation. byte/char/octet are one unsigned byte on the wire.
PRIMITIVE_ANNOTATIONS: dict[str, Any] = {
    "bool": bool,
    "int8": idl_types.int8,
    "uint8": idl_types.uint8,
    "byte": idl_types.uint8,
    "char": idl_types.uint8,
    "octet": idl_types.uint8,
    "int16": idl_types.int16,
    "uint16": idl_types.uint16,
    "int32": idl_types.int32,
    "uint32": idl_types.uint32,
    "int64": idl_types.int64,
    "uint64": idl_types.uint64,
    "float32": idl_types.float32,
    "float64": idl_types.float64,
}

# Default value of one primitive element (rosidl uses the same zeros).
PRIMITIVE_DEFAULTS: dict[str, Any] = {
    name: (False if name == "bool" else 0.0 if name.startswith("float") else 0)
    for name in PRIMITIVE_ANNOTATIONS
}

# Field default values declared in standard .msg files (rosbags' parser drops them); rosidl
# classes honour them, so the generated classes do too.
DECLARED_DEFAULTS: dict[str, dict[str, Any]] = {"geometry_msgs/msg/Quaternion": {"w": 1.0}}

# rosbags field definitions: type name -> (constants, fields)
FieldDefs = Typesdict


class IdlClassFactory:
    """Builds (once) and caches the IdlStruct class of every message type of one typestore.

    Args:
        fielddefs: rosbags field definitions (``Typestore.fielddefs``): type name ->
            (constants, fields).
        module: value of ``__module__`` of the generated classes (shows in reprs and tracebacks).
    """

    def __init__(self, fielddefs: FieldDefs, module: str) -> None:
        self._fielddefs = fielddefs
        self._module = module
        self._classes: dict[str, type[IdlStruct]] = {}
        self._lock = threading.RLock()
        self._codecs = CodecFactory(fielddefs, self.get)

    def __contains__(self, msgtype: str) -> bool:
        return msgtype in self._fielddefs

    def get(self, msgtype: str) -> type[IdlStruct]:
        """The generated class of ``msgtype`` (``pkg/msg/Name``); KeyError when unknown."""
        cls = self._classes.get(msgtype)
        if cls is not None:
            return cls
        with self._lock:
            if msgtype not in self._classes:
                self._classes[msgtype] = self._build(msgtype)
            return self._classes[msgtype]

    def _build(self, msgtype: str) -> type[IdlStruct]:
        constants, fields = self._fielddefs[msgtype]
        # Final extensibility keeps XCDR1 (an appendable/mutable struct would switch to XCDR2).
        namespace = struct_namespace(msgtype.rsplit("/", 1)[1], dds_type_name(msgtype))
        declared = DECLARED_DEFAULTS.get(msgtype, {})
        for field_name, fielddesc in fields:
            annotation, default_factory = self._field(msgtype, field_name, fielddesc)
            if field_name in declared:
                default_factory = _constant(declared[field_name])
            namespace["__annotations__"][field_name] = annotation
            namespace[field_name] = dataclasses.field(default_factory=default_factory)
        for const_name, _const_type, value in constants:
            namespace[const_name] = value
        namespace["__msgtype__"] = msgtype
        namespace["__module__"] = self._module
        namespace["__qualname__"] = msgtype.rsplit("/", 1)[1]
        codec = _Codec()
        namespace.update(codec.methods())
        built = IdlMeta(namespace["__qualname__"], (IdlStruct,), namespace)
        if not issubclass(built, IdlStruct):  # what IdlMeta makes of an IdlStruct base
            raise TypeError(f"{msgtype}: IdlMeta built no IdlStruct class")
        cls = dataclasses.dataclass(built)
        _adapt_machines(cls, fields)
        self._classes[msgtype] = cls  # the decoder refers to the class itself
        codec.encode = self._codecs.encoder(msgtype)
        codec.decode = self._codecs.decoder(msgtype)
        return cls

    def _field(self, msgtype: str, field_name: str, fielddesc: tuple) -> tuple[Any, Callable]:
        """(annotation, default factory) of one field."""
        kind, detail = fielddesc
        if kind == Nodetype.BASE:
            return _base_field(msgtype, field_name, detail)
        if kind == Nodetype.NAME:
            nested = self.get(detail)
            return nested, nested
        if kind in (Nodetype.ARRAY, Nodetype.SEQUENCE):
            (element_kind, element_detail), count = detail
            if element_kind == Nodetype.BASE:
                return _primitive_collection(msgtype, field_name, element_detail, kind, count)
            nested = self.get(element_detail)
            if kind == Nodetype.ARRAY:
                return idl_array(nested, count), lambda: [nested() for _ in range(count)]
            return idl_sequence(nested, count), list
        raise TypeError(f"{msgtype}.{field_name}: unsupported field kind {kind!r}")


class _Codec:
    """The compiled codec of one generated class, routed through IdlStruct.serialize and
    deserialize (what DataWriter.write and DataReader.take call) for little-endian XCDR1;
    anything else (a big-endian peer, XCDR2, a caller's buffer) keeps cyclonedds' own
    machinery. The class exists before its codec: ``encode`` and ``decode`` are set after."""

    encode: Callable[[Any], bytes]  # message -> CDR with header
    decode: Callable[[Any], Any]  # CDR with header -> message

    def methods(self) -> dict[str, Any]:
        """``serialize`` and ``deserialize`` for the namespace of the generated class."""
        codec = self

        def serialize(
            self: Any, buffer: Any = None, endianness: Any = None, use_version_2: bool | None = None
        ) -> bytes:
            if buffer is None and not use_version_2 and endianness in (None, LITTLE_ENDIAN):
                return codec.encode(self)
            return IdlStruct.serialize(self, buffer, endianness, use_version_2)

        def deserialize(
            klass: type[IdlStruct],
            data: Any,
            has_header: bool = True,
            use_version_2: bool | None = None,
        ) -> Any:
            if has_header and use_version_2 is None and bytes(data[:2]) == CDR_LE_PREFIX:
                return codec.decode(data)
            return idl_deserialize(klass, data, has_header=has_header, use_version_2=use_version_2)

        return {"serialize": serialize, "deserialize": classmethod(deserialize)}


def _byte_collection(fielddesc: tuple) -> tuple[Nodetype, int] | None:
    """(ARRAY or SEQUENCE, length or bound) when the field is a collection of bytes."""
    kind, detail = fielddesc
    if kind not in (Nodetype.ARRAY, Nodetype.SEQUENCE):
        return None
    (element_kind, element_detail), count = detail
    if element_kind == Nodetype.BASE and element_detail[0] in BYTE_TYPES:
        return kind, count
    return None


def _as_bytes(value: Any) -> bytes | bytearray:
    """Any buffer (bytes, bytearray, memoryview, uint8 numpy array) or a list of ints."""
    if isinstance(value, bytes | bytearray):
        return value
    if isinstance(value, int):  # bytes(5) would silently mean five zero bytes
        raise TypeError(f"expected bytes, got int {value}")
    return bytes(value)


class _ByteSequenceMachine(BytesMachine):
    """uint8[] as bytes: uint32 length then the raw bytes, copied as one block."""

    def serialize(self, buffer: Any, value: Any, *args: Any, **kwargs: Any) -> None:
        super().serialize(buffer, _as_bytes(value), *args, **kwargs)


class _ByteArrayMachine(ByteArrayMachine):
    """uint8[N] as bytes of exactly N."""

    def serialize(self, buffer: Any, value: Any, *args: Any, **kwargs: Any) -> None:
        super().serialize(buffer, _as_bytes(value), *args, **kwargs)

    def default_initialize(self) -> bytes:
        return bytes(self.size)


class _PrimitiveSequenceMachine(PlainCdrV2SequenceOfPrimitiveMachine):
    """A primitive sequence that also accepts numpy arrays (the base tests ``if value:``)."""

    def serialize(self, buffer: Any, value: Any, *args: Any, **kwargs: Any) -> None:
        buffer.align(4)
        buffer.write("I", 4, len(value))
        if len(value):
            buffer.align(self.alignment)
            buffer.write_multi(f"{len(value)}{self.code}", self.size * len(value), *value)


def _primitive_sequence(fielddesc: tuple) -> str | None:
    """Element type name when the field is a sequence of non-byte primitives."""
    kind, detail = fielddesc
    if kind != Nodetype.SEQUENCE:
        return None
    (element_kind, element_detail), _bound = detail
    base = element_detail[0] if element_kind == Nodetype.BASE else None
    return base if base in PRIMITIVE_ANNOTATIONS and base not in BYTE_TYPES else None


def _adapt_machines(cls: type[IdlStruct], fields: list[tuple[str, tuple]]) -> None:
    """Let uint8[] and uint8[N] fields carry ``bytes``: the adaptation cyclonedds-python needs;
    and let primitive sequences take numpy arrays.

    The fields are declared ``sequence[uint8]``/``array[uint8, N]`` so that the XTypes type
    object (which cannot describe a plain ``bytes`` annotation) says ``sequence<uint8>`` like
    rosidl's IDL, but for a sequence cyclonedds would then pack and unpack one Python int per
    byte (about 150 ms per MB). Swapping in byte machines after the machines are built writes
    the same CDR (uint32 length, raw bytes) with one block copy and reads back ``bytes``.
    """
    swaps: dict[str, Machine] = {}
    for name, fielddesc in fields:
        collection = _byte_collection(fielddesc)
        if collection is not None:
            kind, count = collection
            swaps[name] = (
                _ByteArrayMachine(count) if kind == Nodetype.ARRAY else _ByteSequenceMachine()
            )
        elif (element := _primitive_sequence(fielddesc)) is not None:
            swaps[name] = _PrimitiveSequenceMachine(PRIMITIVE_ANNOTATIONS[element])
    if swaps:
        replace_member_machines(cls, swaps)


def _constant(value: Any) -> Callable[[], Any]:
    """A default factory returning ``value`` (an immutable scalar)."""
    return lambda: value


def _base_field(msgtype: str, field_name: str, detail: tuple[str, int]) -> tuple[Any, Callable]:
    """Annotation and default of a scalar field (primitive or string)."""
    base, bound = detail
    if base == "string":
        return (idl_bounded_str(bound) if bound else str), str
    if base in PRIMITIVE_ANNOTATIONS:
        return PRIMITIVE_ANNOTATIONS[base], _constant(PRIMITIVE_DEFAULTS[base])
    raise TypeError(f"{msgtype}.{field_name}: type {base!r} is not supported (avoid wstring)")


def _primitive_collection(
    msgtype: str, field_name: str, element: tuple[str, int], kind: Nodetype, count: int
) -> tuple[Any, Callable]:
    """Annotation and default of an array (kind ARRAY, count = length) or a sequence (count =
    upper bound, 0 = unbounded) of primitives or strings."""
    base, bound = element
    if base in BYTE_TYPES:
        # bytes: cyclonedds writes a sequence<octet> as one block; a fixed array[uint8, N]
        # likewise reads back as bytes.
        if kind == Nodetype.ARRAY:
            return idl_array(idl_types.uint8, count), lambda: bytes(count)
        return idl_sequence(idl_types.uint8, count), bytes  # machine swapped by _adapt_machines
    if base == "string":
        element_annotation: Any = idl_bounded_str(bound) if bound else str
        default: Any = ""
    elif base in PRIMITIVE_ANNOTATIONS:
        element_annotation = PRIMITIVE_ANNOTATIONS[base]
        default = PRIMITIVE_DEFAULTS[base]
    else:
        raise TypeError(f"{msgtype}.{field_name}: element type {base!r} is not supported")
    if kind == Nodetype.ARRAY:
        return idl_array(element_annotation, count), lambda: [default] * count
    return idl_sequence(element_annotation, count), list
