"""The ROS-free pre-flight checks: each threshold both ways, with synthetic samples."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from vnd_core.units import NS_PER_S
from vnd_tools.preflight import (
    CheckRow,
    LearnerReport,
    ListAnswer,
    NodeReport,
    PreflightReport,
    PreflightThresholds,
    Verdict,
    by_role,
    check_bundle_active,
    check_bundle_versions,
    check_learner,
    check_node_warnings,
    check_status_reports,
    format_table,
    node_role,
)
from vnd_tools.preflight_streams import (
    DiskSample,
    check_clock_offset,
    check_commands,
    check_disk,
    check_odometry,
    check_stream_jitter,
    check_stream_rate,
    measure_disk,
    stream_stats,
)

T = PreflightThresholds()
TOPIC = "/vnd1/mocap/pose"


def grid_stamps(rate_hz: float, count: int, start_ns: int = 10 * NS_PER_S) -> list[int]:
    """``count`` evenly spaced stamps at ``rate_hz``."""
    return [start_ns + round(i * NS_PER_S / rate_hz) for i in range(count)]


def hover_states(count: int) -> np.ndarray:
    """(count, 13) level states at rest at 1 m height."""
    states = np.zeros((count, 13))
    states[:, 2] = 1.0
    states[:, 3] = 1.0
    return states


# ---------------------------------------------------------------- streams


def test_stream_stats_of_a_regular_stream() -> None:
    stats = stream_stats(grid_stamps(200.0, 401))
    assert stats.count == 401
    assert stats.rate_hz == pytest.approx(200.0, rel=1e-6)
    assert stats.jitter_ms == pytest.approx(0.0, abs=1e-3)
    assert stats.max_gap_ms == pytest.approx(5.0, abs=1e-3)
    assert stats.non_increasing == 0


def test_stream_stats_with_too_few_stamps_is_nan() -> None:
    assert math.isnan(stream_stats([]).rate_hz)
    one = stream_stats([5])
    assert one.count == 1 and math.isnan(one.max_gap_ms)
    assert math.isnan(stream_stats([1, 2]).jitter_ms)


@pytest.mark.parametrize(
    ("rate_hz", "ok"), [(100.0, True), (360.0, True), (20.0, False), (89.0, False), (500.0, False)]
)
def test_mocap_rate_both_ways(rate_hz: float, ok: bool) -> None:
    stats = stream_stats(grid_stamps(rate_hz, 200))
    row = check_stream_rate("mocap rate", TOPIC, stats, 90.0, 400.0, 2.0)
    assert row.verdict is (Verdict.PASS if ok else Verdict.FAIL)
    assert f"{rate_hz:.1f} Hz" in row.measured
    assert row.expected == "90.0-400.0 Hz"


def test_mocap_rate_without_messages_fails_naming_the_topic() -> None:
    row = check_stream_rate("mocap rate", TOPIC, stream_stats([]), 90.0, 400.0, 3.0)
    assert row.failed
    assert row.measured == "0 message(s) on /vnd1/mocap/pose in 3.0 s"


def test_jitter_threshold_both_ways() -> None:
    rng = np.random.default_rng(0)
    base = np.array(grid_stamps(100.0, 300))
    steady = base + rng.normal(0, 0.3e6, base.size).astype(np.int64)  # 0.3 ms noise
    shaky = base + rng.normal(0, 3e6, base.size).astype(np.int64)  # 3 ms noise
    shaky.sort()
    assert not check_stream_jitter("mocap jitter", TOPIC, stream_stats(steady), T).failed
    row = check_stream_jitter("mocap jitter", TOPIC, stream_stats(shaky), T)
    assert row.failed and "std" in row.measured


def test_gap_threshold_both_ways() -> None:
    stamps = grid_stamps(100.0, 100)
    gap = stamps[:50] + [s + 45_000_000 for s in stamps[50:]]  # one 55 ms interval
    loose = replace(T, mocap_max_jitter_ms=100.0)
    assert check_stream_jitter("j", TOPIC, stream_stats(gap), loose).failed
    assert not check_stream_jitter(
        "j", TOPIC, stream_stats(gap), replace(loose, mocap_max_gap_ms=60.0)
    ).failed


def test_repeated_stamps_fail_jitter() -> None:
    stamps = grid_stamps(100.0, 50)
    stamps[10] = stamps[9]
    row = check_stream_jitter("j", TOPIC, stream_stats(stamps), replace(T, mocap_max_jitter_ms=9))
    assert row.failed and "1 non-increasing" in row.measured


@pytest.mark.parametrize(
    ("offset_ms", "ok"), [(1.0, True), (-15.0, True), (25.0, False), (-40.0, False)]
)
def test_clock_offset_both_ways(offset_ms: float, ok: bool) -> None:
    stamps = grid_stamps(100.0, 100)
    received = [s + round(offset_ms * 1e6) for s in stamps]
    received[3] += 500_000_000  # one late delivery does not move the median
    row = check_clock_offset(TOPIC, stamps, received, T)
    assert row.failed is not ok
    assert f"{offset_ms:+.1f} ms" in row.measured


def test_clock_offset_without_stamps_fails() -> None:
    assert check_clock_offset(TOPIC, [], [], T).failed


# ---------------------------------------------------------------- odometry


def test_healthy_odometry_passes() -> None:
    row = check_odometry("/vnd1/odom", hover_states(50), T)
    assert row.verdict is Verdict.PASS
    assert "50 msgs" in row.measured


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [
        (3, 1.05, "||q|-1|"),
        (7, 6.0, "speed up to 6.00 m/s"),
        (12, -11.0, "body rate up to 11.00 rad/s"),
        (0, np.nan, "1 non-finite"),
    ],
)
def test_odometry_faults_fail_with_the_measured_value(column: int, value: float, text: str) -> None:
    states = hover_states(20)
    states[7, column] = value
    row = check_odometry("/vnd1/odom", states, T)
    assert row.failed and text in row.measured


def test_odometry_thresholds_pass_just_inside() -> None:
    states = hover_states(5)
    states[:, 3] = 1.009  # |q| - 1 = 0.009 < 0.01
    states[:, 7] = 4.99
    states[:, 10] = 9.99
    assert not check_odometry("/odom", states, T).failed


def test_no_odometry_fails() -> None:
    row = check_odometry("/vnd1/odom", np.zeros((0, 13)), T)
    assert row.failed and row.measured == "no odometry on /vnd1/odom"


# ---------------------------------------------------------------- nodes and bundles


def reports(encoder: int = 3, policy: int = 3, **kw) -> dict[str, NodeReport]:
    return by_role(
        [
            NodeReport("/vnd1/encoder", encoder, kw.get("enc_pinned", False), age_s=0.2),
            NodeReport("/vnd1/policy", policy, kw.get("pol_pinned", False), 1, kw.get("age", 0.4)),
        ]
    )


def answers(encoder: int = 3, policy: int = 3) -> dict[str, ListAnswer]:
    return by_role(
        [ListAnswer("/vnd1/encoder", encoder, (1, encoder)), ListAnswer("/vnd1/policy", policy)]
    )


def test_node_role() -> None:
    assert node_role("/vnd1/policy") == "policy"
    assert node_role("encoder") == "encoder"


def test_status_reports_fresh_stale_missing() -> None:
    assert not check_status_reports(reports(), T).failed
    stale = check_status_reports(reports(age=5.0), T)
    assert stale.failed and "policy: 5.0 s old (STALE)" in stale.measured
    missing = check_status_reports(by_role([NodeReport("/vnd1/policy", 3, False)]), T)
    assert missing.failed and "encoder: no report" in missing.measured


def test_bundle_active_both_ways() -> None:
    assert not check_bundle_active(reports(), answers()).failed
    assert not check_bundle_active(reports(), None).failed
    none = check_bundle_active(reports(encoder=0), answers(encoder=0))
    assert none.failed and "encoder v0" in none.measured
    unanswered = check_bundle_active(reports(), {})
    assert unanswered.failed and "no LIST answer" in unanswered.measured
    rejected = {**reports(), "policy": NodeReport("/vnd1/policy", 3, False, 1, 0.1, rejections=2)}
    row = check_bundle_active(rejected, answers())
    assert not row.failed and "policy v3 (2 bundle(s) rejected so far)" in row.measured
    disagree = check_bundle_active(reports(), answers(policy=2))
    assert disagree.failed and "LIST: active v2" in disagree.measured


def test_bundle_versions_match_mismatch_and_stale() -> None:
    assert not check_bundle_versions(reports(), 3).failed
    assert not check_bundle_versions(reports(), None).failed
    mismatch = check_bundle_versions(reports(encoder=2, policy=3), 3)
    assert mismatch.failed
    assert "encoder v2, policy v3" in mismatch.measured and "version mismatch" in mismatch.measured
    stale = check_bundle_versions(reports(), 5)
    assert stale.failed and "learner latest v5" in stale.measured and "stale" in stale.measured


def test_pinned_nodes_may_fly_an_older_bundle_but_must_agree_on_the_pin() -> None:
    pinned = reports(enc_pinned=True, pol_pinned=True)
    assert not check_bundle_versions(pinned, 5).failed
    half = check_bundle_versions(reports(enc_pinned=True), 3)
    assert half.failed and "pin differs" in half.measured


def test_bundle_versions_without_status_fails() -> None:
    row = check_bundle_versions({}, 3)
    assert row.failed and row.measured == "no status from encoder and policy"


# ---------------------------------------------------------------- commands, learner, disk


def commands(count: int = 100, rate_hz: float = 50.0, mode: int = 1, version: int = 3):
    stamps = grid_stamps(rate_hz, count)
    actions = np.tile([7.0, 0.0, 0.1, 0.0], (count, 1))
    return stamps, actions, [mode] * count, [version] * count


def test_commands_pass_and_report_the_mode() -> None:
    row = check_commands("/vnd1/vnd/command", *commands(), 3, T)
    assert row.verdict is Verdict.PASS and "mode policy" in row.measured


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"rate_hz": 20.0}, "too slow"),
        ({"mode": 3}, "mode land"),
        ({"version": 2}, "versions [2] != policy v3"),
    ],
)
def test_command_faults(change: dict, text: str) -> None:
    row = check_commands("/c", *commands(**change), 3, T)
    assert row.failed and text in row.measured


def test_non_finite_and_negative_commands_fail() -> None:
    stamps, actions, modes, versions = commands()
    actions[5, 2] = np.inf
    assert "1 non-finite" in check_commands("/c", stamps, actions, modes, versions, 3, T).measured
    actions[5, 2] = 0.0
    actions[6, 0] = -0.5
    assert (
        "negative thrust" in check_commands("/c", stamps, actions, modes, versions, 3, T).measured
    )


def test_accepted_modes_option_accepts_hold() -> None:
    hold = commands(mode=2)
    assert check_commands("/c", *hold, 3, T).failed
    assert not check_commands("/c", *hold, 3, replace(T, accepted_modes=("policy", "hold"))).failed


def test_no_commands_fail() -> None:
    row = check_commands("/vnd1/vnd/command", [], np.zeros((0, 4)), [], [], 3, T)
    assert row.failed and row.measured == "no commands on /vnd1/vnd/command"


def learner(age_s: float = 0.5, state: int = 1) -> LearnerReport:
    return LearnerReport(state, 3, 1200, "disk full" if state == 5 else "", age_s, 3)


def test_learner_both_ways() -> None:
    assert not check_learner(learner(), 3.0, T).failed
    old = check_learner(learner(age_s=4.0), 5.0, T)
    assert old.failed and "last report 4.0 s ago" in old.measured
    error = check_learner(learner(state=5), 3.0, T)
    assert error.failed and "error" in error.measured and "disk full" in error.measured
    missing = check_learner(None, 3.0, T)
    assert missing.failed and missing.measured == "no vnd/learner/status report in 3.0 s"
    assert check_learner(None, 3.0, T, expected_running=False).verdict is Verdict.SKIP


def test_a_refused_learner_bundle_fails_the_learner_row() -> None:
    refusal = "/vnd1/policy refused v5: rejected: behaviour check: tilt 52.0 deg > 45.8 deg"
    refused = replace(learner(), latest_refused=True, refusal=refusal)
    row = check_learner(refused, 3.0, T)
    assert row.failed and row.measured.endswith(f"; BAD: newest bundle refused: {refusal}")
    # an older refusal, the newest bundle accepted: nothing to fail on
    assert not check_learner(replace(learner(), refusal=refusal), 3.0, T).failed


def test_disk_both_ways() -> None:
    sample = DiskSample("/data/run", "/data/run", 2048 * 1024 * 1024, True, 0)
    assert not check_disk(sample, T).failed
    small = replace(sample, free_bytes=100 * 1024 * 1024)
    row = check_disk(small, T)
    assert row.failed and "100 MiB free" in row.measured and ">= 1024 MiB" in row.expected
    assert check_disk(replace(sample, writable=False), T).failed


def test_measure_disk_walks_up_to_an_existing_parent(tmp_path) -> None:
    (tmp_path / "run" / "replay").mkdir(parents=True)
    (tmp_path / "run" / "replay" / "seg.mcap").write_bytes(b"x" * 5000)
    existing = measure_disk(tmp_path / "run")
    assert existing.probed == str(tmp_path / "run") and existing.store_bytes == 5000
    assert existing.free_bytes > 0 and existing.writable
    future = measure_disk(tmp_path / "new" / "deeper")
    assert future.probed == str(tmp_path) and future.store_bytes == 0
    assert "to be created" in check_disk(future, replace(T, min_free_mb=0)).measured


# ---------------------------------------------------------------- thresholds and output


def test_threshold_validation_names_the_field() -> None:
    T.validate()
    with pytest.raises(ValueError, match="mocap_min_rate_hz"):
        replace(T, mocap_min_rate_hz=500.0).validate()
    with pytest.raises(ValueError, match="max_speed_mps"):
        replace(T, max_speed_mps=-1.0).validate()
    with pytest.raises(ValueError, match="accepted_modes"):
        replace(T, accepted_modes=("flying",)).validate()


def test_table_and_json() -> None:
    rows = [
        CheckRow("mocap rate", Verdict.FAIL, "20.0 Hz over 60 stamps", "90.0-400.0 Hz"),
        CheckRow("learner", Verdict.SKIP, "not checked", "x"),
        CheckRow("disk space", Verdict.PASS, "5 MiB", ">= 1 MiB"),
    ]
    report = PreflightReport(rows, "vnd1", 3.0)
    assert not report.passed
    table = format_table(report)
    assert "mocap rate  FAIL    20.0 Hz over 60 stamps" in table
    assert table.splitlines()[-1] == "preflight FAILED: 1 of 3 checks (mocap rate)"
    doc = json.loads(report.to_json())
    assert doc["passed"] is False and doc["rows"][0]["verdict"] == "FAIL"
    ok = PreflightReport(rows[1:], "vnd1", 3.0)
    assert ok.passed and format_table(ok).endswith("preflight passed: 2 checks, vehicle 'vnd1'")


def test_node_warnings_fail_naming_each_node_and_warning() -> None:
    quiet = {
        "encoder": NodeReport("/v/encoder", 3, False),
        "policy": NodeReport("/v/policy", 3, False),
    }
    assert check_node_warnings(quiet).verdict == Verdict.PASS
    warned = dict(quiet)
    warned["policy"] = NodeReport(
        "/v/policy", 3, False, warnings=("latent missing for 2.0 s: flying on z = 0",)
    )
    row = check_node_warnings(warned)
    assert row.verdict == Verdict.FAIL and row.measured.startswith("policy: latent missing")
