"""Parameters of the dds backend with rclpy's surface (Parameter, ParameterDescriptor, errors).

Under the rclpy backend the runtime exports rclpy's own classes instead; node code only uses
``declare_parameter(s)``, ``get_parameter(name).value`` and a descriptor with ``description``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ParameterType(IntEnum):
    """rcl_interfaces/msg/ParameterType values."""

    PARAMETER_NOT_SET = 0
    PARAMETER_BOOL = 1
    PARAMETER_INTEGER = 2
    PARAMETER_DOUBLE = 3
    PARAMETER_STRING = 4
    PARAMETER_BYTE_ARRAY = 5
    PARAMETER_BOOL_ARRAY = 6
    PARAMETER_INTEGER_ARRAY = 7
    PARAMETER_DOUBLE_ARRAY = 8
    PARAMETER_STRING_ARRAY = 9


_SCALAR_TYPES = (
    (bool, ParameterType.PARAMETER_BOOL, ParameterType.PARAMETER_BOOL_ARRAY),
    (int, ParameterType.PARAMETER_INTEGER, ParameterType.PARAMETER_INTEGER_ARRAY),
    (float, ParameterType.PARAMETER_DOUBLE, ParameterType.PARAMETER_DOUBLE_ARRAY),
    (str, ParameterType.PARAMETER_STRING, ParameterType.PARAMETER_STRING_ARRAY),
)


def parameter_type_of(value: Any) -> ParameterType:
    """ParameterType of a Python value; TypeError for values ROS parameters cannot hold."""
    if value is None:
        return ParameterType.PARAMETER_NOT_SET
    if isinstance(value, bytes):
        return ParameterType.PARAMETER_BYTE_ARRAY
    for cls, scalar, _array in _SCALAR_TYPES:
        if isinstance(value, cls):
            return scalar
    if isinstance(value, list | tuple):
        if not value:
            raise TypeError("an empty list has no parameter type; give a typed default")
        for cls, _scalar, array in _SCALAR_TYPES:
            if all(isinstance(v, cls) and (cls is bool or not isinstance(v, bool)) for v in value):
                return array
    raise TypeError(f"{value!r} is not a valid parameter value")


@dataclass
class ParameterDescriptor:
    """rcl_interfaces/msg/ParameterDescriptor subset."""

    name: str = ""
    type: int = ParameterType.PARAMETER_NOT_SET
    description: str = ""
    additional_constraints: str = ""
    read_only: bool = False
    dynamic_typing: bool = False


class Parameter:
    """A named, typed parameter value (rclpy.parameter.Parameter subset)."""

    Type = ParameterType

    def __init__(self, name: str, type_: ParameterType | None = None, value: Any = None) -> None:
        self.name = name
        self.type_ = parameter_type_of(value) if type_ is None else ParameterType(type_)
        self.value = value

    def __repr__(self) -> str:
        return f"Parameter({self.name!r}, {self.type_.name}, {self.value!r})"


class ParameterException(Exception):  # noqa: N818 - rclpy's name
    """Base of the parameter errors."""


class ParameterAlreadyDeclaredException(ParameterException):
    """declare_parameter() of a name that is already declared."""


class ParameterNotDeclaredException(ParameterException):
    """get_parameter() of a name that was never declared."""


class InvalidParameterTypeException(ParameterException):
    """An override whose type differs from the declared default's type."""
