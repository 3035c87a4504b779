"""Bag replay (CI): a recorded sim flight's odometry and commands, played into freshly started
encoder and policy processes on either backend (dds, rclpy), must reproduce the recorded latents and
commands.

Fixture: ``data/replay_fixture/`` (MCAP: odom, vnd/command, vnd/latent, vnd/replay of a short
figure-eight flight, calm then wind) and the bundle it flew, ``data/replay_bundle.safetensors``;
regenerate both with ``scripts/record_replay_fixture.py``.

Set-up: each node gets exactly its recorded inputs, with the original spacing, from the test:
- a fresh encoder (namespace E) gets every recorded odometry sample and every recorded command;
  its latents are compared with the recorded vnd/latent;
- a fresh policy (namespace P) gets the odometry samples the recorded ticks answered and, just
  before each, a Latent carrying the z that recorded tick used (from vnd/replay); its commands
  are compared with the recorded vnd/command. Feeding it E's live latents instead would make
  the z of a tick depend on which latent won the race to the policy, i.e. on CPU timing.
Stamps are shifted by one constant so they are current (the nodes judge staleness against
their clock); matching by odometry stamp undoes the shift.

Ticks in step: the nodes react to input timing, and a host that stalls the test's player or a
node (a nested VM here) changes it. Odometry more than 26 ms late makes the policy's watchdog
tick on the old sample; more than 100 ms late makes the safety filter fall back for at least
0.5 s. Those are real ticks: they move the filter's previous output and the action history in
the policy's observation, so the commands after them differ for about 15 ticks. The replayed
node's tick counter (on its vnd/replay) shows each: it advances by more than the recorded one.
A recorded tick is disturbed when such extra ticks happened within SETTLE_TICKS before it (or
across the gap it lies in); the others are in step, and on them:
- every recorded policy tick is ticked again in policy mode (up to MAX_LOST_IN_STEP, for a
  best-effort message lost on loopback);
- commands agree: COMMAND_SHARE within COMMAND_TOL_N / COMMAND_TOL_RADPS and the median
  thrust difference below COMMAND_MEDIAN_TOL (not all exactly: the z a tick uses is the
  newest latent, and a latent that lost the race to its odometry leaves the previous one);
- at least MIN_IN_STEP_SHARE of the recorded policy ticks are in step, or the replay says how
  the host disturbed it.
Latents: identical input and float32 arithmetic: z agrees to LATENT_TOL at every stamp both runs
marked valid; the encoder breaks its context when its wall-clock gap check sees no command for
45 ms (a stall) and is invalid for a context length after, so only MIN_LATENT_SHARE of the
recorded valid latents must be reproduced.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"
BAG = DATA / "replay_fixture"
BUNDLE = DATA / "replay_bundle.safetensors"
CONFIG = Path(__file__).resolve().parents[4] / "config"
START_TIMEOUT_S = 90.0  # torch import + start-up bundle check on a busy 2-core machine
LATENT_TOL = 1e-4  # max |z_new - z_recorded| per component
COMMAND_TOL_N = 0.05  # thrust [N]
COMMAND_TOL_RADPS = 0.05  # body rates [rad/s]
COMMAND_SHARE = 0.9  # share of in-step policy ticks whose commands must agree
COMMAND_MEDIAN_TOL = 1e-3  # median |thrust difference| [N]: the bulk must agree exactly
SETTLE_TICKS = 40  # a fallback's 0.5 s recovery plus the action history's 15-tick cascade
MAX_LOST_IN_STEP = 0.02  # share of in-step recorded policy ticks the replay may lack
MIN_IN_STEP_SHARE = 0.3  # share of recorded policy ticks that must be in step
MIN_LATENT_SHARE = 0.5  # share of the recorded valid latents reproduced (measured: 70-98 %)
MODE_POLICY = 1
NS = 1_000_000_000
LATENT_LEAD_NS = 8_000_000  # a tick's latent goes out this long before its odometry
PLAYBACK_LEAD_NS = NS  # from the publishers matching to the first sample played


def _env(middleware: str) -> dict[str, str]:
    return dict(os.environ, VND_MIDDLEWARE=middleware, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


class NodeProcess:
    """A flight node in its own process; its merged output is kept for failure messages."""

    def __init__(self, module: str, ros_args: list[str], middleware: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--ros-args", *ros_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(middleware),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.seen):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"no '{text}' from the node:\n" + "".join(self.seen[-20:]))
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.lines.get(timeout=0.5))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def recorded() -> dict:
    """The fixture's recorded messages by topic (relative name) as (stamp, message) lists."""
    from vnd_ros.bag_read import read_messages

    if not BAG.is_dir() or not BUNDLE.is_file():
        pytest.fail(f"fixture missing: {BAG} / {BUNDLE}; run scripts/record_replay_fixture.py")
    namespace = json.loads((DATA / "replay_fixture.json").read_text())["namespace"]
    prefix = f"/{namespace}/"
    out: dict[str, list] = {"odom": [], "vnd/command": [], "vnd/latent": [], "vnd/replay": []}
    for topic, _type, _t, msg in read_messages(BAG, [prefix + name for name in out]):
        stamp = msg.header.stamp.sec * NS + msg.header.stamp.nanosec
        out[topic[len(prefix) :]].append((stamp, msg))
    return out


