"""The shipped launch files and node configs: they parse, every node names a declared entry
point, and resolving them (without running anything) gives each node the namespace, parameter
files, parameters and remaps the topic contract needs, for every mocap / bridge variant."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest
from vnd_ros.launch import parse_launch_file, resolve_launch
from vnd_ros.launch.entities import Group, Node
from vnd_ros.ros_args import load_params_file, parse_ros_args
from vnd_sim.sim_node import SimNodeConfig

REPO = Path(__file__).resolve().parents[4]
SRC = REPO / "ros2_ws" / "src"
SIM_LAUNCH = REPO / "launch" / "vnd_sim.launch.yaml"
FLIGHT_LAUNCH = REPO / "launch" / "vnd_flight.launch.yaml"
NODE_CONFIGS = ("sim", "pose_filter", "encoder", "policy", "learner")


def declared_entry_points() -> dict[str, set[str]]:
    """package -> console_scripts names, read from each package's setup.py (no install needed)."""
    declared: dict[str, set[str]] = {}
    for setup_py in sorted(SRC.glob("*/setup.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(setup_py.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "console_scripts":
                        items = ast.literal_eval(value)
                        names |= {item.split("=")[0].strip() for item in items}
        declared[setup_py.parent.name] = names
    return declared


def launch_nodes(actions) -> list[Node]:
    """Every node action of a parsed launch file, groups included, conditions ignored."""
    nodes: list[Node] = []
    for action in actions:
        if isinstance(action, Node):
            nodes.append(action)
        elif isinstance(action, Group):
            nodes += launch_nodes(action.children)
    return nodes


@pytest.fixture
def ros_install(tmp_path, monkeypatch):
    """A ROS-install layout (lib/<pkg>/<exec>) of every declared entry point on
    AMENT_PREFIX_PATH, so the launch files resolve whether or not the packages are pip-installed."""
    for package, executables in declared_entry_points().items():
        for executable in executables:
            path = tmp_path / "lib" / package / executable
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("#!/bin/sh\nexit 0\n")
            path.chmod(0o755)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path))
    return tmp_path


def resolved_nodes(path: Path, **launch_args: str) -> dict[str, tuple]:
    """node name -> (fully qualified name, parsed ROS arguments, ProcessSpec)."""
    result = resolve_launch(path, launch_args)
    assert not result.unused_args, result.unused_args
    nodes = {}
    for spec in result.processes:
        ros_args = parse_ros_args(spec.cmd)
        name = ros_args.node_name("unnamed")
        nodes[name] = (f"{ros_args.namespace('/', name)}/{name}", ros_args, spec)
    return nodes


def params_of(entry: tuple) -> dict[str, object]:
    fqn, ros_args, _ = entry
    namespace, _, name = fqn.rpartition("/")
    return {k: v.value for k, v in ros_args.parameter_overrides(namespace, name).items()}


def topic_of(entry: tuple, topic: str) -> str:
    fqn, ros_args, _ = entry
    namespace, _, name = fqn.rpartition("/")
    return ros_args.resolve_topic(topic, namespace, name)


def config_fields(cls: type, prefix: str = "") -> set[str]:
    """Parameter names of a (nested) config dataclass, as freeze_parameters declares them."""
    names: set[str] = set()
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            names |= config_fields(hints[field.name], f"{prefix}{field.name}.")
        else:
            names.add(prefix + field.name)
    return names


@pytest.mark.parametrize("path", [SIM_LAUNCH, FLIGHT_LAUNCH], ids=lambda p: p.name)
def test_every_node_is_a_declared_entry_point(path):
    declared = declared_entry_points()
    nodes = launch_nodes(parse_launch_file(path).actions)
    assert len(nodes) >= 5
    for node in nodes:
        package, executable = node.pkg.source, node.exec.source
        assert executable in declared.get(package, set()), f"{package}/{executable} in {path}"


@pytest.mark.parametrize("name", NODE_CONFIGS)
def test_node_configs_load_with_wildcard_keys(name):
    rules = load_params_file(REPO / "config" / f"{name}.yaml")
    assert rules and all(rule.node_pattern == "/**" for rule in rules)


def test_sim_config_names_only_sim_node_parameters():
    names = {rule.name for rule in load_params_file(REPO / "config" / "sim.yaml")}
    assert names <= config_fields(SimNodeConfig), names - config_fields(SimNodeConfig)
    assert {"scenario", "vehicle", "real_time_factor", "plant.physics_rate_hz"} <= names


