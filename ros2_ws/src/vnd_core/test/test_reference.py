"""Reference trajectories: feed-forward consistent with finite differences, shapes, speeds."""

from __future__ import annotations

import math

import pytest
import torch
from vnd_core.config_io import ConfigError, from_mapping
from vnd_core.reference import KINDS, ReferenceSpec, Trajectory


def _random_trajectory(batch: int = 24) -> Trajectory:
    gen = torch.Generator().manual_seed(7)
    traj = Trajectory.random(batch, generator=gen, kind_probs=(1 / 3, 1 / 3, 1 / 3))
    assert set(traj.kind.tolist()) == {0, 1, 2}
    return traj


def test_velocity_and_acceleration_match_finite_differences():
    traj = _random_trajectory()
    h = 1e-3
    t = torch.linspace(0.0, 9.0, traj.batch_size, dtype=torch.float64)
    before, now, after = traj.sample(t - h), traj.sample(t), traj.sample(t + h)
    velocity_fd = (after.position_m - before.position_m) / (2 * h)
    accel_fd = (after.velocity_mps - before.velocity_mps) / (2 * h)
    assert torch.allclose(velocity_fd, now.velocity_mps, atol=2e-3)
    assert torch.allclose(accel_fd, now.acceleration_mps2, atol=5e-3)


def test_lookahead_matches_pointwise_samples():
    traj = _random_trajectory(5)
    t = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])
    offsets = torch.tensor([0.0, 0.1, 0.2])
    ahead = traj.lookahead(t, offsets)
    assert ahead.position_m.shape == (5, 3, 3)
    assert ahead.stacked().shape == (5, 3, 9)
    for j, off in enumerate(offsets):
        point = traj.sample(t + off)
        assert torch.allclose(ahead.position_m[:, j], point.position_m, atol=1e-6)
        assert torch.allclose(ahead.acceleration_mps2[:, j], point.acceleration_mps2, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_peak_speed_matches_sampled_maximum(kind):
    spec = ReferenceSpec(kind=kind, center_m=(0.5, -0.5, 1.2), amplitude_m=1.2, period_s=6.0)
    traj = Trajectory.from_spec(spec, batch_size=1)
    t = torch.linspace(0.0, spec.period_s, 6001).unsqueeze(0)
    speed = traj.sample(t).velocity_mps.norm(dim=-1).max().item()
    assert speed == pytest.approx(spec.peak_speed_mps(), rel=1e-3, abs=1e-6)


def test_hover_holds_still_at_the_centre():
    traj = Trajectory.from_spec(ReferenceSpec(center_m=(1.0, 2.0, 1.5)), batch_size=2)
    sample = traj.sample(torch.tensor([0.0, 3.7]))
    assert torch.allclose(sample.position_m, torch.tensor([[1.0, 2.0, 1.5]] * 2))
    assert sample.velocity_mps.abs().max() == 0 and sample.acceleration_mps2.abs().max() == 0


def test_figure_eight_is_periodic_and_centred():
    spec = ReferenceSpec(kind="figure8", center_m=(0.0, 0.0, 1.2), amplitude_m=1.2, period_s=6.0)
    traj = Trajectory.from_spec(spec)
    t = torch.linspace(0.0, 6.0, 601).unsqueeze(0)
    pos = traj.sample(t).position_m[0]
    assert torch.allclose(pos[0], pos[-1], atol=1e-5)
    assert torch.allclose(pos.mean(dim=0), torch.tensor([0.0, 0.0, 1.2]), atol=1e-2)
    assert pos[:, 0].abs().max() == pytest.approx(1.2, rel=1e-3)
    assert pos[:, 1].abs().max() == pytest.approx(0.6, rel=1e-3)
    assert math.isclose(spec.peak_speed_mps(), 1.2 * 2 * math.pi / 6 * math.sqrt(2))


def test_bad_spec_is_refused_with_the_field_name():
    with pytest.raises(ConfigError, match=r"ref\.yaml: kind must be one of"):
        from_mapping(ReferenceSpec, {"kind": "spiral"}, "ref.yaml")
    with pytest.raises(ConfigError, match="period_s must be > 0"):
        from_mapping(ReferenceSpec, {"period_s": -1.0}, "ref.yaml")
