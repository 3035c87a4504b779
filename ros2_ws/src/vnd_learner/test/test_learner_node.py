"""The learner node as a real process over the dds backend: persistence, SIGKILL and restart."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path

from rosbags.highlevel import AnyReader
from vnd_learner.records import key_of_cdr
from vnd_ros.qos import qos_profile_status

STATUS = "vnd_msgs/msg/LearnerStatus"


def _seconds(stamp) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def stored_keys(run_dir: Path) -> list[tuple[int, int]]:
    """(stamp, tick) of every record in the replay store, read with rosbags' AnyReader."""
    segments = sorted(p for p in (run_dir / "replay").iterdir() if (p / "metadata.yaml").exists())
    with AnyReader(segments) as reader:
        assert [c.msgtype for c in reader.connections] == ["vnd_msgs/msg/Transition"] * len(
            segments
        )
        return [key_of_cdr(bytes(data)) for _, _, data in reader.messages()]


def test_store_survives_sigkill_and_holds_every_tick_once(
    tmp_path: Path, start_learner, replay_publisher, listen
) -> None:
    run_dir = tmp_path / "run"
    params = {"run_dir": str(run_dir), "learn": "false", "segment_period_s": "1.0"}
    status = listen(STATUS, "vnd/learner/status", qos_profile_status)
    first = start_learner(**params)
    replay_publisher.start()
    first.wait_line("learner ready")
    status.wait_for(lambda s: s.ticks_stored >= 150, timeout_s=30)
    first.kill()  # mid-run: the open segment is left without metadata

    second = start_learner(**params)
    second.wait_line("recovered truncated segment")
    second.wait_line("learner ready")
    published_before_stop = len(replay_publisher.keys)
    status.wait_for(lambda s: s.ticks_stored >= published_before_stop, timeout_s=20)
    published = replay_publisher.stop()
    final = status.wait_for(lambda s: s.ticks_stored == published, timeout_s=10)
    assert final.ticks_stored == published
    assert second.stop() == 0

    keys = stored_keys(run_dir)
    assert len(keys) == published, "every published tick stored exactly once"
    assert sorted(keys) == sorted(replay_publisher.keys)


def flight_records(make_bundle) -> object:
    """400 tick records (8 s) of a small bundle flying hover_calm on the true plant."""
    import torch
    from vnd_core.learner import SimulatedFlight
    from vnd_core.scenario import load_scenario

    torch.set_num_threads(1)
    return SimulatedFlight(load_scenario("hover_calm"), make_bundle(1), seed=0).fly(8.0).records


def test_update_killed_midway_resumes_and_publishes_a_bundle_late_joiners_receive(
    tmp_path: Path,
    start_learner,
    replay_publisher,
    listen,
    make_bundle,
    tiny_learner_params,
    wait_gone,
) -> None:
    import hashlib
    import json
    import re
    import time

    import yaml
    from vnd_core.bundle import load_bundle, save_bundle
    from vnd_ros.qos import qos_profile_model

    base = save_bundle(make_bundle(1), tmp_path / "base.safetensors")
    run_dir = tmp_path / "run"
    # the tiny learner as -p flags; 4 training iterations are neither the preset's nor TINY's
    params = {
        "run_dir": str(run_dir),
        "bundle": str(base),
        **tiny_learner_params,
        "trainer.iterations": "4",
    }
    status = listen(STATUS, "vnd/learner/status", qos_profile_status)
    # The first learner's fit is long enough that the kill lands inside the update: the tiny
    # update ends within a status period of starting, so a kill after seeing it run may come
    # too late (the bundle is then rightly registered).
    first = start_learner(**{**params, "fit.steps": "1000000"})
    replay_publisher.publish_records(flight_records(make_bundle), time.time_ns())
    worker_pid = int(re.search(r"worker pid (\d+)", first.wait_line("worker pid")).group(1))
    # fitting; a worker on a machine with no inductor cache compiles its training first
    status.wait_for(lambda s: s.state == 2, 180)
    # training takes only CPU time no flight process wants (SCHED_IDLE, and niced)
    assert os.sched_getscheduler(worker_pid) == os.SCHED_IDLE
    assert os.getpriority(os.PRIO_PROCESS, worker_pid) >= 10
    first.kill()  # SIGKILL mid-update: nothing is registered, the worker goes too
    assert wait_gone(worker_pid, 10), "the worker outlived its node"
    assert not list((run_dir / "bundles").glob("*.safetensors"))

    seen = len(status.messages)
    second = start_learner(**params)  # re-ingests the store and updates again
    second.wait_line("learner ready")
    published = status.wait_for(lambda s: s.latest_version == 2, 60, after=seen)
    assert published.updates_accepted == 1 and published.ticks_stored == 400
    # The node stays responsive while its worker trains: 1 Hz status without long gaps.
    stamps = [_seconds(m.header.stamp) for m in status.messages[seen:]]
    stamps = stamps[: stamps.index(_seconds(published.header.stamp)) + 1]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    print(f"status gaps during the update: max {max(gaps):.3f} s over {len(gaps)}")
    assert max(gaps) < 2.0

    late = listen("vnd_msgs/msg/ModelBundle", "vnd/model", qos_profile_model)  # joins after
    msg = late.wait_for(lambda m: m.version == 2, timeout_s=10)
    assert msg.parent_version == 1 and hashlib.sha256(msg.payload).hexdigest() == msg.sha256
    bundle = load_bundle(bytes(msg.payload))
    assert bundle.version == 2 and bundle.model is not None
    assert json.loads(msg.metadata_json)["version"] == 2

    index = json.loads((run_dir / "bundles" / "index.json").read_text())["bundles"]
    assert [(e["version"], e["file"]) for e in index] == [(2, "v0002.safetensors")]
    assert index[0]["sha256"] == msg.sha256 and index[0]["published_wall_s"] is not None
    assert (run_dir / "bundles" / "v0002.safetensors").read_bytes() == bytes(msg.payload)
    # -p trainer.iterations reached the worker's policy training, through its typed file
    assert index[0]["metrics"]["train"]["iterations"] == 4
    typed = yaml.safe_load((run_dir / "learner_config.yaml").read_text())
    assert typed["preset"] == "standard" and typed["learner"]["trainer"]["iterations"] == 4