@pytest.fixture(scope="module", params=["dds", "rclpy"])
def nodes(request, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """Fresh encoder (namespace E) and policy (namespace P, flying the recording's scenario
    reference, as the launch file sets it) processes on the parameter's backend; the test
    plays and collects on its own (dds under the Makefile)."""
    middleware = request.param
    if middleware == "rclpy" and importlib.util.find_spec("rclpy") is None:
        pytest.skip("rclpy is not installed: run `make ros`")
    enc_ns, pol_ns = f"/rpe{os.getpid()}{middleware}", f"/rpp{os.getpid()}{middleware}"
    scenario = tmp_path_factory.mktemp("scenario") / "replay_fixture.yaml"
    scenario.write_text(json.loads((DATA / "replay_fixture.json").read_text())["scenario"])
    bundle = ["-p", f"bundle:={BUNDLE}"]
    encoder = NodeProcess(
        "vnd_encoder.encoder_node",
        ["--params-file", str(CONFIG / "encoder.yaml"), "-r", f"__ns:={enc_ns}", *bundle],
        middleware,
    )
    policy_params = [*bundle, "-p", f"scenario:={scenario}"]
    policy = NodeProcess(
        "vnd_policy.policy_node",
        ["--params-file", str(CONFIG / "policy.yaml"), "-r", f"__ns:={pol_ns}", *policy_params],
        middleware,
    )
    try:
        encoder.wait_for("encoder node ready", START_TIMEOUT_S)
        policy.wait_for("policy node ready", START_TIMEOUT_S)
        yield enc_ns, pol_ns
    finally:
        encoder.stop()
        policy.stop()


def _replay(recorded: dict, enc_ns: str, pol_ns: str) -> tuple[dict, dict, dict]:
    """Play the recorded inputs of E and P (see the module docstring) with the recorded spacing
    and stamps shifted to now; collect E's latents, P's commands and P's transitions by
    original odometry stamp (the first of each: a watchdog tick repeats its sample's stamp)."""
    from vnd_ros import messages
    from vnd_ros.bag import CliNode
    from vnd_ros.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

    cli_node = CliNode("bag_replay_test")
    node = cli_node.node
    # Per recorded tick: the z it used, published to the policy LATENT_LEAD_NS before its
    # odometry (after the previous tick), so that it is the newest latent when the tick runs.
    used = {s: m for s, m in recorded["vnd/replay"]}
    ticked = {s for s, _ in recorded["vnd/command"]} & set(used)
    events = sorted(
        [(s, "odom", m) for s, m in recorded["odom"]]
        + [(s, "vnd/command", m) for s, m in recorded["vnd/command"]]
        + [(s - LATENT_LEAD_NS, "latent", used[s]) for s in ticked],
        key=lambda event: event[0],
    )
    first_ns = events[0][0]
    shift_ns = 0  # set once the subscriptions match
    latents: dict[int, object] = {}
    commands: dict[int, object] = {}
    transitions: dict[int, object] = {}
    keep = QoSProfile(ReliabilityPolicy.BEST_EFFORT, depth=1000)

    def collect(into: dict):
        def on_message(msg) -> None:
            stamp = msg.header.stamp.sec * NS + msg.header.stamp.nanosec - shift_ns
            into.setdefault(stamp, msg)

        return on_message

    latent_cls = messages.get_message("vnd_msgs/msg/Latent")
    command_cls = messages.get_message("vnd_msgs/msg/CtbrCommand")
    transition_cls = messages.get_message("vnd_msgs/msg/Transition")
    odom_cls = messages.get_message("nav_msgs/msg/Odometry")
    node.create_subscription(latent_cls, f"{enc_ns}/vnd/latent", collect(latents), keep)
    node.create_subscription(command_cls, f"{pol_ns}/vnd/command", collect(commands), keep)
    node.create_subscription(transition_cls, f"{pol_ns}/vnd/replay", collect(transitions), keep)
    sensor = qos_profile_sensor_data
    publishers = {
        "odom": node.create_publisher(odom_cls, f"{enc_ns}/odom", sensor),
        "policy odom": node.create_publisher(odom_cls, f"{pol_ns}/odom", sensor),
        "vnd/command": node.create_publisher(command_cls, f"{enc_ns}/vnd/command", sensor),
        "latent": node.create_publisher(latent_cls, f"{pol_ns}/vnd/latent", sensor),
    }
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set() and cli_node.spin_once(0.01):
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        deadline = time.monotonic() + 20.0
        while not all(p.get_subscription_count() for p in publishers.values()):
            assert time.monotonic() < deadline, "the nodes' subscriptions did not match"
            time.sleep(0.05)
        # A writer that sees its reader can still be unknown to that reader for a moment, and a
        # best-effort sample sent then is lost: a lost first odometry sample starts the policy's
        # reference clock a tick late and shifts every command after it. Playback starts 1 s
        # after the match.
        shift_ns = time.time_ns() + PLAYBACK_LEAD_NS - first_ns
        start_wall = time.monotonic() + PLAYBACK_LEAD_NS / NS
        for stamp, topic, msg in events:
            delay = start_wall + (stamp - first_ns) / NS - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if topic == "latent":
                latent = latent_cls(
                    encoder_version=msg.encoder_version, valid=msg.z_valid, z=list(msg.z)
                )
                tick_stamp = stamp + LATENT_LEAD_NS + shift_ns
                latent.header.stamp.sec, latent.header.stamp.nanosec = divmod(tick_stamp, NS)
                publishers["latent"].publish(latent)
                continue
            original = (msg.header.stamp.sec, msg.header.stamp.nanosec)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp + shift_ns, NS)
            publishers[topic].publish(msg)
            if topic == "odom" and stamp in ticked:
                publishers["policy odom"].publish(msg)
            msg.header.stamp.sec, msg.header.stamp.nanosec = original  # the fixture is shared
        time.sleep(0.5)  # the last latents and commands
    finally:
        stop.set()
        spinner.join(timeout=5)
        cli_node.close()
    return latents, commands, transitions


