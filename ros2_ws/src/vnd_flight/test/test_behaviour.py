"""Behavioural check: well-formed bundles that fly badly are refused with the figure that failed.

The bad bundles are built from the shipped one the way a broken or tampered training run would
produce them: tensors edited, metadata kept, the content hash recomputed (``pack``), so every
structural check passes and only flying them shows the problem.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import time
from pathlib import Path

import pytest
import safetensors.torch
import torch
from vnd_core.behaviour import (
    DEFAULT_MAX_BODY_RATE_RADPS,
    DEFAULT_MAX_TILT_RAD,
    BehaviourCheckConfig,
    behaviour_check,
    fly_envelope,
    initial_states,
)
from vnd_core.bundle import (
    Bundle,
    BundleError,
    load_bundle,
    pack,
    read_metadata,
    shipped_bundle_path,
    smoke_test,
)
from vnd_core.so3 import body_z_axis
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import VNDModel, VNDModelConfig
from vnd_flight.bundle_runtime import policy_validator
from vnd_flight.safety_config import SafetyConfig

VEHICLE = load_vehicle("agile")
SMALL_MODEL = VNDModelConfig(
    context_len=5, encoder_hidden=8, residual_hidden=(16,), decoder_hidden=(16,)
)


def shipped_bytes() -> bytes:
    return shipped_bundle_path().read_bytes()


def edited(data: bytes, edit) -> bytes:
    """``data`` with ``edit(tensors)`` applied and the sha256 recomputed (still well-formed)."""
    tensors = dict(safetensors.torch.load(data))
    edit(tensors)
    return pack(tensors, read_metadata(data))


def output_layer(tensors: dict) -> str:
    """Name prefix of the policy's last linear layer ('policy.net.<i>.')."""
    indices = {
        int(m.group(1)) for k in tensors if (m := re.match(r"policy\.net\.(\d+)\.weight", k))
    }
    return f"policy.net.{max(indices)}."


def scale_first_layer(tensors: dict) -> None:
    tensors["policy.net.0.weight"] = tensors["policy.net.0.weight"] * 1e6


def flip_output_layer(tensors: dict) -> None:
    last = output_layer(tensors)
    for part in ("weight", "bias"):
        tensors[last + part] = -tensors[last + part]


@pytest.fixture(scope="module")
def config() -> BehaviourCheckConfig:
    return BehaviourCheckConfig.for_flight(VEHICLE, SafetyConfig())


def test_shipped_bundle_passes_within_a_fraction_of_a_second(config):
    bundle = load_bundle(shipped_bytes())
    behaviour_check(bundle, config)  # first call pays one-off allocations
    durations, cpu = [], []
    for _ in range(3):
        start, cpu_start = time.perf_counter(), time.process_time()
        report = behaviour_check(bundle, config)
        durations.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    cost_ms = 1e3 * min(durations)
    print(
        f"behaviour check of the shipped bundle: {cost_ms:.1f} ms wall, "
        f"{1e3 * min(cpu):.1f} ms CPU ({report})"
    )
    assert report.violation == "" and report.rollouts == 6 and report.ticks == 100
    # it really flew: the offset starts were brought back, tilting on the way
    assert 0.3 < report.max_position_error_m <= config.offset_m + 0.05
    assert 0.1 < report.max_tilt_rad < config.max_tilt_rad
    assert cost_ms < 1000.0  # on the loader thread: well under a second even on a busy CPU


def test_first_layer_times_1e6_is_refused_naming_the_figure(config):
    data = edited(shipped_bytes(), scale_first_layer)
    bundle = load_bundle(data)  # hash, shapes, finite weights: all fine
    smoke_test(bundle, budget_us=1e6)  # finite commands inside the limits: fine too
    with pytest.raises(BundleError) as err:
        policy_validator(VEHICLE, 1e6, config)(bundle)
    message = str(err.value)
    print(message)
    limits = (
        rf"tilt \d+\.\d deg > {math.degrees(config.max_tilt_rad):.1f} deg",
        rf"body rate \d+\.\d rad/s > {config.max_body_rate_radps:.1f} rad/s",
        r"position error \d\.\d\d m > \d\.\d\d m.*",
    )
    match = re.match(
        rf"behaviour check: ({'|'.join(limits)}) at t=(\d+\.\d\d) s "
        r"from initial state '(\w+)' on the nominal model \(\d of 6 rollouts",
        message,
    )
    assert match, message
    assert float(match.group(2)) < 1.0  # within a second of the start