def test_policy_improvements_between_model_updates_are_published_and_counted(
    tmp_path: Path,
    start_learner,
    replay_publisher,
    listen,
    make_bundle,
    tiny_learner_params,
) -> None:
    """After its model update the worker keeps training the policy on the same model; a round
    that beats the active policy becomes a new version with the model update's model, counted
    in LearnerStatus apart from model updates and registered with its kind."""
    import json
    import time

    import torch
    from vnd_core.bundle import load_bundle, save_bundle
    from vnd_ros.qos import qos_profile_model

    base = save_bundle(make_bundle(1), tmp_path / "base.safetensors")
    run_dir = tmp_path / "run"
    params = {
        "run_dir": str(run_dir),
        "bundle": str(base),
        **tiny_learner_params,
        "improvement.enabled": "true",
        "improvement.round_iterations": "5",
        "improvement.learning_rate": "0.001",
        "improvement.min_gain_frac": "0.0",
    }
    status = listen(STATUS, "vnd/learner/status", qos_profile_status)
    bundles = listen("vnd_msgs/msg/ModelBundle", "vnd/model", qos_profile_model)
    learner = start_learner(**params)
    learner.wait_line("learner ready")
    replay_publisher.publish_records(flight_records(make_bundle), time.time_ns())
    improved = status.wait_for(lambda s: s.improvements_accepted >= 1, 120)
    assert improved.updates_accepted == 1 and improved.latest_version >= 3
    assert "policy improvement" in learner.wait_line("(policy improvement took")

    by_version = {m.version: load_bundle(bytes(m.payload)) for m in bundles.messages}
    model_update, first_round = by_version[2], by_version[3]
    assert first_round.parent_version == 2 and first_round.parent_sha256 == model_update.sha256
    for a, b in zip(
        model_update.model.state_dict().values(),
        first_round.model.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b)  # the same model ...
    moved = [
        not torch.equal(a, b)
        for a, b in zip(
            model_update.policy.state_dict().values(),
            first_round.policy.state_dict().values(),
            strict=True,
        )
    ]
    assert any(moved)  # ... and a policy trained further
    index = json.loads((run_dir / "bundles" / "index.json").read_text())["bundles"]
    kinds = {e["version"]: e["metrics"].get("kind", "model") for e in index}
    assert kinds[2] == "model" and kinds[3] == "policy"