def test_sim_launch_wires_the_stack_in_the_vehicle_namespace(ros_install):
    nodes = resolved_nodes(SIM_LAUNCH, vehicle="vnd7", scenario="hover_calm", bundle="/b.st")
    assert set(nodes) == {"sim", "pose_filter", "encoder", "policy", "learner"}
    assert all(fqn == f"/vnd7/{name}" for name, (fqn, _, _) in nodes.items())
    for name, (_, ros_args, _) in nodes.items():
        assert ros_args.params_files == [(REPO / "config" / f"{name}.yaml").resolve()]
    sim = params_of(nodes["sim"])
    assert sim["scenario"] == "hover_calm" and sim["vehicle"] == "agile"
    assert sim["real_time_factor"] == 1.0 and sim["plant.physics_rate_hz"] == 500.0
    assert set(sim) <= config_fields(SimNodeConfig)
    assert params_of(nodes["policy"])["bundle"] == "/b.st"
    assert params_of(nodes["policy"])["scenario"] == "hover_calm"
    assert params_of(nodes["learner"])["run_dir"] == "/tmp/vnd_run"
    assert nodes["learner"][2].respawn and not nodes["policy"][2].respawn
    # The sim's mocap reaches the pose filter; its odometry reaches encoder and policy.
    assert topic_of(nodes["sim"], "mocap/pose") == topic_of(nodes["pose_filter"], "mocap/pose")
    assert topic_of(nodes["policy"], "odom") == "/vnd7/odom"


def test_sim_launch_config_dir_follows_vnd_config_dir(ros_install, tmp_path, monkeypatch):
    for name in NODE_CONFIGS:
        (tmp_path / f"{name}.yaml").write_text(f"/**:\n  ros__parameters:\n    {name}: 1\n")
    monkeypatch.setenv("VND_CONFIG_DIR", str(tmp_path))
    nodes = resolved_nodes(SIM_LAUNCH)
    assert nodes["sim"][1].params_files == [(tmp_path / "sim.yaml").resolve()]


@pytest.mark.parametrize(
    ("bridge", "expected"),
    [("px4", {"px4_bridge"}), ("mavros", {"mavros_bridge"}), ("none", set())],
)
def test_flight_launch_starts_only_the_chosen_bridge(ros_install, bridge, expected):
    nodes = resolved_nodes(FLIGHT_LAUNCH, bridge=bridge, vehicle_model="small")
    bridges = {name for name in nodes if name.endswith("_bridge")}
    assert bridges == expected
    for name in bridges:
        assert params_of(nodes[name])["thrust.vehicle"] == "small"
        assert topic_of(nodes[name], "vnd/command") == "/vnd1/vnd/command"
    assert {"pose_filter", "encoder", "policy", "learner"} <= set(nodes)
    assert "sim" not in nodes


def test_flight_launch_pose_mocap_goes_through_the_pose_filter(ros_install):
    nodes = resolved_nodes(
        FLIGHT_LAUNCH, mocap_topic="/vrpn/cf1/pose", reference_kind="figure8", learn="false"
    )
    assert "learner" not in nodes
    assert topic_of(nodes["pose_filter"], "mocap/pose") == "/vrpn/cf1/pose"
    assert topic_of(nodes["encoder"], "odom") == "/vnd1/odom"
    policy = params_of(nodes["policy"])
    assert policy["reference.kind"] == "figure8"
    assert policy["reference.center_m"] == [0.0, 0.0, 1.2]
    assert policy["reference.period_s"] == 6.0


def test_flight_launch_odometry_mocap_skips_the_pose_filter(ros_install):
    nodes = resolved_nodes(FLIGHT_LAUNCH, mocap_type="odometry", mocap_topic="/mocap/cf1/odom")
    assert "pose_filter" not in nodes
    assert topic_of(nodes["encoder"], "odom") == "/mocap/cf1/odom"
    assert topic_of(nodes["policy"], "odom") == "/mocap/cf1/odom"


def test_flight_launch_rejects_an_unknown_mocap_type(ros_install):
    from vnd_ros.launch import LaunchError

    with pytest.raises(LaunchError, match="odom_topic"):
        resolved_nodes(FLIGHT_LAUNCH, mocap_type="vicon")


@pytest.mark.parametrize(
    ("path", "required"),
    [
        (
            SIM_LAUNCH,
            {
                "vehicle",
                "scenario",
                "vehicle_model",
                "bundle",
                "run_dir",
                "real_time_factor",
                "config_dir",
            },
        ),
        (
            FLIGHT_LAUNCH,
            {
                "vehicle",
                "mocap_topic",
                "mocap_type",
                "bridge",
                "bundle",
                "reference_kind",
                "reference_center_m",
                "config_dir",
            },
        ),
    ],
    ids=["sim", "flight"],
)
def test_launch_arguments_are_declared_once_with_descriptions(path, required):
    args = parse_launch_file(path).declared_args
    names = [arg.name for arg in args]
    assert len(names) == len(set(names))
    assert required <= set(names)
    assert all(arg.description and arg.default is not None for arg in args)


def test_flight_launch_keeps_the_tick_rehearsal_off_unless_the_operator_sets_it(ros_install):
    policy = params_of(resolved_nodes(FLIGHT_LAUNCH)["policy"])
    assert policy["rehearsal_lead_s"] == 0.0
    chosen = params_of(resolved_nodes(FLIGHT_LAUNCH, rehearsal_lead_s="0.0025")["policy"])
    assert chosen["rehearsal_lead_s"] == 0.0025
    # the simulated stack keeps the rehearsal of config/policy.yaml (a shared machine needs it)
    assert params_of(resolved_nodes(SIM_LAUNCH)["policy"])["rehearsal_lead_s"] > 0.0
