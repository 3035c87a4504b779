"""dds-backend nodes publish their log lines on /rosout as rcl_interfaces/msg/Log with rcl's
rosout QoS, so ``ros2 topic echo /rosout`` and rqt_console show them (a real node process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication
from cyclonedds.qos import Policy
from vnd_ros import messages
from vnd_ros.bag import CliNode, GraphProbe
from vnd_ros.qos import DurabilityPolicy, QoSProfile

TALKER = Path(__file__).parent / "rosout_talker.py"
# The hash rosidl generated for rcl_interfaces/msg/Log in ROS 2 Jazzy: "type_hashes" of
# share/rcl_interfaces/msg/Log.json in the ros-rcl-interfaces 2.0.3 wheel on PyPI.
JAZZY_LOG_TYPE_HASH = "RIHS01_e28ce254ca8abc06abf92773b74602cdbf116ed34fbaf294fb9f81da9f318eac"


def test_log_type_and_hash_match_jazzy():
    assert messages.type_hash("rcl_interfaces/msg/Log", distro="jazzy") == JAZZY_LOG_TYPE_HASH
    log_cls = messages.get_message("rcl_interfaces/msg/Log")
    assert (log_cls.DEBUG, log_cls.INFO, log_cls.WARN, log_cls.ERROR, log_cls.FATAL) == (
        10,
        20,
        30,
        40,
        50,
    )


def test_a_node_process_warning_arrives_on_rosout_with_level_and_name():
    namespace = f"ro{os.getpid()}"
    token = f"t{time.monotonic_ns()}"
    env = dict(os.environ, VND_MIDDLEWARE="dds", PYTHONUNBUFFERED="1")
    command = [sys.executable, str(TALKER), token, "--ros-args", "-r", f"__ns:=/{namespace}"]
    talker = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    cli_node = CliNode(f"rosout_reader_{os.getpid()}")
    received: list = []
    own_guid = cli_node.node.context.participant.get_guid().bytes
    try:
        assert talker.stdout.readline().strip() == "READY"
        # Joining after the warning was logged: transient local delivers it (rqt_console
        # started after the node sees its start-up lines, as with rcl's rosout).
        qos = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL, depth=1000)
        cli_node.node.create_subscription(
            messages.get_message("rcl_interfaces/msg/Log"), "/rosout", received.append, qos
        )
        deadline = time.monotonic() + 20.0

        def mine(level: int) -> list:
            return [m for m in received if token in m.msg and m.level == level]

        while time.monotonic() < deadline and not (mine(30) and mine(20)):
            cli_node.spin_once(0.05)
        probe = GraphProbe(cli_node.node)
        offers = probe.writers().get("/rosout", [])
        probe.close()
        publications = BuiltinDataReader(
            cli_node.node.context.participant, BuiltinTopicDcpsPublication
        )
        lifespans_ns = {
            sample.qos[Policy.Lifespan].lifespan
            for sample in publications.read(N=10_000)
            if sample.topic_name == "rt/rosout" and sample.participant_key.bytes != own_guid
        }
    finally:
        cli_node.close()
        talker.terminate()
        talker.wait(timeout=10)
    warnings = mine(30)
    assert warnings, f"no warning on /rosout; got {[m.msg for m in received][:5]}"
    warning = warnings[0]
    assert warning.name == f"{namespace}.talker"
    assert warning.msg == f"rosout check {token}"
    assert warning.file.endswith("rosout_talker.py") and warning.function == "warn_at_start"
    assert warning.line > 0 and warning.stamp.sec > 0
    info = mine(20)[0]  # a child logger's line goes to its node's /rosout
    assert info.name == f"{namespace}.talker.loop" and info.function == "tick"
    talker_offers = [o for o in offers if o.msgtype == "rcl_interfaces/msg/Log"]
    assert talker_offers and all(o.reliable and o.transient_local for o in talker_offers)
    assert lifespans_ns == {10_000_000_000}  # rcl's rosout lifespan: 10 s


def test_disable_rosout_logs_keeps_a_node_off_rosout():
    namespace = f"rq{os.getpid()}"
    token = f"q{time.monotonic_ns()}"
    env = dict(os.environ, VND_MIDDLEWARE="dds", PYTHONUNBUFFERED="1")
    command = [sys.executable, str(TALKER), token, "--ros-args", "-r", f"__ns:=/{namespace}"]
    command.append("--disable-rosout-logs")
    talker = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    cli_node = CliNode(f"rosout_quiet_{os.getpid()}")
    received: list = []
    try:
        assert talker.stdout.readline().strip() == "READY"
        qos = QoSProfile(durability=DurabilityPolicy.TRANSIENT_LOCAL, depth=1000)
        cli_node.node.create_subscription(
            messages.get_message("rcl_interfaces/msg/Log"), "/rosout", received.append, qos
        )
        deadline = time.monotonic() + 2.0  # ten info lines' worth
        while time.monotonic() < deadline:
            cli_node.spin_once(0.05)
    finally:
        cli_node.close()
        talker.terminate()
        _, stderr = talker.communicate(timeout=10)
    assert f"rosout check {token}" in stderr  # still logged to the console
    assert not [m for m in received if token in m.msg]