def test_restart_resumes_from_registry_and_survives_worker_and_node_kills(
    tmp_path: Path, start_learner, listen, make_bundle, tiny_learner_file, wait_gone, middleware
) -> None:
    import re

    from vnd_core.bundle import bundle_to_bytes, load_bundle
    from vnd_flight.learner_store.registry import BundleRegistry
    from vnd_ros.qos import qos_profile_model

    run_dir = tmp_path / "run"
    registry = BundleRegistry(run_dir / "bundles")  # a previous run left v2 and v3
    registry.open()
    registry.add(bundle_to_bytes(make_bundle(2, 1)), metrics={}, decided_wall_s=1.0)
    registry.add(bundle_to_bytes(make_bundle(3, 2)), metrics={}, decided_wall_s=2.0)
    status = listen(STATUS, "vnd/learner/status", qos_profile_status)
    model = listen("vnd_msgs/msg/ModelBundle", "vnd/model", qos_profile_model)
    learner = start_learner(("--params-file", str(tiny_learner_file)), run_dir=str(run_dir))
    # the file's nested keys are the learner's parameters (the node logs what differs)
    assert "trainer.iterations=3" in learner.wait_line("learner config")

    start_line = learner.wait_line("starting from")
    assert start_line.endswith("v0003.safetensors"), start_line
    worker_pid = int(re.search(r"worker pid (\d+)", start_line).group(1))
    os.kill(worker_pid, signal.SIGKILL)  # the worker dies: reported, then restarted
    assert load_bundle(bytes(model.wait_for(lambda m: m.version == 3, 30).payload)).version == 3
    crash = status.wait_for(lambda s: "exited with code -9" in s.message, 10)
    assert crash.state == 5  # STATE_ERROR
    seen = len(status.messages)
    ready = status.wait_for(lambda s: re.match(r"worker pid \d+ learning", s.message), 40, seen)
    new_pid = int(re.search(r"worker pid (\d+)", ready.message).group(1))
    assert new_pid != worker_pid and ready.state == 1  # STATE_COLLECTING
    assert ready.latest_version == 3
    starts = [line for line in learner.lines if "starting from" in line]
    assert len(starts) == 2 and starts[-1].endswith("v0003.safetensors")

    learner.kill()  # SIGKILL of the node: its worker sees the pipe close and exits
    assert wait_gone(new_pid, 10), "the worker outlived its node"


def test_a_bundle_the_policy_node_refuses_shows_in_learner_status(
    tmp_path: Path, start_learner, listen
) -> None:
    """A real learner and a real policy node: the learner's registry holds a v2 whose policy
    flies badly (first layer x1e6, well-formed); the learner publishes it, the policy node
    refuses it, and the learner reports the refusal on vnd/learner/status, in `vnd status` and
    as a failed `vnd preflight` learner row."""
    import copy
    import subprocess
    import sys
    import time

    import torch
    from vnd_core.bundle import Bundle, bundle_to_bytes, load_bundle, shipped_bundle_path
    from vnd_flight.learner_store.registry import BundleRegistry
    from vnd_ros.stack_records import LearnerHealth
    from vnd_tools.commands.status import StatusView, format_table
    from vnd_tools.preflight import LearnerReport, PreflightThresholds, check_learner

    shipped = load_bundle(shipped_bundle_path())
    policy = copy.deepcopy(shipped.policy)
    with torch.no_grad():
        policy.net[0].weight.mul_(1e6)
    bad = Bundle(2, 1, policy, shipped.vehicle, lineage="test-run", parent_sha256=shipped.sha256)
    run_dir = tmp_path / "run"
    registry = BundleRegistry(run_dir / "bundles")
    registry.open()
    registry.add(bundle_to_bytes(bad), metrics={}, decided_wall_s=time.time())

    namespace = f"lrf{os.getpid()}"
    status = listen(STATUS, f"/{namespace}/vnd/learner/status", qos_profile_status)
    learner = start_learner(
        ros_args=("-r", f"__ns:=/{namespace}"), run_dir=str(run_dir), learn="false"
    )
    env = dict(os.environ, VND_MIDDLEWARE="dds", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    ros_args = ["-r", f"__ns:=/{namespace}", "-p", "smoke_budget_us:=1000000.0"]
    policy_node = subprocess.Popen(
        [sys.executable, "-m", "vnd_policy.policy_node", "--ros-args", *ros_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        learner.wait_line("learner ready")
        refused = status.wait_for(lambda s: s.latest_refused, timeout_s=90)
        prefix = f"/{namespace}/policy refused v2: rejected: behaviour check: "
        assert refused.refusal.startswith(prefix), refused.refusal
        assert refused.bundles_refused == 1 and refused.latest_version == 2
        assert "bundle refused by a flight node" in learner.wait_line("refused v2")

        health = LearnerHealth.from_msg(refused)
        view = StatusView(nodes={}, node_report_ns={}, learner=health, learner_report_ns=0)
        table = format_table(view, time.time_ns())
        assert f"learner: LATEST BUNDLE REFUSED: {refused.refusal}" in table.splitlines()
        report = LearnerReport(
            state=health.state,
            latest_version=health.latest_version,
            ticks_stored=health.ticks_stored,
            message=health.message,
            received_age_s=0.1,
            reports=1,
            latest_refused=health.latest_refused,
            refusal=health.refusal,
        )
        row = check_learner(report, 3.0, PreflightThresholds())
        assert row.failed
        assert row.measured.endswith(f"; BAD: newest bundle refused: {refused.refusal}")
    finally:
        policy_node.terminate()
        try:
            policy_node.wait(timeout=10)
        except subprocess.TimeoutExpired:
            policy_node.kill()
            policy_node.wait()
