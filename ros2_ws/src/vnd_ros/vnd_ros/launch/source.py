"""Read launch YAML while keeping line numbers, so every error can name file and line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Location:
    """Where a launch entity was written."""

    file: Path  # launch file holding the entity
    line: int  # 1-based line number in that file

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class LaunchError(Exception):
    """A launch file is malformed or cannot be resolved; names the file and line when known."""

    def __init__(self, message: str, where: Location | None = None) -> None:
        super().__init__(f"{where}: {message}" if where is not None else message)
        self.where = where
        self.detail = message


class LocatedDict(dict):
    """A YAML mapping that remembers its own line and the line of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class LocatedList(list):
    """A YAML sequence that remembers its own line and the line of each item."""

    line: int = 0
    item_lines: list[int]


class _LineLoader(yaml.SafeLoader):
    """Safe loader whose mappings and sequences carry 1-based line numbers."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LocatedDict:
    loader.flatten_mapping(node)
    result = LocatedDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in result:
            # yaml.safe_load keeps the last duplicate silently; a launch file never means that.
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (line {line})", key_node.start_mark
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LocatedList:
    result = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_launch_yaml(path: Path) -> LocatedDict:
    """Parse ``path`` into located containers; unreadable or invalid YAML raises LaunchError."""
    try:
        text = path.read_text()
    except OSError as err:
        raise LaunchError(f"cannot read launch file: {err.strerror}", Location(path, 0)) from err
    try:
        tree = yaml.load(text, Loader=_LineLoader)  # _LineLoader is a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        problem = getattr(err, "problem", None) or str(err)
        raise LaunchError(f"invalid YAML: {problem}", Location(path, line)) from err
    if not isinstance(tree, LocatedDict):
        raise LaunchError("expected a mapping with a single 'launch' key", Location(path, 1))
    return tree
