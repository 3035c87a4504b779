"""The node API subset: a static check of node code and behaviour tests on both backends.

The static check scans every ``*node*.py`` of the node packages and fails when node code
imports rclpy directly or calls a Node method outside the subset the dds backend provides.
The behaviour tests run against the dds backend always and against rclpy when it imports.
"""

from __future__ import annotations

import ast
import importlib.util
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from vnd_ros import runtime

SRC = Path(__file__).resolve().parents[2]  # ros2_ws/src
# Packages holding nodes: every vnd_* package except the middleware, the core and messages.
NOT_NODE_PACKAGES = ("vnd_ros", "vnd_core", "vnd_msgs")

# Node methods the dds backend implements (rclpy names and signatures).
SUPPORTED = frozenset(
    {
        "create_publisher",
        "create_subscription",
        "create_timer",
        "declare_parameter",
        "declare_parameters",
        "get_parameter",
        "get_parameters",
        "has_parameter",
        "describe_parameter",
        "get_logger",
        "get_clock",
        "get_name",
        "get_namespace",
        "get_fully_qualified_name",
        "resolve_topic_name",
        "destroy_node",
        "destroy_publisher",
        "destroy_subscription",
        "destroy_timer",
    }
)
# Public methods of rclpy.node.Node (Humble..Jazzy) that the dds backend does not provide.
UNSUPPORTED = frozenset(
    {
        "add_on_set_parameters_callback",
        "add_post_set_parameters_callback",
        "add_pre_set_parameters_callback",
        "add_waitable",
        "count_clients",
        "count_publishers",
        "count_services",
        "count_subscribers",
        "create_client",
        "create_guard_condition",
        "create_rate",
        "create_service",
        "describe_parameters",
        "destroy_client",
        "destroy_guard_condition",
        "destroy_rate",
        "destroy_service",
        "get_client_names_and_types_by_node",
        "get_node_names",
        "get_node_names_and_namespaces",
        "get_node_names_and_namespaces_with_enclaves",
        "get_parameter_or",
        "get_parameter_types",
        "get_parameters_by_prefix",
        "get_publisher_names_and_types_by_node",
        "get_publishers_info_by_topic",
        "get_service_names_and_types",
        "get_service_names_and_types_by_node",
        "get_subscriber_names_and_types_by_node",
        "get_subscriptions_info_by_topic",
        "get_topic_names_and_types",
        "list_parameters",
        "remove_on_set_parameters_callback",
        "remove_waitable",
        "resolve_service_name",
        "set_descriptor",
        "set_parameters",
        "set_parameters_atomically",
        "undeclare_parameter",
        "wait_for_node",
    }
)
# What node code may import from vnd_ros.runtime: its public names.
RUNTIME_NAMES = frozenset(runtime.__all__)


def node_sources(src: Path = SRC) -> list[Path]:
    """Every ``*node*.py`` of the node packages (vnd_encoder, vnd_policy, vnd_sim...)."""
    files: list[Path] = []
    for package in sorted(src.glob("vnd_*")):
        if package.is_dir() and package.name not in NOT_NODE_PACKAGES:
            files.extend(sorted(package.glob("vnd_*/**/*node*.py")))
    return files


def _node_class_names(tree: ast.Module) -> set[str]:
    """Classes deriving (directly or through each other) from a base named Node."""
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}
            if cls.name not in names and bases & ({"Node"} | names):
                names.add(cls.name)
                changed = True
    return names


def contract_violations(path: Path, text: str | None = None) -> list[str]:
    """Contract breaches in one source file, as 'file:line: message'."""
    tree = ast.parse(text if text is not None else path.read_text(), filename=str(path))
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                modules.append(node.module or "")
            for module in modules:
                if module.split(".")[0] in ("rclpy", "rcl_interfaces"):
                    problems.append(f"{path}:{node.lineno}: imports {module} (use vnd_ros)")
            if isinstance(node, ast.ImportFrom) and node.module == "vnd_ros.runtime":
                for alias in node.names:
                    if alias.name not in RUNTIME_NAMES:
                        problems.append(
                            f"{path}:{node.lineno}: vnd_ros.runtime.{alias.name} is not part "
                            "of the node API subset"
                        )
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if cls.name not in _node_class_names(tree):
            continue
        for call in (n for n in ast.walk(cls) if isinstance(n, ast.Call)):
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
                and func.attr in UNSUPPORTED
            ):
                problems.append(
                    f"{path}:{call.lineno}: Node.{func.attr}() is outside the supported subset"
                )
    return problems


