"""The ``$(...)`` substitutions of the ROS 2 launch frontend, parsed once and evaluated later.

Grammar (the subset of ros2/launch's frontend grammar that launch files use in practice):
text is literal except ``$(NAME ARG ...)``; arguments are separated by whitespace; an argument
is any mix of bare text, nested substitutions and quoted strings ('...' or "...", which may
contain spaces and nested substitutions). Supported names: var, env, find-pkg-share, eval,
equals, not-equals, dirname. ``eval`` evaluates arithmetic, comparison and boolean expressions
on literals with an AST whitelist: no names, calls or attributes, so a launch file cannot run
code.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vnd_ros.launch.source import LaunchError, Location
from vnd_ros.paths import find_package_share

# substitution name -> (min args, max args)
SUBSTITUTION_ARITY: dict[str, tuple[int, int]] = {
    "var": (1, 1),
    "env": (1, 2),
    "find-pkg-share": (1, 1),
    "eval": (1, 1),
    "equals": (2, 2),
    "not-equals": (2, 2),
    "dirname": (0, 0),
}
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_QUOTES = ("'", '"')


@dataclass(frozen=True)
class Substitution:
    """One ``$(name args...)`` occurrence."""

    name: str  # substitution name, e.g. "var"
    args: tuple[Template, ...]  # each argument is itself a template
    where: Location  # file and line of the attribute holding it


@dataclass(frozen=True)
class Template:
    """Text with substitutions: evaluated to a string in a launch scope."""

    parts: tuple[str | Substitution, ...] = ()  # literal text and substitutions, in order
    source: str = ""  # the text as written in the launch file

    @property
    def is_literal(self) -> bool:
        """True when the template has no substitution."""
        return all(isinstance(part, str) for part in self.parts)


@dataclass
class Scope:
    """What substitutions and actions read and write while a launch description resolves."""

    configs: dict[str, str] = field(default_factory=dict)  # launch configurations (arg/let)
    env: dict[str, str] = field(default_factory=dict)  # environment handed to children
    ros_namespace: str = ""  # namespace pushed by push_ros_namespace ("" = none)
    current_file: Path = Path()  # launch file being resolved (for $(dirname))

    def child(self, current_file: Path | None = None) -> Scope:
        """A forwarding copy: sees everything, and its changes stay inside it."""
        file = current_file or self.current_file
        return Scope(dict(self.configs), dict(self.env), self.ros_namespace, file)


class _Cursor:
    """Position in the text being parsed, for error messages."""

    def __init__(self, text: str, where: Location) -> None:
        self.text = text
        self.pos = 0
        self.where = where

    def peek(self, count: int = 1) -> str:
        return self.text[self.pos : self.pos + count]

    def error(self, message: str) -> LaunchError:
        return LaunchError(f"{message} in '{self.text}'", self.where)


def parse_template(text: str, where: Location) -> Template:
    """Parse ``text`` into a Template; unknown substitutions or bad syntax raise LaunchError."""
    cursor = _Cursor(text, where)
    parts: list[str | Substitution] = []
    literal: list[str] = []
    while cursor.pos < len(text):
        if cursor.peek(2) == "$(":
            _flush(literal, parts)
            parts.append(_parse_substitution(cursor))
        else:
            literal.append(text[cursor.pos])
            cursor.pos += 1
    _flush(literal, parts)
    return Template(tuple(parts), text)


def _flush(literal: list[str], parts: list[str | Substitution]) -> None:
    if literal:
        parts.append("".join(literal))
        literal.clear()


def _parse_substitution(cursor: _Cursor) -> Substitution:
    cursor.pos += 2  # "$("
    start = cursor.pos
    while cursor.pos < len(cursor.text) and cursor.text[cursor.pos] in _NAME_CHARS:
        cursor.pos += 1
    name = cursor.text[start : cursor.pos]
    if not name:
        raise cursor.error("substitution without a name")
    if name not in SUBSTITUTION_ARITY:
        supported = ", ".join(SUBSTITUTION_ARITY)
        raise cursor.error(f"unsupported substitution '$({name})' (supported: {supported})")
    args: list[Template] = []
    while True:
        while cursor.peek().isspace():
            cursor.pos += 1
        if cursor.pos >= len(cursor.text):
            raise cursor.error(f"unterminated substitution '$({name}'")
        if cursor.peek() == ")":
            cursor.pos += 1
            break
        args.append(_parse_argument(cursor))
    low, high = SUBSTITUTION_ARITY[name]
    if not low <= len(args) <= high:
        expected = str(low) if low == high else f"{low} to {high}"
        raise cursor.error(f"'$({name})' takes {expected} argument(s), got {len(args)}")
    return Substitution(name, tuple(args), cursor.where)


def _parse_argument(cursor: _Cursor) -> Template:
    """One whitespace-delimited argument: bare text, quoted strings and substitutions."""
    parts: list[str | Substitution] = []
    literal: list[str] = []
    start = cursor.pos
    while cursor.pos < len(cursor.text):
        char = cursor.peek()
        if char.isspace() or char == ")":
            break
        if cursor.peek(2) == "$(":
            _flush(literal, parts)
            parts.append(_parse_substitution(cursor))
        elif char in _QUOTES:
            _parse_quoted(cursor, literal, parts)
        else:
            literal.append(char)
            cursor.pos += 1
    _flush(literal, parts)
    return Template(tuple(parts), cursor.text[start : cursor.pos])


def _parse_quoted(cursor: _Cursor, literal: list[str], parts: list[str | Substitution]) -> None:
    quote = cursor.peek()
    cursor.pos += 1
    while cursor.pos < len(cursor.text):
        if cursor.peek() == quote:
            cursor.pos += 1
            return
        if cursor.peek(2) == "$(":
            _flush(literal, parts)
            parts.append(_parse_substitution(cursor))
        else:
            literal.append(cursor.peek())
            cursor.pos += 1
    raise cursor.error(f"unterminated quote {quote}")


def evaluate(template: Template, scope: Scope) -> str:
    """The string value of ``template`` in ``scope``; failures raise LaunchError."""
    return "".join(
        part if isinstance(part, str) else _evaluate_substitution(part, scope)
        for part in template.parts
    )


def _evaluate_substitution(sub: Substitution, scope: Scope) -> str:
    args = [evaluate(arg, scope) for arg in sub.args]
    return _HANDLERS[sub.name](args, scope, sub.where)


def _var(args: list[str], scope: Scope, where: Location) -> str:
    if args[0] not in scope.configs:
        known = ", ".join(sorted(scope.configs)) or "none"
        raise LaunchError(f"launch configuration '{args[0]}' is not set (set: {known})", where)
    return scope.configs[args[0]]


def _env(args: list[str], scope: Scope, where: Location) -> str:
    if args[0] in scope.env:
        return scope.env[args[0]]
    if len(args) == 2:
        return args[1]
    raise LaunchError(f"environment variable '{args[0]}' is not set and has no default", where)


def _find_pkg_share(args: list[str], scope: Scope, where: Location) -> str:
    try:
        return str(find_package_share(args[0]))
    except LookupError as err:
        raise LaunchError(str(err), where) from err


def _equals(args: list[str], scope: Scope, where: Location) -> str:
    return "true" if values_equal(args[0], args[1]) else "false"


def _not_equals(args: list[str], scope: Scope, where: Location) -> str:
    return "false" if values_equal(args[0], args[1]) else "true"


def _dirname(args: list[str], scope: Scope, where: Location) -> str:
    return str(scope.current_file.resolve().parent)


def _eval(args: list[str], scope: Scope, where: Location) -> str:
    try:
        return str(safe_eval(args[0]))
    except (ValueError, SyntaxError, ArithmeticError, TypeError) as err:
        raise LaunchError(f"$(eval '{args[0]}') failed: {err}", where) from err


_HANDLERS: dict[str, Callable[[list[str], Scope, Location], str]] = {
    "var": _var,
    "env": _env,
    "find-pkg-share": _find_pkg_share,
    "eval": _eval,
    "equals": _equals,
    "not-equals": _not_equals,
    "dirname": _dirname,
}


def values_equal(left: str, right: str) -> bool:
    """Equality as launch's equals does it: textual, or as booleans, or as numbers."""
    if left == right:
        return True
    booleans = {"true": True, "false": False}
    if left.lower() in booleans and right.lower() in booleans:
        return booleans[left.lower()] == booleans[right.lower()]
    try:
        return float(left) == float(right)
    except ValueError:
        return False


