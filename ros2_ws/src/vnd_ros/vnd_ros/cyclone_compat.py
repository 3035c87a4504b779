"""The private parts of cyclonedds-python the dds backend relies on, all in this one module.

cyclonedds-python's public API (DataWriter.write, DataReader.take, Entity deletion at garbage
collection) costs too much on the 50 Hz control path or deletes entities too late, so the dds
backend reaches under it in a few places. Each private name is imported or touched here only,
with what it is for; everything else in vnd_ros uses the functions below. The package version
is pinned (requirements.txt, vnd_ros/setup.py) and ``test/test_cyclone_compat.py`` fails when an
upgrade changes any of the following:

``cyclonedds._clayer.ddspy_write(writer_ref, data)``
    Writes one already-serialized CDR sample (encapsulation header included) from ``bytes``.
    ``DataWriter.write`` would call the type's ``serialize`` itself; the backend serializes
    with its compiled codec first (``vnd_ros._cdr``) and hands over the bytes. Returns the DDS
    return code (negative on error); the bytes must be a multiple of 4 long.
``cyclonedds._clayer.ddspy_take(reader_ref, mask, limit)``
    Takes up to ``limit`` samples as ``[(cdr_bytes, SampleInfo), ...]`` (or a negative DDS
    return code) without deserializing them: the backend decodes with its own codec, counts
    what does not decode, and can hand raw bytes to ``raw`` subscriptions and the latency probe.
``Entity._ref``
    The C entity handle the two functions above take.
``Entity._entities`` and ``Entity._delete(ref)``
    cyclonedds deletes an entity when Python collects the object, and tracks live ones in the
    class-wide weak map ``_entities``. Deleting a participant or a writer *now* (peers see it
    leave at once, not after a lease) means calling ``_delete`` and dropping the map entry, so
    the later ``__del__`` does not delete the handle twice. An entity whose parent's deletion
    already took it down is dropped from the map only.
``cyclonedds.idl._support.Endianness``
    The byte-order argument of ``IdlStruct.serialize``; ROS 2 writes little endian.
``cyclonedds.idl._machinery.BytesMachine``, ``ByteArrayMachine``,
``PlainCdrV2SequenceOfPrimitiveMachine``
    The per-field (de)serializers of the interpreted codec. The backend subclasses them so
    ``uint8[]`` fields carry ``bytes`` as one block copy and primitive sequences accept numpy
    arrays (``vnd_ros._idl``).
``cls.__idl__`` (``populate()``, ``v1_machine``, ``v2_machine``, ``members_machines``,
``deserialize``)
    The per-class codec state: its member machines are swapped for the subclasses above
    after it is built, and its ``deserialize`` decodes what the compiled codec does not handle
    (big endian, XCDR2).
``IdlMeta.__prepare__(name, bases, typename=...)`` and ``__idl_annotations__``
    The namespace a class statement would get; filled programmatically to generate message
    classes from .msg definitions, with ``extensibility = "final"`` as ``@annotate.final``
    would set it (final structs keep XCDR1, as rmw_cyclonedds writes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cyclonedds._clayer import ddspy_take, ddspy_write
from cyclonedds.core import Entity
from cyclonedds.idl import IdlMeta, IdlStruct
from cyclonedds.idl import types as idl_types
from cyclonedds.idl._machinery import (
    ByteArrayMachine,
    BytesMachine,
    Machine,
    PlainCdrV2SequenceOfPrimitiveMachine,
    StructMachine,
)
from cyclonedds.idl._support import Endianness

__all__ = [
    "LITTLE_ENDIAN",
    "ByteArrayMachine",
    "BytesMachine",
    "Endianness",
    "Machine",
    "PlainCdrV2SequenceOfPrimitiveMachine",
    "delete_entity",
    "entity_is_live",
    "forget_entity",
    "idl_array",
    "idl_bounded_str",
    "idl_deserialize",
    "idl_sequence",
    "replace_member_machines",
    "struct_namespace",
    "take_cdr",
    "write_cdr",
]

LITTLE_ENDIAN = Endianness.Little  # ROS 2 writes little-endian CDR


def write_cdr(writer: Entity, data: bytes) -> int:
    """Write one serialized sample (4-byte encapsulation header first, length a multiple of 4)
    on ``writer`` (a DataWriter); the DDS return code, negative on error."""
    return ddspy_write(writer._ref, data)


def take_cdr(reader: Entity, mask: int, limit: int) -> list[tuple[bytes, Any]] | int:
    """Take up to ``limit`` samples matching ``mask`` (SampleState | ViewState | InstanceState)
    from ``reader`` (a DataReader) undecoded: ``[(cdr_bytes, SampleInfo), ...]`` oldest first,
    or the negative DDS return code."""
    return ddspy_take(reader._ref, mask, limit)


def entity_is_live(entity: Entity) -> bool:
    """True until ``entity`` is deleted (by :func:`delete_entity` or by garbage collection)."""
    return entity._ref in Entity._entities


def delete_entity(entity: Entity | None) -> None:
    """Delete a DDS entity now, not when Python collects it; a second delete is a no-op."""
    if entity is not None and entity._ref in Entity._entities:
        del Entity._entities[entity._ref]
        entity._delete(entity._ref)


def forget_entity(entity: Entity | None) -> None:
    """Stop Python from deleting ``entity`` later: its parent's deletion already did."""
    if entity is not None:
        Entity._entities.pop(entity._ref, None)