def test_node_code_uses_only_the_supported_subset():
    files = node_sources()
    problems = [p for path in files for p in contract_violations(path)]
    print(f"scanned {len(files)} node modules")
    assert not problems, "\n".join(problems)


def test_scanner_flags_rclpy_imports_and_unsupported_calls():
    bad = (
        "import rclpy\n"
        "from vnd_ros.runtime import Node, create_node\n"
        "class Base(Node):\n    pass\n"
        "class Mine(Base):\n"
        "    def __init__(self):\n"
        "        self.create_service(None, 's', None)\n"
        "        self.create_timer(0.1, None)\n"
    )
    problems = contract_violations(Path("x_node.py"), bad)
    assert len(problems) == 3, problems
    assert "x_node.py:1: imports rclpy" in problems[0]
    assert "create_node" in problems[1]
    assert "x_node.py:7: Node.create_service()" in problems[2]


def test_dds_node_implements_the_subset():
    from vnd_ros.dds_node import Node

    missing = [name for name in SUPPORTED if not callable(getattr(Node, name, None))]
    assert not missing


# ---- behaviour on both backends ------------------------------------------------------------


def _dds_api():
    from vnd_ros import dds_node, qos
    from vnd_ros.messages import get_message
    from vnd_ros.parameter import (
        ParameterAlreadyDeclaredException,
        ParameterDescriptor,
        ParameterNotDeclaredException,
    )

    ctx = dds_node.Context()
    ctx.init([], None)
    return SimpleNamespace(
        make_node=lambda name, **kw: dds_node.Node(name, context=ctx, **kw),
        executor=lambda: dds_node.SingleThreadedExecutor(context=ctx),
        close=ctx.shutdown,
        get_message=get_message,
        qos_default=qos.qos_profile_default,
        ParameterDescriptor=ParameterDescriptor,
        AlreadyDeclared=ParameterAlreadyDeclaredException,
        NotDeclared=ParameterNotDeclaredException,
    )


def _rclpy_api():  # pragma: no cover - needs a ROS 2 install
    """rclpy with the project's rclpy Node (vnd_ros.rclpy_node: QoS conversion, logger)."""
    import rclpy
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.exceptions import ParameterAlreadyDeclaredException, ParameterNotDeclaredException
    from rclpy.executors import SingleThreadedExecutor
    from vnd_ros import qos
    from vnd_ros.messages import rosidl_message
    from vnd_ros.rclpy_node import Node

    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    return SimpleNamespace(
        make_node=lambda name, **kw: Node(name, context=ctx, **kw),
        executor=lambda: SingleThreadedExecutor(context=ctx),
        close=lambda: rclpy.shutdown(context=ctx),
        get_message=rosidl_message,
        qos_default=qos.qos_profile_default,
        ParameterDescriptor=ParameterDescriptor,
        AlreadyDeclared=ParameterAlreadyDeclaredException,
        NotDeclared=ParameterNotDeclaredException,
    )


@pytest.fixture(params=["dds", "rclpy"])
def api(request):
    """The node API of one backend; the rclpy case is skipped (with its reason) without ROS."""
    if request.param == "rclpy":
        if importlib.util.find_spec("rclpy") is None:
            reason = "rclpy is not importable (run `make ros`): rclpy contract skipped"
            print(reason)
            pytest.skip(reason)
        api = _rclpy_api()
    else:
        api = _dds_api()
    yield api
    api.close()


