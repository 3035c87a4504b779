"""Attribute typing of ``vnd launch`` against the Jazzy YAML frontend's rules: a file that
ros2 launch rejects is rejected here with its file, line and the rule; the good spellings of
the same attributes are accepted, and so are the shipped launch files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from vnd_ros.launch import LaunchError, parse_launch_file, resolve_launch
from vnd_ros.launch.entities import Group, Node

REPO = Path(__file__).resolve().parents[5]
SHIPPED = sorted((REPO / "launch").glob("*.launch.yaml"))


def _node_file(tmp_path: Path, extra: str) -> Path:
    """A launch file whose node 'learner' carries ``extra`` from line 6 on."""
    text = (
        "launch:\n"  # 1
        "- node:\n"  # 2
        "    pkg: vnd_tools\n"  # 3
        "    exec: vnd\n"  # 4
        "    name: learner\n"  # 5
        f"{extra}"  # 6...
    )
    path = tmp_path / "x.launch.yaml"
    path.write_text(text)
    return path


# (attribute lines for node 'learner' at line 6, line of the error, expected rule text)
BAD_NODE_ATTRIBUTES = {
    "respawn as a YAML boolean": (
        "    respawn: true\n",
        6,
        "node 'learner': attribute 'respawn' must be a string (quote it), got the boolean true",
    ),
    "respawn_delay as a string": (
        '    respawn: "true"\n    respawn_delay: "2.0"\n',
        7,
        "node 'learner': attribute 'respawn_delay' must be a YAML float such as 2.0 "
        "(not an integer or a string), got the string '2.0'",
    ),
    "respawn_delay as an integer": (
        "    respawn_delay: 2\n",
        6,
        "attribute 'respawn_delay' must be a YAML float such as 2.0 (not an integer or a "
        "string), got the integer 2",
    ),
    "negative respawn_delay": (
        "    respawn_delay: -1.0\n",
        6,
        "attribute 'respawn_delay' must be a non-negative number, got -1.0",
    ),
    "respawn_max_retries as a string": (
        '    respawn: "true"\n    respawn_max_retries: "3"\n',
        7,
        "attribute 'respawn_max_retries' must be a YAML integer such as 3, got the string '3'",
    ),
    "respawn_max_retries as a boolean": (
        "    respawn_max_retries: true\n",
        6,
        "attribute 'respawn_max_retries' must be a YAML integer such as 3, got the boolean true",
    ),
    "on_exit other than shutdown": (
        "    on_exit: restart\n",
        6,
        "attribute 'on_exit' accepts only 'shutdown', got the string 'restart'",
    ),
    "condition as a YAML boolean": (
        "    if: true\n",
        6,
        "node 'learner': attribute 'if' must be a string (quote it), got the boolean true",
    ),
    "output as null": (
        "    output:\n",
        6,
        "attribute 'output' must be a string (quote it), got null",
    ),
    "namespace as a number": (
        "    namespace: 7\n",
        6,
        "attribute 'namespace' must be a string (quote it), got the integer 7",
    ),
    "param value as a mapping": (
        "    param:\n    - name: gains\n      value: {kp: 1.0}\n",
        8,
        "param 'gains' of node 'learner': attribute 'value' must be a scalar or a list of "
        "scalars, got a mapping",
    ),
    "param value as a mixed list": (
        "    param:\n    - name: gains\n      value: [1, 2.5]\n",
        8,
        "param 'gains' of node 'learner': attribute 'value' must be a scalar or a list of "
        "scalars of one type",
    ),
    "param value as a nested list": (
        "    param:\n    - name: gains\n      value: [[1.0], [2.0]]\n",
        8,
        "attribute 'value' must be a scalar or a list of scalars of one type",
    ),
    "param with both from and name": (
        "    param:\n    - {from: /tmp/p.yaml, name: x}\n",
        7,
        "attribute 'from' and 'name' are mutually exclusive",
    ),
    "empty param list": (
        "    param: []\n",
        6,
        "node 'learner': attribute 'param' must be a non-empty list of mappings, got an empty list",
    ),
    "param name as a number": (
        "    param:\n    - name: 3\n      value: x\n",
        7,
        "'param' of node 'learner': attribute 'name' must be a string (quote it), got the "
        "integer 3",
    ),
    "remap target as a number": (
        "    remap:\n    - {from: odom, to: 3}\n",
        7,
        "'remap' of node 'learner': attribute 'to' must be a string (quote it), got the integer 3",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_NODE_ATTRIBUTES))
def test_node_attribute_typed_like_ros2_launch_is_rejected_with_file_line_and_rule(tmp_path, case):
    extra, line, rule = BAD_NODE_ATTRIBUTES[case]
    path = _node_file(tmp_path, extra)
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert rule in str(err.value)


BAD_FILES = {
    "arg default as an integer": (
        'launch:\n- arg:\n    name: seed\n    default: 0\n    description: "seed"\n',
        4,
        "arg 'seed': attribute 'default' must be a string (quote it), got the integer 0",
    ),
    "let value as a float": (
        "launch:\n- let:\n    name: rate\n    value: 1.5\n",
        4,
        "let 'rate': attribute 'value' must be a string (quote it), got the float 1.5",
    ),
    "group scoped as a string": (
        'launch:\n- group:\n    scoped: "false"\n    children: []\n',
        3,
        "'group': attribute 'scoped' must be a YAML boolean (true/false), got the string 'false'",
    ),
    "executable args": (
        "launch:\n- executable:\n    cmd: echo\n    name: e\n    args: hello\n",
        5,
        "executable 'e': attribute 'args' is not read by ros2 launch's executable",
    ),
    "executable respawn_delay as a string": (
        "launch:\n- executable:\n    cmd: echo\n    name: e\n    respawn_delay: '1.0'\n",
        5,
        "executable 'e': attribute 'respawn_delay' must be a YAML float",
    ),
    "include arg value as a boolean": (
        "launch:\n- include:\n    file: other.launch.yaml\n    arg:\n"
        "    - name: learn\n      value: false\n",
        6,
        "arg 'learn' of 'include': attribute 'value' must be a string (quote it), got the "
        "boolean false",
    ),
    "set_env value as a number": (
        "launch:\n- set_env:\n    name: X\n    value: 1\n",
        4,
        "attribute 'value' must be a string (quote it), got the integer 1",
    ),
    "push-ros-namespace as a number": (
        "launch:\n- push-ros-namespace:\n    namespace: 1\n",
        3,
        "attribute 'namespace' must be a string (quote it), got the integer 1",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_other_tags_typed_like_ros2_launch_are_rejected_with_file_line_and_rule(tmp_path, case):
    text, line, rule = BAD_FILES[case]
    path = tmp_path / "x.launch.yaml"
    path.write_text(text)
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert rule in str(err.value)


def test_the_accepted_spellings_of_the_same_attributes_resolve(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("/**:\n  ros__parameters:\n    a: 1\n")
    text = f"""launch:
