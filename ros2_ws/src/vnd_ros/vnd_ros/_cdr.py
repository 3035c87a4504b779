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

from collections.abc import Callable
from typing import Any

from rosbags.typesys.base import Nodetype

from vnd_ros._cdr_source import (
    BODY,
    BYTE_TYPES,
    HEADER,
    HEADER_SIZE,
    STRUCT_CODES,
    Layout,
    PackRun,
    Source,
    UnpackRun,
    define,
    emit_align,
    emit_align_read,
    emit_decode_string,
    emit_encode_string,
    primitive_base,
    size_of,
)

# (primitive type name, string bound or 0) of a scalar field
_Scalar = tuple[str, int]
# an array's or sequence's element: (kind, primitive _Scalar or message type name)
_Element = tuple[Nodetype, Any]
# ((element kind, element), length of an array or bound of a sequence, 0 = unbounded)
_Collection = tuple[_Element, int]

Encoder = Callable[[Any], bytes]
Decoder = Callable[[bytes], Any]


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
        source = Source()
        layout = Layout() if top_level else Layout(known=1)
        run = PackRun(source, layout)
        if top_level:
            source.emit(BODY, f"out = bytearray({HEADER!r})")
        self._encode_fields(source, run, msgtype, "msg", indent=BODY)
        run.flush()
        if top_level:
            source.emit(BODY, "return bytes(out)")
        signature = "msg" if top_level else "out, msg"
        return define(source, f"encode_{msgtype.replace('/', '_')}", signature)

    def _encode_fields(
        self, source: Source, run: PackRun, msgtype: str, obj: str, indent: int
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
        self, source: Source, run: PackRun, detail: _Scalar, value: str, indent: int
    ) -> None:
        base, bound = detail
        if base == "string":
            run.flush()
            emit_encode_string(source, run.layout, value, bound, indent)
        else:
            run.add(STRUCT_CODES[base], value)

    def _encode_array(
        self, source: Source, run: PackRun, detail: _Collection, value: str, indent: int
    ) -> None:
        (element_kind, element), length = detail
        base = primitive_base(element_kind, element)
        if base in BYTE_TYPES:
            source.emit(indent, f"_check_length({value}, {length}, {value!r})")
            run.add(f"{length}s", f"_as_bytes({value})", alignment=1)
        elif base is not None:
            source.emit(indent, f"_check_length({value}, {length}, {value!r})")
            run.add(f"{length}{STRUCT_CODES[base]}", f"*{value}", alignment=size_of(base))
        else:
            run.flush()
            source.emit(indent, f"_check_length({value}, {length}, {value!r})")
            self._encode_elements(source, run.layout, element_kind, element, value, indent)

    def _encode_sequence(
        self, source: Source, run: PackRun, detail: _Collection, value: str, indent: int
    ) -> None:
        (element_kind, element), max_length = detail
        base = primitive_base(element_kind, element)
        count = source.name("n")
        run.flush()
        if base in BYTE_TYPES:
            converted = source.name("y")
            source.emit(indent, f"{converted} = _as_bytes({value})")
            value = converted
        source.emit(indent, f"{count} = len({value})")
        if max_length:
            source.emit(indent, f"_check_bound({count}, {max_length}, {value!r})")
        emit_align(source, run.layout, 4, "out", indent)
        source.emit(indent, f"out += _U32.pack({count})")
        run.layout.advance(4)
        if base in BYTE_TYPES:
            source.emit(indent, f"out += {value}")
            run.layout.forget()
        elif base is not None:
            size = size_of(base)
            source.emit(indent, f"if {count}:")
            emit_align(source, run.layout, size, "out", indent + 1)
            code = STRUCT_CODES[base]
            source.emit(indent + 1, f"out += _pack(f'<{{{count}}}{code}', *{value})")
            run.layout.forget(min(4, size))
        else:
            self._encode_elements(source, run.layout, element_kind, element, value, indent)

    def _encode_elements(
        self,
        source: Source,
        layout: Layout,
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
            emit_encode_string(source, Layout(known=1), item, element[1], indent + 1)
        layout.forget()

    # --- decoder --------------------------------------------------------------------------

    def _compile_decoder(self, msgtype: str, top_level: bool) -> Callable:
        """Top level: ``f(data) -> msg``; element of an array: ``f(buf, pos) -> (msg, pos)``."""
        source = Source()
        layout = Layout() if top_level else Layout(known=1)
        run = UnpackRun(source, layout)
        if top_level:
            source.emit(BODY, "if type(buf) is not bytes:")
            source.emit(BODY + 1, "buf = bytes(buf)")
            source.emit(BODY, f"pos = {HEADER_SIZE}")
        expression = self._decode_message(source, run, msgtype, indent=BODY)
        run.flush()
        if top_level:
            source.emit(BODY, f"return {expression}")
            return define(source, f"decode_{msgtype.replace('/', '_')}", "buf")
        source.emit(BODY, f"return {expression}, pos")
        return define(source, f"decode_{msgtype.replace('/', '_')}", "buf, pos")

    def _decode_message(self, source: Source, run: UnpackRun, msgtype: str, indent: int) -> str:
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

    def _decode_scalar(self, source: Source, run: UnpackRun, detail: _Scalar, indent: int) -> str:
        base, _bound = detail
        if base == "string":
            run.flush()
            return emit_decode_string(source, run.layout, indent)
        return run.add(STRUCT_CODES[base])

    def _decode_array(
        self, source: Source, run: UnpackRun, detail: _Collection, indent: int
    ) -> str:
        (element_kind, element), length = detail
        base = primitive_base(element_kind, element)
        if base in BYTE_TYPES:
            return run.add(f"{length}s", alignment=1)
        if base is not None:
            return run.add(f"{length}{STRUCT_CODES[base]}", alignment=size_of(base))
        run.flush()
        return self._decode_elements(source, run.layout, element_kind, element, str(length), indent)

    def _decode_sequence(
        self, source: Source, run: UnpackRun, detail: _Collection, indent: int
    ) -> str:
        (element_kind, element), _max_length = detail
        base = primitive_base(element_kind, element)
        run.flush()
        count = source.name("n")
        emit_align_read(source, run.layout, 4, indent)
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
            size, code = size_of(base), STRUCT_CODES[base]
            source.emit(indent, f"if {count}:")
            emit_align_read(source, run.layout, size, indent + 1)
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
        source: Source,
        layout: Layout,
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
                indent + 1, f"{item} = {emit_decode_string(source, Layout(known=1), indent + 1)}"
            )
        source.emit(indent + 1, f"{result}.append({item})")
        layout.forget()
        return result