def _counter_offsets(recorded_ticks: dict[int, int], transitions: dict) -> list[tuple[int, int]]:
    """(index among the sorted recorded stamps, replayed minus recorded tick counter) of every
    recorded tick the replayed node's transitions (by stamp) show; the offset grows by one per
    extra tick of the replayed node."""
    stamps = sorted(recorded_ticks)
    return [
        (i, int(transitions[stamp].tick) - recorded_ticks[stamp])
        for i, stamp in enumerate(stamps)
        if stamp in transitions
    ]


def _in_step(recorded_ticks: dict[int, int], offsets: list[tuple[int, int]]) -> dict[int, bool]:
    """Per recorded odometry stamp (``recorded_ticks``: the recorded tick counter by stamp):
    True when the replayed node made no extra tick (``offsets``: :func:`_counter_offsets`)
    within SETTLE_TICKS before it, nor across the gap of unseen ticks it lies in."""
    stamps = sorted(recorded_ticks)
    disturbed = [False] * len(stamps)
    for (before, offset_before), (i, offset) in itertools.pairwise(offsets):
        if offset != offset_before:
            for j in range(before + 1, min(len(stamps), i + SETTLE_TICKS + 1)):
                disturbed[j] = True
    return {stamp: not d for stamp, d in zip(stamps, disturbed, strict=True)}


def _how_commands_differ(
    recorded: dict, transitions: dict, common: list[int], thrust: np.ndarray
) -> str:
    """What a failed median check saw: the size of the differences, how many in-step ticks
    used another z than the recorded tick, and whether the replayed policy's first tick (its
    reference time zero) was the recorded first one."""
    used = {s: m for s, m in recorded["vnd/replay"]}
    other_z = sum(
        1
        for s in common
        if s in transitions
        and (transitions[s].z_valid != used[s].z_valid or list(transitions[s].z) != list(used[s].z))
    )
    first_recorded, first_replayed = min(used), min(transitions, default=None)
    start = (
        "started on the recorded first tick"
        if first_replayed == first_recorded
        else f"started {(first_replayed - first_recorded) / 1e6:+.0f} ms from the recorded first "
        "tick (its reference clock is shifted)"
        if first_replayed is not None
        else "published no transitions"
    )
    return (
        f"most commands differ: median |thrust difference| {np.median(np.abs(thrust)):.2e} N "
        f"> {COMMAND_MEDIAN_TOL} N over {len(common)} in-step ticks; {other_z} of them used "
        f"another z than recorded; the replayed policy {start}; "
        f"{_where_inputs_differ(used, transitions, common, first_recorded)}"
    )