- arg: {{name: seed, default: "0", description: "seed"}}
- arg: {{name: again, default: "true"}}
- let: {{name: rate, value: "1.5"}}
- group:
    scoped: false
    children:
    - push-ros-namespace: {{namespace: vnd1}}
- executable:
    cmd: {sys.executable} -c pass
    name: e
    respawn: $(var again)
    respawn_delay: 0.5
    respawn_max_retries: 2
    on_exit: shutdown
    if: "true"
- node:
    pkg: vnd_tools
    exec: vnd
    name: learner
    output: screen
    respawn: "true"
    respawn_delay: 2.0
    respawn_max_retries: 5
    param:
    - {{from: {params}}}
    - {{name: seed, value: $(var seed)}}
    - {{name: gains, value: [1.0, 2.5]}}
    - {{name: names, value: [a, "$(var seed)"]}}
    - {{name: mixed, value: [1, "two"]}}
    - {{name: flag, value: true}}
    - {{name: count, value: 3}}
    remap:
    - {{from: odom, to: /mocap/odom}}
"""
    path = tmp_path / "good.launch.yaml"
    path.write_text(text)
    resolved = resolve_launch(path, {})
    executable, node = resolved.processes
    assert executable.respawn and executable.respawn_delay_s == 0.5
    assert executable.respawn_max_retries == 2 and executable.required
    assert node.node_name == "/vnd1/learner"  # the unscoped group's namespace leaked out
    assert node.respawn and node.respawn_delay_s == 2.0 and node.respawn_max_retries == 5
    assert not node.required
    assert "gains:=[1.0, 2.5]" in node.cmd and "seed:=0" in node.cmd


def _nodes(actions) -> list[Node]:
    found: list[Node] = []
    for action in actions:
        if isinstance(action, Node):
            found.append(action)
        elif isinstance(action, Group):
            found += _nodes(action.children)
    return found


@pytest.mark.parametrize("path", SHIPPED, ids=[path.name for path in SHIPPED])
def test_shipped_launch_files_pass_the_frontend_typing(path):
    nodes = {node.options.name.source: node for node in _nodes(parse_launch_file(path).actions)}
    learner = nodes["learner"].options
    assert learner.respawn_delay_s == 2.0 and learner.respawn_max_retries == 5
    assert nodes["policy"].options.required  # without the controller nothing flies
    assert not nodes["encoder"].options.required  # the policy flies on z = 0 without it
    assert not nodes["pose_filter"].options.required  # the fallback lands on stale odometry
