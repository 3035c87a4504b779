"""``--ros-args`` parsing: parameters, params files, remaps, namespaces, errors."""

from __future__ import annotations

import textwrap

import pytest
from vnd_ros.ros_args import RosArgsError, parse_ros_args, remove_ros_args


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_non_ros_arguments_are_kept_in_order():
    argv = ["prog", "a", "--ros-args", "-p", "x:=1", "--", "b", "--ros-args", "-r", "a:=b"]
    assert remove_ros_args(argv) == ["prog", "a", "b"]


def test_param_flags_are_yaml_typed_and_later_ones_win():
    args = parse_ros_args(
        ["--ros-args", "-p", "rate_hz:=50", "-p", "gain:=0.5", "-p", "on:=true", "-p",
         "name:=uav", "-p", "v:=[1, 2.5]", "--param", "rate_hz:=100"]
    )  # fmt: skip
    values = {k: o.value for k, o in args.parameter_overrides("/", "node").items()}
    assert values == {"rate_hz": 100, "gain": 0.5, "on": True, "name": "uav", "v": [1.0, 2.5]}
    assert args.parameter_overrides("/", "node")["rate_hz"].source == "-p flag 'rate_hz:=100'"


def test_params_file_node_keys_wildcards_and_precedence(tmp_path):
    path = _write(
        tmp_path,
        "p.yaml",
        """\
        /uav1/policy:
          ros__parameters:
            rate_hz: 60
        /**:
          ros__parameters:
            rate_hz: 50
            shared: 1
            nested:
              gain: 2.0
        policy:
          ros__parameters:
            root_only: true
        /**/policy:
          ros__parameters:
            any_ns: x
        /uav1/*:
          ros__parameters:
            in_uav1: 3
        """,
    )
    args = parse_ros_args(["--ros-args", "--params-file", str(path)])
    in_uav1 = args.parameter_overrides("/uav1", "policy")
    # the exact entry beats the wildcard even though it comes first in the file
    assert in_uav1["rate_hz"].value == 60
    assert in_uav1["rate_hz"].source == f"{path}:3"
    assert in_uav1["nested.gain"].value == 2.0
    assert in_uav1["any_ns"].value == "x" and in_uav1["in_uav1"].value == 3
    assert "root_only" not in in_uav1  # 'policy:' means '/policy', as in rcl
    at_root = args.parameter_overrides("/", "policy")
    assert at_root["root_only"].value is True and "in_uav1" not in at_root
    other = args.parameter_overrides("/", "encoder")
    assert set(other) == {"rate_hz", "shared", "nested.gain"}


def test_later_files_and_flags_override_earlier(tmp_path):
    first = _write(tmp_path, "a.yaml", "/**:\n  ros__parameters:\n    k: 1\n    j: 1\n")
    second = _write(tmp_path, "b.yaml", "/**:\n  ros__parameters:\n    k: 2\n")
    args = parse_ros_args(
        ["--ros-args", "--params-file", str(first), "-p", "j:=5", "--params-file", str(second)]
    )
    values = {k: o.value for k, o in args.parameter_overrides("/", "n").items()}
    assert values == {"k": 2, "j": 5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/**:\n  ros__parameters:\n    a: {b: [1, x]}\n", "p.yaml:3: list mixes types"),
        ("/**:\n  parameters:\n    a: 1\n", "p.yaml:2: unexpected key 'parameters'"),
        ("/**:\n  ros__parameters: 3\n", "p.yaml:2: 'ros__parameters' must be a mapping"),
        ("- a\n- b\n", "p.yaml:1: top level must map node names"),
        ("/**:\n  ros__parameters:\n    a: [1\n", "invalid YAML"),
        ("/bad-name:\n  ros__parameters:\n    a: 1\n", "p.yaml:1: invalid node name key"),
    ],
)
def test_params_file_errors_name_file_and_line(tmp_path, text, message):
    path = _write(tmp_path, "p.yaml", text)
    with pytest.raises(RosArgsError, match=message.replace("[", r"\[").replace("{", r"\{")):
        parse_ros_args(["--ros-args", "--params-file", str(path)])


def test_missing_params_file_is_named(tmp_path):
    with pytest.raises(RosArgsError, match=r"--params-file .*nope.yaml: cannot read"):
        parse_ros_args(["--ros-args", "--params-file", str(tmp_path / "nope.yaml")])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "novalue"], "-p 'novalue': expected 'name:=value'"),
        (["-p"], "flag '-p' needs a value"),
        (["--frobnicate"], "unknown flag '--frobnicate'"),
        (["-r", "__ns:=relative"], "__ns must be absolute"),
        (["-r", "__node:=9lives"], "invalid node name"),
        (["-r", "a b:=c"], "invalid topic name"),
        (["--log-level", "loud"], "--log-level 'loud'"),
    ],
)
def test_flag_errors_name_the_flag(argv, message):
    with pytest.raises(RosArgsError, match=message):
        parse_ros_args(["--ros-args", *argv])


def test_node_name_namespace_and_topic_remaps():
    args = parse_ros_args(
        ["--ros-args", "-r", "__ns:=/uav1", "-r", "policy:__node:=pilot", "-r",
         "odom:=/mocap/odom", "-r", "pilot:cmd:=cmd_raw", "-r", "other:state:=nope"]
    )  # fmt: skip
    name = args.node_name("policy")
    assert name == "pilot"
    assert args.node_name("encoder") == "encoder"
    ns = args.namespace(None, name)
    assert ns == "/uav1"
    assert args.resolve_topic("odom", ns, name) == "/mocap/odom"
    assert args.resolve_topic("/uav1/odom", ns, name) == "/mocap/odom"  # same resolved name
    assert args.resolve_topic("cmd", ns, name) == "/uav1/cmd_raw"  # rule scoped to 'pilot'
    assert args.resolve_topic("state", ns, name) == "/uav1/state"  # rule scoped to 'other'
    assert args.resolve_topic("~/status", ns, name) == "/uav1/pilot/status"
    assert args.resolve_topic("/abs", ns, name) == "/abs"


def test_log_levels_and_ignored_rcl_switches():
    args = parse_ros_args(
        ["--ros-args", "--log-level", "DEBUG", "--log-level", "uav1.policy:=warn",
         "--disable-rosout-logs", "-e", "/enclave"]
    )  # fmt: skip
    assert args.log_level == "debug"
    assert args.logger_levels == {"uav1.policy": "warn"}
    assert not args.rosout_logs  # honoured: the dds backend then writes no /rosout