def condition_value(text: str, where: Location) -> bool:
    """An if/unless value: true/1 or false/0 (any case), else LaunchError."""
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise LaunchError(f"condition value '{text}' is not one of true, false, 1, 0", where)


# ---------------------------------------------------------------- safe $(eval)

# Operands are the literals of a launch expression, typed only at run time.
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_MAX_EXPONENT = 1024  # bounds 10**huge so a launch file cannot stall the launcher
_MAX_LITERAL_CHARS = 10_000  # bounds string repetition ("a" * 10**9) for the same reason


def safe_eval(expression: str) -> object:
    """Evaluate literals with + - * / // % **, comparisons, and/or/not, and x if c else y.

    Names, calls, attributes, subscripts and comprehensions are rejected with ValueError.
    """
    tree = ast.parse(expression.strip(), mode="eval")
    return _eval_node(tree.body)


def _eval_node(node: ast.AST) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str | bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval_node(node.left), _eval_node(node.right)
        _check_binary_size(node.op, left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.BoolOp):
        return _eval_bool_op(node)
    if isinstance(node, ast.Compare):
        return _eval_compare(node)
    if isinstance(node, ast.IfExp):
        return _eval_node(node.body) if _eval_node(node.test) else _eval_node(node.orelse)
    raise ValueError(f"'{ast.unparse(node)}' is not allowed (only literals and operators)")


def _check_binary_size(op: ast.operator, left: object, right: object) -> None:
    if isinstance(op, ast.Pow) and isinstance(right, int | float) and abs(right) > _MAX_EXPONENT:
        raise ValueError(f"exponent {right} exceeds {_MAX_EXPONENT}")
    if not isinstance(op, ast.Mult):
        return
    if isinstance(left, str) and isinstance(right, int):
        text, count = left, right
    elif isinstance(right, str) and isinstance(left, int):
        text, count = right, left
    else:
        return
    if len(text) * count > _MAX_LITERAL_CHARS:
        raise ValueError(f"string repetition longer than {_MAX_LITERAL_CHARS} characters")


def _eval_bool_op(node: ast.BoolOp) -> object:
    is_and = isinstance(node.op, ast.And)
    value: object = None
    for operand in node.values:
        value = _eval_node(operand)
        if bool(value) != is_and:  # short-circuit like Python
            return value
    return value


def _eval_compare(node: ast.Compare) -> bool:
    left = _eval_node(node.left)
    for op, comparator in zip(node.ops, node.comparators, strict=True):
        if type(op) not in _COMPARE:
            raise ValueError(f"comparison '{type(op).__name__}' is not allowed")
        right = _eval_node(comparator)
        if not _COMPARE[type(op)](left, right):
            return False
        left = right
    return True