def struct_namespace(name: str, typename: str) -> dict[str, Any]:
    """The class namespace of a final (XCDR1) IdlStruct called ``name`` with DDS type name
    ``typename``; fill ``__annotations__`` and the field defaults, then build the class with
    ``IdlMeta(name, (IdlStruct,), namespace)``."""
    namespace = IdlMeta.__prepare__(name, (IdlStruct,), typename=typename)
    if not isinstance(namespace, dict):  # typed as a Mapping; the class body needs a dict
        raise TypeError(f"IdlMeta.__prepare__ returned a {type(namespace).__name__}, not a dict")
    namespace["__idl_annotations__"]["extensibility"] = "final"
    return namespace


def replace_member_machines(cls: type[IdlStruct], machines: Mapping[str, Machine]) -> None:
    """Serialize the fields named in ``machines`` with those machine objects (both the XCDR1
    and the XCDR2 codec of the IdlStruct class ``cls``)."""
    cls.__idl__.populate()
    for machine in (cls.__idl__.v1_machine, cls.__idl__.v2_machine):
        if not isinstance(machine, StructMachine):  # what an IdlStruct class is coded with
            raise TypeError(f"{cls.__name__} is coded by a {type(machine).__name__}")
        machine.members_machines.update(machines)


def idl_deserialize(
    cls: type[IdlStruct], data: Any, has_header: bool = True, use_version_2: bool | None = None
) -> Any:
    """Decode ``data`` with cyclonedds' interpreted codec of ``cls`` (any byte order, XCDR1 or
    XCDR2), bypassing an overridden ``cls.deserialize``."""
    if use_version_2 is None:  # the codec's own choice (the header's version when present)
        return cls.__idl__.deserialize(data, has_header=has_header)
    return cls.__idl__.deserialize(data, has_header=has_header, use_version_2=use_version_2)


# cyclonedds builds field annotations by subscripting its annotation classes at run time
# (``array[T, N]``); their type information does not declare that, so they are used untyped.
_ANNOTATIONS: Any = idl_types


def idl_array(element: Any, length: int) -> Any:
    """The annotation ``array[element, length]`` (a fixed-length array field)."""
    return _ANNOTATIONS.array[element, length]


def idl_sequence(element: Any, bound: int = 0) -> Any:
    """The annotation ``sequence[element]`` (``sequence[element, bound]`` with a bound)."""
    if bound:
        return _ANNOTATIONS.sequence[element, bound]
    return _ANNOTATIONS.sequence[element]


def idl_bounded_str(bound: int) -> Any:
    """The annotation ``bounded_str[bound]`` (a string of at most ``bound`` characters)."""
    return _ANNOTATIONS.bounded_str[bound]