def _spin_until(executor, predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached while spinning"
        executor.spin_once(timeout_sec=0.05)


def test_identity_and_topic_resolution(api):
    node = api.make_node("probe", namespace="uav1")
    assert (node.get_name(), node.get_namespace()) == ("probe", "/uav1")
    assert node.get_fully_qualified_name() == "/uav1/probe"
    assert node.resolve_topic_name("odom") == "/uav1/odom"
    assert node.resolve_topic_name("~/state") == "/uav1/probe/state"
    assert node.resolve_topic_name("/abs") == "/abs"
    node.destroy_node()


def test_publish_subscribe_and_timer(api):
    string_cls = api.get_message("std_msgs/msg/String")
    node = api.make_node("probe", namespace="uav1")
    received: list[str] = []
    node.create_subscription(string_cls, "/uav1/chatter", lambda m: received.append(m.data), 10)
    pub = node.create_publisher(string_cls, "chatter", api.qos_default)
    ticks: list[float] = []
    node.create_timer(
        0.02, lambda: (ticks.append(time.monotonic()), pub.publish(string_cls(data="x")))
    )
    executor = api.executor()
    executor.add_node(node)
    _spin_until(executor, lambda: len(received) >= 5)
    assert received[:5] == ["x"] * 5
    assert len(ticks) >= 5
    node.destroy_node()


def test_parameters(api):
    node = api.make_node("probe")
    desc = api.ParameterDescriptor(description="control rate (Hz)")
    assert node.declare_parameter("rate_hz", 50.0, desc).value == 50.0
    params = node.declare_parameters("gains", [("kp", 1.5), ("kd", 2)])
    assert [p.value for p in params] == [1.5, 2]
    assert node.get_parameter("gains.kd").value == 2
    with pytest.raises(api.AlreadyDeclared):
        node.declare_parameter("rate_hz", 1.0)
    with pytest.raises(api.NotDeclared):
        node.get_parameter("nope")
    node.destroy_node()


def test_logger_and_clock(api):
    node = api.make_node("probe")
    logger = node.get_logger()
    for _ in range(3):
        logger.info("once", once=True)
        logger.warning("throttled", throttle_duration_sec=10.0)
    logger.debug("d")
    logger.error("e")
    for accepted in (True, False, True):  # one call site, two severities (a refused request)
        log = logger.info if accepted else logger.warning
        assert log(f"request accepted={accepted}") is True
    now = node.get_clock().now()
    assert abs(now.nanoseconds - time.time_ns()) < 1e9
    stamp = now.to_msg()
    assert stamp.sec * 1_000_000_000 + stamp.nanosec == now.nanoseconds
    node.destroy_node()


def test_callbacks_never_overlap_and_run_on_the_spinning_thread(api):
    string_cls = api.get_message("std_msgs/msg/String")
    node = api.make_node("probe")
    busy = threading.Lock()
    threads: set[int] = set()
    overlaps = []
    calls = []

    def callback(*_args):
        if not busy.acquire(blocking=False):
            overlaps.append(1)
            return
        threads.add(threading.get_ident())
        time.sleep(0.002)  # long enough that a concurrent dispatch would collide
        calls.append(1)
        busy.release()

    pub = node.create_publisher(string_cls, "load", 10)
    node.create_subscription(string_cls, "load", callback, 10)
    node.create_timer(0.003, callback)
    node.create_timer(0.005, lambda: pub.publish(string_cls(data="y")))
    executor = api.executor()
    executor.add_node(node)
    _spin_until(executor, lambda: len(calls) >= 40)
    assert not overlaps
    assert threads == {threading.get_ident()}
    node.destroy_node()


def test_timer_keeps_its_rate_when_callbacks_take_time(api):
    """Deadlines advance by one period from the previous deadline, not from the callback's end:
    a 50 Hz timer whose callback takes 5 ms still fires 50 times a second."""
    node = api.make_node("probe")
    stamps: list[float] = []

    def tick():
        stamps.append(time.monotonic())
        time.sleep(0.005)

    node.create_timer(0.02, tick)
    executor = api.executor()
    executor.add_node(node)
    start = time.monotonic()
    while time.monotonic() - start < 1.0:
        executor.spin_once(timeout_sec=0.05)
    assert 48 <= len(stamps) <= 51  # a drifting timer (period 25 ms here) gives 40
    lateness_ms = sorted((t - start - 0.02 * (k + 1)) * 1e3 for k, t in enumerate(stamps))
    assert lateness_ms[len(lateness_ms) // 2] < 3.0
    node.destroy_node()


def test_one_executor_spins_several_nodes(api):
    string_cls = api.get_message("std_msgs/msg/String")
    talker, listener = api.make_node("talker"), api.make_node("listener")
    heard: list[str] = []
    listener.create_subscription(string_cls, "/pair", lambda m: heard.append(m.data), 10)
    pub = talker.create_publisher(string_cls, "/pair", 10)
    talker.create_timer(0.01, lambda: pub.publish(string_cls(data="t")))
    executor = api.executor()
    executor.add_node(talker)
    executor.add_node(listener)
    _spin_until(executor, lambda: len(heard) >= 3)
    talker.destroy_node()
    listener.destroy_node()


def test_shutdown_from_another_thread_ends_spin_promptly(dds_context):
    from vnd_ros import dds_node

    node = dds_node.Node("probe", context=dds_context)
    node.create_timer(10.0, lambda: None)  # nothing due for a long time
    executor = dds_node.SingleThreadedExecutor(context=dds_context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin)
    spinner.start()
    time.sleep(0.2)
    started = time.monotonic()
    dds_context.shutdown()
    spinner.join(timeout=3)
    assert not spinner.is_alive()
    assert time.monotonic() - started < 1.0
    assert not dds_context.ok()