def _where_inputs_differ(used: dict, transitions: dict, common: list[int], t0_ns: int) -> str:
    """How far the replayed ticks' inputs (state, reference) and commands (action) were from the
    recorded ones over the in-step ticks, and when each first differed: a command that departs
    while the inputs agree points at the policy node's own state (its command history)."""
    ticks = sorted(s for s in common if s in transitions)
    parts = []
    for name in ("state", "reference", "action"):
        gaps = [
            float(
                np.max(np.abs(np.asarray(getattr(transitions[s], name)) - getattr(used[s], name)))
            )
            for s in ticks
        ]
        first = next((s for s, g in zip(ticks, gaps, strict=True) if g > 1e-9), None)
        when = f", first at +{(first - t0_ns) / 1e9:.2f} s" if first is not None else ""
        parts.append(f"{name} differs by up to {max(gaps, default=0.0):.2e}{when}")
    return "; ".join(parts)


def test_replayed_bag_reproduces_latents_and_commands(recorded, nodes):
    latents, commands, transitions = _replay(recorded, *nodes)
    # Latents: every stamp where both runs produced a valid z.
    recorded_z = {s: m for s, m in recorded["vnd/latent"] if m.valid}
    common_z = [s for s in recorded_z if s in latents and latents[s].valid]
    if recorded_z:
        assert len(common_z) >= MIN_LATENT_SHARE * len(recorded_z), (
            f"only {len(common_z)} of {len(recorded_z)} recorded valid latents reproduced"
        )
        worst = max(
            float(np.max(np.abs(np.asarray(latents[s].z) - np.asarray(recorded_z[s].z))))
            for s in common_z
        )
        assert worst <= LATENT_TOL, f"latent differs by {worst:.2e} > {LATENT_TOL}"
    else:  # a bundle without a VND model: the encoder must say so the same way
        assert all(not m.valid and len(m.z) == 0 for m in latents.values())
        assert {m.encoder_version for m in latents.values()} == {
            m.encoder_version for _, m in recorded["vnd/latent"]
        }
    # Commands, on the recorded policy ticks the replay kept in step (module docstring).
    recorded_ticks = {s: int(m.tick) for s, m in recorded["vnd/replay"]}
    offsets = _counter_offsets(recorded_ticks, transitions)
    in_step = _in_step(recorded_ticks, offsets)
    recorded_cmd = {s: m for s, m in recorded["vnd/command"] if m.mode == MODE_POLICY}
    steady = [s for s in recorded_cmd if in_step.get(s, False)]
    extra = offsets[-1][1] - offsets[0][1] if offsets else 0
    assert len(steady) >= MIN_IN_STEP_SHARE * len(recorded_cmd), (
        f"the host disturbed the replay: only {len(steady)} of {len(recorded_cmd)} recorded "
        f"policy ticks in step (the replayed policy ticked {extra} extra times)"
    )
    common = [s for s in steady if s in commands and commands[s].mode == MODE_POLICY]
    lost = len(steady) - len(common)
    modes = sorted({int(commands[s].mode) for s in steady if s in commands} - {MODE_POLICY})
    assert lost <= MAX_LOST_IN_STEP * len(steady), (
        f"{lost} of {len(steady)} in-step policy ticks were not ticked again in policy mode "
        f"({sum(s not in commands for s in steady)} without a command; other modes {modes})"
    )
    thrust = np.array([commands[s].thrust_n - recorded_cmd[s].thrust_n for s in common])
    rates = np.array(
        [
            np.asarray(commands[s].body_rate_radps) - np.asarray(recorded_cmd[s].body_rate_radps)
            for s in common
        ]
    )
    agree = (np.abs(thrust) <= COMMAND_TOL_N) & np.all(np.abs(rates) <= COMMAND_TOL_RADPS, axis=1)
    assert np.median(np.abs(thrust)) <= COMMAND_MEDIAN_TOL, _how_commands_differ(
        recorded, transitions, common, thrust
    )
    assert agree.mean() >= COMMAND_SHARE, (
        f"{agree.mean():.1%} of {len(common)} in-step commands within tolerance; worst thrust "
        f"{np.abs(thrust).max():.3f} N, rate {np.abs(rates).max():.3f} rad/s"
    )
    versions = {m.policy_version for m in commands.values()}
    assert versions == {m.policy_version for m in recorded_cmd.values()}