def test_output_layer_sign_flip_is_refused(config):
    data = edited(shipped_bytes(), flip_output_layer)
    bundle = load_bundle(data)
    shipped = load_bundle(shipped_bytes())
    last = output_layer(dict(safetensors.torch.load(data)))[len("policy.") :] + "weight"
    # plausible: same magnitudes as the shipped weights, only the sign differs
    assert torch.equal(bundle.policy.state_dict()[last], -shipped.policy.state_dict()[last])
    smoke_test(bundle, budget_us=1e6)
    with pytest.raises(BundleError, match=r"behaviour check: .* from initial state '\w+'"):
        policy_validator(VEHICLE, 1e6, config)(bundle)
    report, lines = fly_envelope(bundle, config)
    assert len(lines) >= 4 and report.violation == lines[0]  # most starts leave the envelope


def test_a_learned_model_is_flown_too(config):
    shipped = load_bundle(shipped_bytes())
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, SMALL_MODEL).eval()
    assert behaviour_check(Bundle(2, 1, shipped.policy, VEHICLE, model=model), config).rollouts == 6
    model.normalizers_fitted.fill_(True)  # as after a fit: now it counts as a learned model
    good = Bundle(2, 1, copy.deepcopy(shipped.policy), VEHICLE, model=model)
    start = time.process_time()
    assert behaviour_check(good, config).rollouts == 12  # both models, same starts
    print(f"with a small learned model: {1e3 * (time.process_time() - start):.1f} ms CPU")
    # a model whose residual pushes hard (0.2 of every unit per tick: a 10 m/s^2 gust, a
    # spin-up): the same policy leaves the envelope on it only
    wild = copy.deepcopy(model)
    head = [m for m in wild.residual.head.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        head.bias.fill_(0.2)
    bad = Bundle(2, 1, copy.deepcopy(shipped.policy), VEHICLE, model=wild)
    with pytest.raises(BundleError, match="on the bundle's learned model"):
        behaviour_check(bad, config)
    # without a learned-model rollout it would pass: the nominal half is the same policy
    behaviour_check(bad, dataclasses.replace(config, learned_model=False))


def test_a_bundle_learned_in_a_demo_passes(config):
    """The learned bundle the bag-replay test flies (wind learned in a demo run): its own
    model is flown too, and it stays inside the envelope."""
    path = Path(__file__).resolve().parents[2] / "vnd_policy/test/data/replay_bundle.safetensors"
    bundle = load_bundle(path)
    assert bundle.model is not None and bool(bundle.model.normalizers_fitted)
    report = behaviour_check(bundle, config)
    assert report.rollouts == 12 and report.violation == ""


def test_initial_states_start_inside_the_envelope(config):
    names, states = initial_states(config)
    assert names[0] == "hover" and len(set(names)) == len(names) == states.shape[0]
    tilt = torch.acos(body_z_axis(states[:, 3:7])[:, 2].clamp(-1, 1))
    assert float(tilt.max()) == pytest.approx(config.tilt_rad, abs=1e-5)
    offsets = (states[:, :3] - torch.tensor(config.hover_m)).norm(dim=-1)
    assert float(offsets.max()) == pytest.approx(config.offset_m, abs=1e-5)


@dataclasses.dataclass(frozen=True)
class FilterLimits:
    """Any safety config carrying the envelope fields the behavioural check reads."""

    max_tilt_rad: float = 0.5
    max_body_rate_radps: float = 6.0


def test_limits_follow_the_safety_filter_when_it_has_them():
    from_filter = BehaviourCheckConfig.for_flight(VEHICLE, FilterLimits())
    assert from_filter.max_tilt_rad == 0.5 and from_filter.max_body_rate_radps == 6.0
    assert from_filter.max_yaw_rate_radps == VEHICLE.body_rate_max_radps[2]
    own = BehaviourCheckConfig.for_flight(VEHICLE, object())
    assert own.max_tilt_rad == DEFAULT_MAX_TILT_RAD
    assert own.max_body_rate_radps == DEFAULT_MAX_BODY_RATE_RADPS
    # The in-flight envelope is looser than the check: the check's own limits apply.
    flight = BehaviourCheckConfig.for_flight(VEHICLE, SafetyConfig())
    assert SafetyConfig().envelope.max_tilt_rad > DEFAULT_MAX_TILT_RAD == flight.max_tilt_rad
    with pytest.raises(ValueError, match="tilt_rad"):
        BehaviourCheckConfig.for_flight(VEHICLE, FilterLimits(max_tilt_rad=0.1))


def test_disabled_check_lets_anything_through(config):
    bundle = load_bundle(edited(shipped_bytes(), flip_output_layer))
    skipped = behaviour_check(bundle, dataclasses.replace(config, enabled=False))
    assert skipped.rollouts == 0
