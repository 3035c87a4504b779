"""Building blocks of the generated CDR codec functions (:mod:`vnd_ros._cdr` writes them): the
layout known at generation time, the source being written, runs of fixed-size fields packed
with one ``struct.Struct``, alignment and string emitters, and the helpers and compiler the
generated functions run with.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rosbags.typesys.base import Nodetype

HEADER = b"\x00\x01\x00\x00"  # CDR (XCDR1), little endian, no options
HEADER_SIZE = len(HEADER)
MAX_ALIGN = 8  # classic CDR aligns 8-byte primitives to 8
BODY = 1  # indentation level of a generated function's body, where every Struct run sits

# ROS primitive -> struct code (size = alignment = struct.calcsize(code)).
STRUCT_CODES = {
    "bool": "?",
    "int8": "b",
    "uint8": "B",
    "byte": "B",
    "char": "B",
    "octet": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float32": "f",
    "float64": "d",
}
BYTE_TYPES = frozenset({"uint8", "byte", "char", "octet"})


@dataclass
class Layout:
    """What generation time knows about the write/read position: pos - 4 == residue mod known."""

    known: int = MAX_ALIGN  # largest alignment whose residue is known (1 = nothing known)
    residue: int = 0

    def advance(self, size: int) -> None:
        self.residue = (self.residue + size) % self.known

    def static_padding(self, alignment: int) -> int | None:
        """Padding before an item of ``alignment``, or None when it depends on the data."""
        if alignment > self.known:
            return None
        return -self.residue % alignment

    def aligned_at_runtime(self, alignment: int) -> None:
        self.known, self.residue = alignment, 0

    def forget(self, alignment: int = 1) -> None:
        """After variable-length data only ``alignment`` (0 residue) is known."""
        self.known, self.residue = alignment, 0


@dataclass
class Source:
    """Lines of one generated function plus the constants it refers to."""

    lines: list[str] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)
    counter: int = 0

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def constant(self, prefix: str, value: Any) -> str:
        name = self.name(prefix)
        self.constants[name] = value
        return name


class PackRun:
    """Consecutive fixed-size fields written with one precompiled Struct."""

    def __init__(self, source: Source, layout: Layout) -> None:
        self.source, self.layout = source, layout
        self.format = ""  # struct codes of the fields gathered so far
        self.arguments: list[str] = []  # source expressions of their values

    def add(self, code: str, value: str, alignment: int | None = None) -> None:
        alignment = alignment or struct.calcsize(code)
        padding = self.layout.static_padding(alignment)
        if padding is None:
            self.flush()
            emit_align(self.source, self.layout, alignment, "out", BODY)
            padding = 0
        self.format += "x" * padding + code
        self.arguments.append(value)
        self.layout.advance(padding + struct.calcsize(code))

    def flush(self) -> None:
        if self.format:
            packer = self.source.constant("S", struct.Struct("<" + self.format))
            self.source.emit(BODY, f"out += {packer}.pack({', '.join(self.arguments)})")
            self.format, self.arguments = "", []


class UnpackRun:
    """Consecutive fixed-size fields read with one precompiled Struct; returns expressions."""

    def __init__(self, source: Source, layout: Layout) -> None:
        self.source, self.layout = source, layout
        self.format = ""
        self.variable = ""  # name of the tuple the pending Struct unpacks into
        self.count = 0  # values in that tuple so far

    def add(self, code: str, alignment: int | None = None) -> str:
        alignment = alignment or struct.calcsize(code)
        padding = self.layout.static_padding(alignment)
        if padding is None:
            self.flush()
            emit_align_read(self.source, self.layout, alignment, BODY)
            padding = 0
        if not self.format:
            self.variable = self.source.name("v")
        self.format += "x" * padding + code
        self.layout.advance(padding + struct.calcsize(code))
        first, repeat = self.count, code[:-1]
        if code.endswith("s") or not repeat:  # one value: a scalar, or bytes of an uint8[N]
            self.count += 1
            return f"{self.variable}[{first}]"
        self.count += int(repeat)
        return f"list({self.variable}[{first}:{self.count}])"

    def flush(self) -> None:
        if self.format:
            unpacker = self.source.constant("S", struct.Struct("<" + self.format))
            self.source.emit(BODY, f"{self.variable} = {unpacker}.unpack_from(buf, pos)")
            self.source.emit(BODY, f"pos += {unpacker}.size")
            self.format, self.count = "", 0


def primitive_base(element_kind: Nodetype, element: Any) -> str | None:
    """The primitive type name of an array/sequence element; None for strings and messages."""
    if element_kind == Nodetype.BASE and element[0] != "string":
        return element[0]
    return None


def size_of(base: str) -> int:
    """Size (= alignment) in bytes of primitive ``base``."""
    return struct.calcsize(STRUCT_CODES[base])


def emit_align(source: Source, layout: Layout, alignment: int, out: str, indent: int) -> None:
    """Pad buffer ``out`` to ``alignment``: a constant when the layout knows it, else computed."""
    padding = layout.static_padding(alignment)
    if padding is None:
        source.emit(indent, f"{out} += _ZEROS[(4 - len({out})) % {alignment}]")
        layout.aligned_at_runtime(alignment)
    elif padding:
        source.emit(indent, f"{out} += _ZEROS[{padding}]")
        layout.advance(padding)


def emit_align_read(source: Source, layout: Layout, alignment: int, indent: int) -> None:
    """Skip the read position ``pos`` to ``alignment`` (constant when known)."""
    padding = layout.static_padding(alignment)
    if padding is None:
        source.emit(indent, f"pos += (4 - pos) % {alignment}")
        layout.aligned_at_runtime(alignment)
    elif padding:
        source.emit(indent, f"pos += {padding}")
        layout.advance(padding)


def emit_encode_string(source: Source, layout: Layout, value: str, bound: int, indent: int) -> None:
    """Append string expression ``value`` (length with the NUL, UTF-8, NUL; ``bound`` checked)."""
    encoded = source.name("b")
    source.emit(indent, f"{encoded} = {value}.encode()")
    if bound:
        source.emit(indent, f"_check_bound(len({encoded}), {bound}, {value!r})")
    emit_align(source, layout, 4, "out", indent)
    source.emit(indent, f"out += _U32.pack(len({encoded}) + 1)")
    source.emit(indent, f"out += {encoded}")
    source.emit(indent, "out += b'\\x00'")
    layout.forget()


def emit_decode_string(source: Source, layout: Layout, indent: int) -> str:
    """Read one string; returns the name of the variable holding it."""
    length, text = source.name("n"), source.name("t")
    emit_align_read(source, layout, 4, indent)
    source.emit(indent, f"{length} = _U32.unpack_from(buf, pos)[0]")
    source.emit(indent, f"{text} = buf[pos + 4:pos + 3 + {length}].decode()")
    source.emit(indent, f"pos += 4 + {length}")
    layout.forget()
    return text


def _as_bytes(value: Any) -> bytes | memoryview:
    """A uint8[] value as a buffer of single bytes (bytes, bytearray, memoryview, uint8 numpy
    array or a list of ints); a wider numpy array is refused instead of sent as raw bytes."""
    if type(value) is bytes:
        return value
    if isinstance(value, list | tuple):
        return bytes(value)
    view = memoryview(value)
    if view.itemsize != 1:
        raise TypeError(f"uint8[] field got items of {view.itemsize} bytes ({view.format!r})")
    return view.cast("B")


def _check_length(value: Any, length: int, what: str) -> None:
    if len(value) != length:
        raise ValueError(f"{what}: expected {length} elements, got {len(value)}")


def _check_bound(count: int, bound: int, what: str) -> None:
    if count > bound:
        raise ValueError(f"{what}: {count} elements exceed the bound {bound}")


_ZEROS = [bytes(n) for n in range(MAX_ALIGN)]
_GLOBALS = {
    "_U32": struct.Struct("<I"),
    "_ZEROS": _ZEROS,
    "_pack": struct.pack,
    "_unpack_from": struct.unpack_from,
    "_as_bytes": _as_bytes,
    "_check_length": _check_length,
    "_check_bound": _check_bound,
}


def define(source: Source, name: str, signature: str) -> Callable:
    """Compile the generated function (the text is built only from type definitions)."""
    text = f"def {name}({signature}):\n" + "\n".join(source.lines or ["    pass"]) + "\n"
    namespace = {**_GLOBALS, **source.constants}
    exec(compile(text, f"<cdr {name}>", "exec"), namespace)
    function = namespace[name]
    function.__source__ = text  # for debugging: print(encoder.__source__)
    return function
