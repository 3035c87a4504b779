"""ROS 2 name rules shared by the dds backend, the message classes, the argument parser and the
graph tools.

Node names, namespaces and topic names follow rcl: node names are ``[A-Za-z_][A-Za-z0-9_]*``,
namespaces are absolute (``/`` or ``/a/b``), topic names resolve relative to the node namespace,
``~`` expands to the node's fully qualified name and absolute names stay as they are.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# DDS topic prefix rmw uses for ROS topics ("rt/odom" carries "/odom").
ROS_TOPIC_PREFIX = "rt"


class InvalidNameError(ValueError):
    """A node name, namespace or topic name breaks the ROS 2 naming rules."""


def validate_node_name(name: str) -> str:
    """Return ``name`` when it is a valid ROS 2 node name, else raise :class:`InvalidNameError`."""
    if not _TOKEN.match(name or ""):
        raise InvalidNameError(
            f"invalid node name {name!r}: use letters, digits and '_', not starting with a digit"
        )
    return name


def normalize_namespace(namespace: str | None) -> str:
    """Absolute form of ``namespace`` (``None``/'' -> '/', 'a/b' -> '/a/b'); validates tokens."""
    if not namespace:
        return "/"
    ns = namespace if namespace.startswith("/") else "/" + namespace
    ns = ns.rstrip("/") or "/"
    for token in ns.strip("/").split("/"):
        if ns != "/" and not _TOKEN.match(token):
            raise InvalidNameError(f"invalid namespace {namespace!r}: bad token {token!r}")
    return ns


def fully_qualified_name(namespace: str, node_name: str) -> str:
    """``/ns/node`` for a node ``node`` in namespace ``/ns``."""
    return ("" if namespace == "/" else namespace) + "/" + node_name


def resolve_topic_name(name: str, namespace: str, node_name: str) -> str:
    """Fully qualified topic name of ``name`` as seen by node ``node_name`` in ``namespace``.

    'odom' -> '/ns/odom', '~/state' -> '/ns/node/state', '/abs' -> '/abs'. Raises
    :class:`InvalidNameError` for empty names, '//' or tokens with characters ROS forbids.
    """
    if not name:
        raise InvalidNameError("empty topic name")
    if name.startswith("~"):
        if name != "~" and not name.startswith("~/"):
            raise InvalidNameError(f"invalid topic name {name!r}: '~' must be followed by '/'")
        resolved = fully_qualified_name(namespace, node_name) + name[1:]
    elif name.startswith("/"):
        resolved = name
    else:
        resolved = ("" if namespace == "/" else namespace) + "/" + name
    resolved = resolved.rstrip("/") if resolved != "/" else resolved
    tokens = resolved.strip("/").split("/")
    for token in tokens:
        if not token or not re.match(r"^[A-Za-z0-9_]+$", token) or token[0].isdigit():
            raise InvalidNameError(f"invalid topic name {name!r} (resolved to {resolved!r})")
    return resolved


def dds_topic_name(ros_topic: str) -> str:
    """DDS topic carrying the fully qualified ROS topic ``ros_topic`` ('/x' -> 'rt/x')."""
    return ROS_TOPIC_PREFIX + ros_topic


def ros_topic_name(dds_topic: str) -> str | None:
    """ROS topic of a DDS topic ('rt/x' -> '/x'); ``None`` for non-ROS topics."""
    prefix = ROS_TOPIC_PREFIX + "/"
    return dds_topic[len(prefix) - 1 :] if dds_topic.startswith(prefix) else None


def normalize_type_name(name: str) -> str:
    """``pkg/msg/Name`` (also accepts ``pkg/Name``); ValueError naming a malformed name."""
    parts = name.strip().split("/")
    if len(parts) == 2:
        parts.insert(1, "msg")
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise ValueError(f"message type name {name!r}: expected 'package/msg/Name'")
    return "/".join(parts)


def dds_type_name(ros_type: str) -> str:
    """DDS type name of a ROS message type (``pkg/msg/Name`` or ``pkg/Name`` ->
    ``pkg::msg::dds_::Name_``), the name rmw gives the type on the wire."""
    package, kind, name = normalize_type_name(ros_type).split("/")
    return f"{package}::{kind}::dds_::{name}_"


def ros_type_name(dds_type: str) -> str:
    """ROS type of a DDS type name ('pkg::msg::dds_::Name_' -> 'pkg/msg/Name'); else unchanged."""
    parts = dds_type.split("::")
    if len(parts) == 4 and parts[2] == "dds_" and parts[3].endswith("_"):
        return f"{parts[0]}/{parts[1]}/{parts[3][:-1]}"
    return dds_type
