"""Compiled classic-CDR (XCDR1, little endian) codecs for the generated message classes.

cyclonedds-python interprets a tree of per-field "machines" for every sample (about 60 us for a
60-byte message here). This module writes, once per message type, a straight-line Python
function from the rosbags field definitions: consecutive fixed-size fields (also across nested
messages) are packed with one precompiled ``struct.Struct`` whose padding is worked out at
generation time wherever the offset modulo the alignment is known, and aligned at run time only
after variable-length fields (strings, sequences). The bytes are identical to cyclonedds' and to
rosbags' CDR (the test suite checks that on randomized messages).

CDR rules used: primitives align to their size (8 at most) relative to the start of the
payload, after the 4-byte encapsulation header; strings are uint32 length (with the NUL) + UTF-8
+ NUL; sequences are uint32 count then the elements (aligned only when there is at least one);
arrays are the elements; structs are their fields in order, no padding of their own.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rosbags.typesys.base import Nodetype

# (primitive type name, string bound or 0) of a scalar field
_Scalar = tuple[str, int]
# an array's or sequence's element: (kind, primitive _Scalar or message type name)
_Element = tuple[Nodetype, Any]
# ((element kind, element), length of an array or bound of a sequence, 0 = unbounded)
_Collection = tuple[_Element, int]

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

Encoder = Callable[[Any], bytes]
Decoder = Callable[[bytes], Any]


@dataclass
class _Layout:
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
class _Source:
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


class CodecFactory:
    """Builds and caches the encoder and decoder of each message type.

    Args:
        fielddefs: rosbags field definitions (type name -> (constants, fields)).
        class_of: the generated message class of a type name.
    """

    def __init__(self, fielddefs: dict, class_of: Callable[[str], type]) -> None:
        self._fielddefs = fielddefs
        self._class_of = class_of
        self._encoders: dict[str, Encoder] = {}
        self._decoders: dict[str, Decoder] = {}
        self._element_encoders: dict[str, Callable] = {}
        self._element_decoders: dict[str, Callable] = {}

    def encoder(self, msgtype: str) -> Encoder:
        """``encode(msg) -> bytes``: encapsulation header + CDR."""
        if msgtype not in self._encoders:
            self._encoders[msgtype] = self._compile_encoder(msgtype, top_level=True)
        return self._encoders[msgtype]

    def decoder(self, msgtype: str) -> Decoder:
        """``decode(data) -> msg`` for data that starts with the little-endian CDR header."""
        if msgtype not in self._decoders:
            self._decoders[msgtype] = self._compile_decoder(msgtype, top_level=True)
        return self._decoders[msgtype]

    def _element_encoder(self, msgtype: str) -> Callable:
        if msgtype not in self._element_encoders:
            self._element_encoders[msgtype] = self._compile_encoder(msgtype, top_level=False)
        return self._element_encoders[msgtype]

    def _element_decoder(self, msgtype: str) -> Callable:
        if msgtype not in self._element_decoders:
            self._element_decoders[msgtype] = self._compile_decoder(msgtype, top_level=False)
        return self._element_decoders[msgtype]

    # --- encoder --------------------------------------------------------------------------

    def _compile_encoder(self, msgtype: str, top_level: bool) -> Callable:
        """Top level: ``f(msg) -> bytes``; element of an array: ``f(out, msg)`` appending."""
        source = _Source()
        layout = _Layout() if top_level else _Layout(known=1)
        run = _PackRun(source, layout)
        if top_level:
            source.emit(BODY, f"out = bytearray({HEADER!r})")
        self._encode_fields(source, run, msgtype, "msg", indent=BODY)
        run.flush()
        if top_level:
            source.emit(BODY, "return bytes(out)")
        signature = "msg" if top_level else "out, msg"
        return _define(source, f"encode_{msgtype.replace('/', '_')}", signature)

    def _encode_fields(
        self, source: _Source, run: _PackRun, msgtype: str, obj: str, indent: int
    ) -> None:
        for name, (kind, detail) in self._fielddefs[msgtype][1]:
            value = f"{obj}.{name}"
            if kind == Nodetype.NAME:
                self._encode_fields(source, run, detail, value, indent)
            elif kind == Nodetype.BASE:
                self._encode_scalar(source, run, detail, value, indent)
            elif kind == Nodetype.ARRAY:
                self._encode_array(source, run, detail, value, indent)
            else:
                self._encode_sequence(source, run, detail, value, indent)

    def _encode_scalar(
        self, source: _Source, run: _PackRun, detail: _Scalar, value: str, indent: int
    ) -> None:
        base, bound = detail
        if base == "string":
            run.flush()
            _encode_string(source, run.layout, value, bound, indent)
        else:
            run.add(STRUCT_CODES[base], value)

    def _encode_array(
        self, source: _Source, run: _PackRun, detail: _Collection, value: str, indent: int
    ) -> None:
        (element_kind, element), length = detail
        base = _primitive_base(element_kind, element)
        if base in BYTE_TYPES:
            source.emit(indent, f"_check_length({value}, {length}, {value!r})")
            run.add(f"{length}s", f"_as_bytes({value})", alignment=1)
        elif base is not None:
            source.emit(indent, f"_check_length({value}, {length}, {value!r})")
            run.add(f"{length}{STRUCT_CODES[base]}", f"*{value}", alignment=_size(base))
        else:
            run.flush()
            source.emit(indent, f"_check_length({value}, {length}, {value!r})")
            self._encode_elements(source, run.layout, element_kind, element, value, indent)

    def _encode_sequence(
        self, source: _Source, run: _PackRun, detail: _Collection, value: str, indent: int
    ) -> None:
        (element_kind, element), max_length = detail
        base = _primitive_base(element_kind, element)
        count = source.name("n")
        run.flush()
        if base in BYTE_TYPES:
            converted = source.name("y")
            source.emit(indent, f"{converted} = _as_bytes({value})")
            value = converted
        source.emit(indent, f"{count} = len({value})")
        if max_length:
            source.emit(indent, f"_check_bound({count}, {max_length}, {value!r})")
        _emit_align(source, run.layout, 4, "out", indent)
        source.emit(indent, f"out += _U32.pack({count})")
        run.layout.advance(4)
        if base in BYTE_TYPES:
            source.emit(indent, f"out += {value}")
            run.layout.forget()
        elif base is not None:
            size = _size(base)
            source.emit(indent, f"if {count}:")
            _emit_align(source, run.layout, size, "out", indent + 1)
            code = STRUCT_CODES[base]
            source.emit(indent + 1, f"out += _pack(f'<{{{count}}}{code}', *{value})")
            run.layout.forget(min(4, size))
        else:
            self._encode_elements(source, run.layout, element_kind, element, value, indent)

    def _encode_elements(
        self,
        source: _Source,
        layout: _Layout,
        element_kind: Nodetype,
        element: Any,
        value: str,
        indent: int,
    ) -> None:
        """A loop over strings or messages (arrays and sequences)."""
        item = source.name("e")
        source.emit(indent, f"for {item} in {value}:")
        if element_kind == Nodetype.NAME:
            function = source.constant("enc", self._element_encoder(element))
            source.emit(indent + 1, f"{function}(out, {item})")
        else:
            _encode_string(source, _Layout(known=1), item, element[1], indent + 1)
        layout.forget()

    # --- decoder --------------------------------------------------------------------------

    def _compile_decoder(self, msgtype: str, top_level: bool) -> Callable:
        """Top level: ``f(data) -> msg``; element of an array: ``f(buf, pos) -> (msg, pos)``."""
        source = _Source()
        layout = _Layout() if top_level else _Layout(known=1)
        run = _UnpackRun(source, layout)
        if top_level:
            source.emit(BODY, "if type(buf) is not bytes:")
            source.emit(BODY + 1, "buf = bytes(buf)")
            source.emit(BODY, f"pos = {HEADER_SIZE}")
        expression = self._decode_message(source, run, msgtype, indent=BODY)
        run.flush()
        if top_level:
            source.emit(BODY, f"return {expression}")
            return _define(source, f"decode_{msgtype.replace('/', '_')}", "buf")
        source.emit(BODY, f"return {expression}, pos")
        return _define(source, f"decode_{msgtype.replace('/', '_')}", "buf, pos")

    def _decode_message(self, source: _Source, run: _UnpackRun, msgtype: str, indent: int) -> str:
        """Statements reading ``msgtype``; returns the expression constructing it."""
        arguments = []
        for _name, (kind, detail) in self._fielddefs[msgtype][1]:
            if kind == Nodetype.NAME:
                arguments.append(self._decode_message(source, run, detail, indent))
            elif kind == Nodetype.BASE:
                arguments.append(self._decode_scalar(source, run, detail, indent))
            elif kind == Nodetype.ARRAY:
                arguments.append(self._decode_array(source, run, detail, indent))
            else:
                arguments.append(self._decode_sequence(source, run, detail, indent))
        cls = source.constant("C", self._class_of(msgtype))
        return f"{cls}({', '.join(arguments)})"

    def _decode_scalar(self, source: _Source, run: _UnpackRun, detail: _Scalar, indent: int) -> str:
        base, _bound = detail
        if base == "string":
            run.flush()
            return _decode_string(source, run.layout, indent)
        return run.add(STRUCT_CODES[base])

    def _decode_array(
        self, source: _Source, run: _UnpackRun, detail: _Collection, indent: int
    ) -> str:
        (element_kind, element), length = detail
        base = _primitive_base(element_kind, element)
        if base in BYTE_TYPES:
            return run.add(f"{length}s", alignment=1)
        if base is not None:
            return run.add(f"{length}{STRUCT_CODES[base]}", alignment=_size(base))
        run.flush()
        return self._decode_elements(source, run.layout, element_kind, element, str(length), indent)

    def _decode_sequence(
        self, source: _Source, run: _UnpackRun, detail: _Collection, indent: int
    ) -> str:
        (element_kind, element), _max_length = detail
        base = _primitive_base(element_kind, element)
        run.flush()
        count = source.name("n")
        _emit_align_read(source, run.layout, 4, indent)
        source.emit(indent, f"{count} = _U32.unpack_from(buf, pos)[0]")
        source.emit(indent, "pos += 4")
        run.layout.advance(4)
        result = source.name("q")
        if base in BYTE_TYPES:
            source.emit(indent, f"{result} = buf[pos:pos + {count}]")
            source.emit(indent, f"pos += {count}")
            run.layout.forget()
            return result
        if base is not None:
            size, code = _size(base), STRUCT_CODES[base]
            source.emit(indent, f"if {count}:")
            _emit_align_read(source, run.layout, size, indent + 1)
            source.emit(
                indent + 1, f"{result} = list(_unpack_from(f'<{{{count}}}{code}', buf, pos))"
            )
            source.emit(indent + 1, f"pos += {count} * {size}")
            source.emit(indent, "else:")
            source.emit(indent + 1, f"{result} = []")
            run.layout.forget(min(4, size))
            return result
        return self._decode_elements(source, run.layout, element_kind, element, count, indent)

    def _decode_elements(
        self,
        source: _Source,
        layout: _Layout,
        element_kind: Nodetype,
        element: Any,
        count: str,
        indent: int,
    ) -> str:
        """A loop reading ``count`` strings or messages into a list."""
        result, item = source.name("l"), source.name("o")
        source.emit(indent, f"{result} = []")
        source.emit(indent, f"for _ in range({count}):")
        if element_kind == Nodetype.NAME:
            function = source.constant("dec", self._element_decoder(element))
            source.emit(indent + 1, f"{item}, pos = {function}(buf, pos)")
        else:
            source.emit(
                indent + 1, f"{item} = {_decode_string(source, _Layout(known=1), indent + 1)}"
            )
        source.emit(indent + 1, f"{result}.append({item})")
        layout.forget()
        return result


class _PackRun:
    """Consecutive fixed-size fields written with one precompiled Struct."""

    def __init__(self, source: _Source, layout: _Layout) -> None:
        self.source, self.layout = source, layout
        self.format, self.arguments = "", []

    def add(self, code: str, value: str, alignment: int | None = None) -> None:
        alignment = alignment or struct.calcsize(code)
        padding = self.layout.static_padding(alignment)
        if padding is None:
            self.flush()
            _emit_align(self.source, self.layout, alignment, "out", BODY)
            padding = 0
        self.format += "x" * padding + code
        self.arguments.append(value)
        self.layout.advance(padding + struct.calcsize(code))

    def flush(self) -> None:
        if self.format:
            packer = self.source.constant("S", struct.Struct("<" + self.format))
            self.source.emit(BODY, f"out += {packer}.pack({', '.join(self.arguments)})")
            self.format, self.arguments = "", []


class _UnpackRun:
    """Consecutive fixed-size fields read with one precompiled Struct; returns expressions."""

    def __init__(self, source: _Source, layout: _Layout) -> None:
        self.source, self.layout = source, layout
        self.format = ""
        self.variable = ""  # name of the tuple the pending Struct unpacks into
        self.count = 0  # values in that tuple so far

    def add(self, code: str, alignment: int | None = None) -> str:
        alignment = alignment or struct.calcsize(code)
        padding = self.layout.static_padding(alignment)
        if padding is None:
            self.flush()
            _emit_align_read(self.source, self.layout, alignment, BODY)
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


def _primitive_base(element_kind: Nodetype, element: Any) -> str | None:
    """The primitive type name of an array/sequence element; None for strings and messages."""
    if element_kind == Nodetype.BASE and element[0] != "string":
        return element[0]
    return None


def _size(base: str) -> int:
    return struct.calcsize(STRUCT_CODES[base])


def _emit_align(source: _Source, layout: _Layout, alignment: int, out: str, indent: int) -> None:
    padding = layout.static_padding(alignment)
    if padding is None:
        source.emit(indent, f"{out} += _ZEROS[(4 - len({out})) % {alignment}]")
        layout.aligned_at_runtime(alignment)
    elif padding:
        source.emit(indent, f"{out} += _ZEROS[{padding}]")
        layout.advance(padding)


def _emit_align_read(source: _Source, layout: _Layout, alignment: int, indent: int) -> None:
    padding = layout.static_padding(alignment)
    if padding is None:
        source.emit(indent, f"pos += (4 - pos) % {alignment}")
        layout.aligned_at_runtime(alignment)
    elif padding:
        source.emit(indent, f"pos += {padding}")
        layout.advance(padding)


def _encode_string(source: _Source, layout: _Layout, value: str, bound: int, indent: int) -> None:
    encoded = source.name("b")
    source.emit(indent, f"{encoded} = {value}.encode()")
    if bound:
        source.emit(indent, f"_check_bound(len({encoded}), {bound}, {value!r})")
    _emit_align(source, layout, 4, "out", indent)
    source.emit(indent, f"out += _U32.pack(len({encoded}) + 1)")
    source.emit(indent, f"out += {encoded}")
    source.emit(indent, "out += b'\\x00'")
    layout.forget()


def _decode_string(source: _Source, layout: _Layout, indent: int) -> str:
    length, text = source.name("n"), source.name("t")
    _emit_align_read(source, layout, 4, indent)
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


def _define(source: _Source, name: str, signature: str) -> Callable:
    """Compile the generated function (the text is built only from type definitions)."""
    text = f"def {name}({signature}):\n" + "\n".join(source.lines or ["    pass"]) + "\n"
    namespace = {**_GLOBALS, **source.constants}
    exec(compile(text, f"<cdr {name}>", "exec"), namespace)
    function = namespace[name]
    function.__source__ = text  # for debugging: print(encoder.__source__)
    return function
