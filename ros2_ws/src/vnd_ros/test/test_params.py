"""freeze_parameters: declaration with descriptions, overrides, and start-up errors."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import pytest
from vnd_ros import dds_node
from vnd_ros.params import ParameterError, freeze_parameters, param


@dataclass(frozen=True)
class Limits:
    max_tilt_rad: float = 0.6  # largest commanded tilt (rad)


@dataclass(frozen=True)
class ControlConfig:
    rate_hz: float = param(50.0, "control rate (Hz)")
    history: int = 20  # context window length (ticks)
    enabled: bool = True  # start armed
    frame: str = "map"  # world frame id
    gains: tuple[float, ...] = (1.0, 2.0)  # PD gains
    limits: Limits = field(default_factory=Limits)


@dataclass
class NotFrozen:
    a: int = param(1, "a")


@dataclass(frozen=True)
class Undescribed:
    a: int = 1


@pytest.fixture
def make_node(tmp_path):
    """A factory ``make(ros_args, name='ctl', params_yaml=None)`` of nodes in private contexts."""
    contexts = []

    def make(ros_args: list[str], name: str = "ctl", params_yaml: str | None = None):
        argv = ["prog", "--ros-args", *ros_args]
        if params_yaml is not None:
            path = tmp_path / "params.yaml"
            path.write_text(textwrap.dedent(params_yaml))
            argv += ["--params-file", str(path)]
        ctx = dds_node.Context()
        ctx.init(argv, None)
        contexts.append(ctx)
        return dds_node.Node(name, context=ctx)

    yield make
    for ctx in contexts:
        ctx.shutdown()


def test_defaults_and_descriptions(make_node):
    node = make_node([])
    cfg = freeze_parameters(node, ControlConfig)
    assert cfg == ControlConfig()
    assert node.describe_parameter("rate_hz").description == "control rate (Hz)"
    assert node.describe_parameter("history").description == "context window length (ticks)"
    assert node.describe_parameter("limits.max_tilt_rad").description == (
        "largest commanded tilt (rad)"
    )
    with pytest.raises(AttributeError):
        cfg.rate_hz = 1.0  # frozen


def test_overrides_from_file_and_flags(make_node):
    yaml_text = """\
        /**:
          ros__parameters:
            rate_hz: 100
            gains: [3, 4]
            limits:
              max_tilt_rad: 0.4
        """
    node = make_node(["-p", "frame:=odom", "-p", "history:=10"], params_yaml=yaml_text)
    cfg = freeze_parameters(node, ControlConfig)
    assert cfg.rate_hz == 100.0 and isinstance(cfg.rate_hz, float)  # int accepted for float
    assert cfg.gains == (3.0, 4.0) and isinstance(cfg.gains, tuple)
    assert (cfg.frame, cfg.history, cfg.limits.max_tilt_rad) == ("odom", 10, 0.4)
    assert node.get_parameter("rate_hz").value == 100.0


def test_namespace_prefixes_names(make_node):
    node = make_node(["-p", "ctrl.rate_hz:=25.0", "-p", "other.x:=1"])
    cfg = freeze_parameters(node, ControlConfig, namespace="ctrl")
    assert cfg.rate_hz == 25.0
    assert node.has_parameter("ctrl.limits.max_tilt_rad")


def test_undeclared_override_names_parameter_and_file_line(make_node):
    yaml_text = """\
        ctl:
          ros__parameters:
            rate_hz: 10.0
            rate_hzz: 10.0
        """
    node = make_node([], params_yaml=yaml_text)
    with pytest.raises(ParameterError, match=r"'rate_hzz' from .*params.yaml:4 is not declared"):
        freeze_parameters(node, ControlConfig)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("rate_hz:=fast", "'rate_hz' from -p flag 'rate_hz:=fast': expected float, got str"),
        ("history:=2.5", "'history' from -p flag 'history:=2.5': expected int, got float"),
        ("history:=true", "expected int, got bool"),
        ("enabled:=1", "expected bool, got int"),
        ("gains:=[a, b]", "'gains' .* expected list of float"),
        ("gains:=3.0", "expected list of float, got float"),
    ],
)
def test_mistyped_override_stops_startup(make_node, flag, message):
    node = make_node(["-p", flag])
    with pytest.raises(ParameterError, match=message):
        freeze_parameters(node, ControlConfig)


def test_config_class_errors(make_node):
    node = make_node([])
    with pytest.raises(TypeError, match="must be a frozen dataclass"):
        freeze_parameters(node, NotFrozen)
    with pytest.raises(TypeError, match=r"Undescribed.a: no description"):
        freeze_parameters(node, Undescribed)


@pytest.mark.slow
def test_node_process_refuses_to_start_with_undeclared_parameter(spawn_peer):
    peer = spawn_peer(["-p", "role:=listener", "-p", "rol:=talker"])
    assert peer.wait_exit(20) != 0
    stderr = "\n".join(peer.stderr_lines)
    assert "parameter 'rol' from -p flag 'rol:=talker' is not declared" in stderr


@dataclass(frozen=True)
class Section:
    # steps of the optimiser, per update; the comment lines above a field describe it
    # when it has no trailing comment
    steps: int = 10
    budget_s: float | None = None  # stop after this long (None: no limit)
    probs: tuple[float, float] = (0.5, 0.5)  # two shares


@dataclass(frozen=True)
class Tuned:
    rate: float = 1.0  # a rate
    section: Section = field(default_factory=Section)


def test_preset_defaults_optional_fields_and_comment_above(make_node):
    preset = Tuned(rate=2.0, section=Section(steps=20, budget_s=None))
    node = make_node(["-p", "section.budget_s:=3"])
    cfg = freeze_parameters(node, Tuned, defaults=preset)
    assert cfg == Tuned(rate=2.0, section=Section(steps=20, budget_s=3.0))
    assert node.describe_parameter("section.steps").description == (
        "steps of the optimiser, per update; the comment lines above a field describe it when "
        "it has no trailing comment"
    )
    unset = make_node([], name="unset")
    assert freeze_parameters(unset, Tuned, defaults=preset).section.budget_s is None
    assert unset.describe_parameter("section.budget_s").type == 3  # double, left unset


def test_nested_errors_name_the_parameter_and_suggest_the_near_name(make_node):
    with pytest.raises(ParameterError, match=r"expected list of 2 float, got list \[1.0\]"):
        freeze_parameters(make_node(["-p", "section.probs:=[1.0]"]), Tuned)
    with pytest.raises(
        ParameterError,
        match=r"'section.stepz' .* \(did you mean 'section.steps'\? declared: section.budget_s, "
        r"section.probs, section.steps\)",
    ):
        freeze_parameters(make_node(["-p", "section.stepz:=3"]), Tuned)
    # names another config of the node declares are left to it
    node = make_node(["-p", "section.steps:=3", "-p", "frame:=odom"])
    freeze_parameters(node, Tuned, declared_elsewhere={"frame"})
    assert freeze_parameters(node, ControlConfig).frame == "odom"
