"""Unit tests of the VND model pieces: features, dataset windows, MMD, encoder, residual,
export metadata."""

import json

import pytest
import torch
from vnd_core.config_io import ConfigError
from vnd_core.state import STATE_DIM, hover_state
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import (
    NO_LABEL,
    Segment,
    TransitionDataset,
    VNDModel,
    VNDModelConfig,
    latent_knn_accuracy,
    mmd_imq,
)
from vnd_core.vnd.features import RESIDUAL_DIM, apply_residual, state_difference
from vnd_core.vnd.fit import FitConfig, vnd_losses
from vnd_core.vnd.losses import MMDSchedule, velocity_sensitivity_penalty
from vnd_core.vnd.synthetic import simulate_with_forces, two_condition_segments

torch.set_num_threads(1)

# the synthetic plant of these tests has no command latency: pair t with a_t
SMALL = VNDModelConfig(
    context_len=8,
    encoder_hidden=16,
    residual_hidden=(32,),
    decoder_hidden=(16,),
    action_delay_ticks=0,
)


@pytest.fixture(scope="module")
def vehicle():
    return load_vehicle("agile")


@pytest.fixture(scope="module")
def model(vehicle):
    torch.manual_seed(0)
    return VNDModel(vehicle, SMALL)


@pytest.fixture(scope="module")
def windy(model):
    """Six labelled segments of 60 ticks under +x / -y forces, normalisers fitted."""
    segments = two_condition_segments(model.prior, (1.0, 0, 0), (0, -1.0, 0), 3, 60, seed=1)
    dataset = TransitionDataset(model.prior, segments)
    model.fit_normalizers(dataset)
    return dataset


def random_states(count: int, generator: torch.Generator) -> torch.Tensor:
    """States (count, 13) with random unit quaternions and moderate velocities and rates."""
    state = torch.randn(count, STATE_DIM, generator=generator)
    state[:, 3:7] = state[:, 3:7] / state[:, 3:7].norm(dim=-1, keepdim=True)
    return state


# ------------------------------------------------------------------------ MMD


def test_mmd_is_near_zero_for_prior_samples_and_grows_with_shift():
    generator = torch.Generator().manual_seed(0)
    normal = lambda: torch.randn(256, 8, generator=generator)  # noqa: E731
    same = mmd_imq(normal(), normal())
    shifted = [float(mmd_imq(normal() + shift, normal())) for shift in (0.5, 1.0, 2.0)]
    assert abs(float(same)) < 0.01
    assert shifted[0] > 5 * abs(float(same))
    assert shifted[0] < shifted[1] < shifted[2]


def test_mmd_detects_collapsed_latents():
    generator = torch.Generator().manual_seed(1)
    collapsed = 0.05 * torch.randn(256, 8, generator=generator)
    assert float(mmd_imq(collapsed, torch.randn(256, 8, generator=generator))) > 0.1


def test_mmd_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="mmd needs"):
        mmd_imq(torch.zeros(4, 3), torch.zeros(4, 2))


def test_mmd_schedule_warms_up_then_ramps_to_max():
    schedule = MMDSchedule(weight_max=2.0, warmup_frac=0.1, ramp_frac=0.4)
    weights = [schedule.weight(step, 100) for step in (0, 9, 10, 30, 50, 99)]
    assert weights == pytest.approx([0.0, 0.0, 0.0, 1.0, 2.0, 2.0])


# ------------------------------------------------------------------------ features


def test_residual_targets_of_data_generated_by_the_prior_are_zero(model):
    generator = torch.Generator().manual_seed(2)
    segments = simulate_with_forces(model.prior, torch.zeros(3, 3), 80, generator)
    targets = TransitionDataset(model.prior, segments).tensors()["targets"]
    assert targets.shape == (3 * 79, RESIDUAL_DIM)
    assert float(targets.abs().max()) < 1e-5


def test_apply_residual_inverts_the_manifold_difference():
    generator = torch.Generator().manual_seed(3)
    a, b = random_states(64, generator), random_states(64, generator)
    rebuilt = apply_residual(b, state_difference(a, b))
    assert torch.allclose(rebuilt[:, :3], a[:, :3], atol=1e-5)
    assert torch.allclose(rebuilt[:, 7:], a[:, 7:], atol=1e-5)
    same_rotation = (rebuilt[:, 3:7] * a[:, 3:7]).sum(-1).abs()  # q and -q are one rotation
    assert torch.allclose(same_rotation, torch.ones(64), atol=1e-5)


def test_residual_targets_recover_a_known_constant_force(model):
    force_n = torch.tensor([[0.0, 0.0, 1.5]])
    segment = simulate_with_forces(model.prior, force_n, 30, torch.Generator().manual_seed(4))
    targets = TransitionDataset(model.prior, segment).tensors()["targets"]
    expected_dv = 1.5 / model.vehicle.mass_kg * model.prior.config.dt_s
    assert torch.allclose(targets[:, 8], torch.full((29,), expected_dv), atol=1e-5)
    assert float(targets[:, 6:8].abs().max()) < 1e-5


# ------------------------------------------------------------------------ dataset


def test_windows_never_cross_segment_boundaries(model):
    generator = torch.Generator().manual_seed(5)
    lengths = (40, 12, 25)  # states; 39, 11 and 24 transitions
    segments = [
        simulate_with_forces(model.prior, torch.zeros(1, 3), n, generator)[0] for n in lengths
    ]
    dataset = TransitionDataset(model.prior, segments)
    starts = dataset.window_starts(context_len=8, horizon=5)
    assert len(starts) == (39 - 13 + 1) + 0 + (24 - 13 + 1)
    assert int(starts.max()) + 13 <= dataset.num_transitions
    assert not ((starts > 39 - 13) & (starts < 39 + 11)).any()


def test_gather_aligns_context_targets_and_states(model, windy):
    starts = windy.window_starts(model.context_len, 4)[:5]
    batch = windy.gather(starts, model.context_len, 4)
    rows = windy.tensors()
    first = starts + model.context_len
    assert torch.equal(batch.states[:, 0], rows["state"][first])
    assert torch.equal(batch.states[:, 1], rows["next"][first])
    assert torch.equal(batch.context[:, -1, -RESIDUAL_DIM:], rows["targets"][first - 1])
    assert torch.equal(batch.targets[:, 0], rows["targets"][first])


def test_context_windows_read_the_context_states_and_targets_the_states(model, windy):
    segment = two_condition_segments(model.prior, (1.0, 0, 0), (0, -1.0, 0), 1, 60, seed=2)[0]
    seen = torch.as_tensor(segment.states).clone()
    generator = torch.Generator().manual_seed(0)
    seen[:, 7:10] += 0.05 * torch.randn(seen.shape[0], 3, generator=generator)  # velocity noise
    clean = TransitionDataset(model.prior, [segment])
    two_views = TransitionDataset(
        model.prior, [Segment(segment.states, segment.actions, segment.labels, seen)]
    )
    noisy = TransitionDataset(model.prior, [Segment(seen, segment.actions, segment.labels)])
    starts = clean.window_starts(model.context_len, 4)[:6]
    batch = two_views.gather(starts, model.context_len, 4)
    assert torch.equal(batch.context, noisy.context(starts, model.context_len))
    expected = clean.gather(starts, model.context_len, 4)
    for field in ("inputs", "targets", "states"):
        assert torch.equal(getattr(batch, field), getattr(expected, field))
    with pytest.raises(ValueError, match="context_states must match"):
        TransitionDataset(model.prior, [Segment(segment.states, segment.actions, None, seen[1:])])


def test_bad_segments_are_rejected_with_a_reason(model):
    states = hover_state((10,))
    with pytest.raises(ValueError, match="needs at least 9"):
        TransitionDataset(model.prior, [Segment(states, torch.zeros(5, 4))])
    with pytest.raises(ValueError, match="states must be"):
        TransitionDataset(model.prior, [Segment(states[:, :12], torch.zeros(9, 4))])
    bad = states.clone()
    bad[3, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        TransitionDataset(model.prior, [Segment(bad, torch.zeros(9, 4))])
    with pytest.raises(ValueError, match="labels"):
        TransitionDataset(model.prior, [Segment(states, torch.zeros(9, 4), torch.zeros(3))])


# ------------------------------------------------------------------------ model


def test_untrained_model_predicts_like_the_prior(model, windy):
    rows = windy.tensors()
    z = torch.randn(len(rows["state"]), model.latent_dim)
    with torch.no_grad():
        learned = model.predict(rows["state"], rows["action"], z)
    error = state_difference(learned, model.prior(rows["state"], rows["action"]))
    # Within a few percent of the typical prior error: the model starts as the prior.
    assert (error.abs().amax(0) < 0.1 * model.residual.target_std).all()


def test_encode_from_raw_windows_equals_the_training_path(model, windy):
    """The deployed encoder (raw window) computes exactly what the fit computes."""
    c = model.context_len
    starts = windy.window_starts(c, 0)[::17]
    rows = windy.tensors()
    index = starts[:, None] + torch.arange(c)
    window_states = torch.cat([rows["state"][index], rows["next"][index[:, -1:]]], dim=1)
    with torch.no_grad():
        deployed = model.encode(window_states, rows["action"][index])
        trained = model.encoder(windy.context(starts, c))
    assert torch.allclose(deployed, trained, atol=1e-6)
    with pytest.raises(ValueError, match="context actions"):
        model.encode(window_states[:, 1:], rows["action"][index][:, 1:])


def test_encode_all_is_deterministic_and_batch_independent(model, windy):
    first = model.encode_all(windy)
    again = model.encode_all(windy)
    small_batches = model.encode_all(windy, batch_size=7)
    assert torch.equal(first.z, again.z)
    assert torch.allclose(first.z, small_batches.z, atol=1e-6)
    assert len(first.z) == len(windy.window_starts(model.context_len, 0))
    assert set(first.labels.tolist()) == {0, 1}
    assert model.training  # restored


def test_gradient_reaches_the_encoder_through_the_residual_loss(model, windy):
    starts = windy.window_starts(model.context_len, 3)[:32]
    batch = windy.gather(starts, model.context_len, 3)
    model.zero_grad()
    config = FitConfig(lambda_rec=0.0, horizon=3)
    vnd_losses(model, batch, config, mmd_weight=0.0)["residual"].backward()
    grads = [p.grad for p in model.encoder.parameters()]
    assert all(g is not None for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    model.zero_grad()


def test_rollout_repeats_predict_and_prior_rollout_repeats_the_prior(model, windy):
    rows = windy.tensors()
    state, actions = rows["state"][:4], rows["action"][:20].reshape(4, 5, 4)
    z = torch.randn(4, model.latent_dim)
    with torch.no_grad():
        states = model.rollout(state, actions, z)
        prior_states = model.rollout_prior(state, actions)
        assert states.shape == (4, 6, STATE_DIM)
        assert torch.equal(states[:, 0], state)
        assert torch.allclose(states[:, 2], model.predict(states[:, 1], actions[:, 1], z))
        assert torch.allclose(prior_states[:, 3], model.prior(prior_states[:, 2], actions[:, 2]))


def test_predict_is_differentiable_in_state_action_and_z(model):
    state = hover_state((3,)).requires_grad_(True)
    action = torch.tensor([[7.4, 0.1, 0.0, 0.0]] * 3, requires_grad=True)
    z = torch.randn(3, model.latent_dim, requires_grad=True)
    model.predict(state, action, z).square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (state, action, z))


def test_architecture_round_trip_rebuilds_the_same_model(model, vehicle, windy):
    arch = json.loads(json.dumps(model.architecture()))
    rebuilt = VNDModel.from_architecture(arch, vehicle)
    rebuilt.load_state_dict(model.state_dict())
    rows = windy.tensors()
    z = torch.randn(10, model.latent_dim)
    with torch.no_grad():
        assert torch.equal(
            rebuilt.predict(rows["state"][:10], rows["action"][:10], z),
            model.predict(rows["state"][:10], rows["action"][:10], z),
        )
    assert bool(rebuilt.normalizers_fitted)


def test_from_architecture_names_bad_fields(vehicle):
    with pytest.raises(ConfigError, match="unknown field 'latent_size'"):
        VNDModel.from_architecture({"latent_size": 8}, vehicle)
    with pytest.raises(ConfigError, match="latent_dim"):
        VNDModel.from_architecture({"latent_dim": 0}, vehicle)


def test_knn_accuracy_ignores_unlabelled_points():
    z = torch.cat([torch.zeros(10, 2), torch.ones(10, 2) * 5, torch.randn(5, 2)])
    labels = torch.cat([torch.zeros(10), torch.ones(10), torch.full((5,), NO_LABEL)]).long()
    assert latent_knn_accuracy(z, labels, k=3) == 1.0
    assert latent_knn_accuracy(z[:20], torch.tensor([0, 1] * 10), k=3) < 0.7


def test_a_dataset_built_with_another_prior_is_refused(windy):
    other = VNDModel(load_vehicle("small"), SMALL)
    with pytest.raises(ValueError, match="dataset prior \\(agile"):
        other.encode_all(windy)


def test_state_dict_survives_a_safetensors_round_trip(model, vehicle):
    from safetensors.torch import load, save

    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    rebuilt = VNDModel.from_architecture(model.architecture(), vehicle)
    rebuilt.load_state_dict(load(save(tensors)), strict=True)
    for name, tensor in rebuilt.state_dict().items():
        assert torch.equal(tensor, tensors[name]), name


def test_frozen_dynamics_passes_gradient_to_inputs_only(vehicle):
    frozen = VNDModel(vehicle, SMALL)
    dynamics = frozen.frozen_dynamics()
    action = torch.tensor([[7.4, 0.1, 0.0, 0.0]], requires_grad=True)
    dynamics(hover_state((1,)), action, torch.zeros(1, frozen.latent_dim)).sum().backward()
    assert action.grad is not None
    assert all(p.grad is None and not p.requires_grad for p in frozen.parameters())


def test_action_delay_pairs_each_transition_with_the_action_that_drove_it(vehicle):
    """A vehicle that executes commands two ticks late is exactly the prior once aligned."""
    delayed_model = VNDModel(vehicle, VNDModelConfig(context_len=4, action_delay_ticks=2))
    prior = delayed_model.prior
    generator = torch.Generator().manual_seed(6)
    actions = torch.tensor([prior.vehicle.hover_thrust_n, 0, 0, 0]) + 0.5 * torch.randn(
        30, 4, generator=generator
    )
    states = [hover_state()]
    for t in range(29):
        driving = (
            actions[t - 2] if t >= 2 else torch.tensor([prior.vehicle.hover_thrust_n, 0, 0, 0])
        )
        states.append(prior(states[-1], driving))
    segment = Segment(torch.stack(states), actions[:29], torch.arange(30))
    aligned = delayed_model.new_dataset([segment])
    naive = TransitionDataset(prior, [segment])
    assert aligned.num_transitions == 27
    assert float(aligned.tensors()["targets"].abs().max()) < 1e-5
    assert float(naive.tensors()["targets"].abs().max()) > 1e-3
    assert torch.equal(aligned.tensors()["labels"][:2], torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="actions 0 ticks old, the model expects 2"):
        delayed_model.encode_all(naive)
    assert not aligned.add_segment(Segment(states[0][None].repeat(3, 1), actions[:2]))


def test_select_keeps_chosen_segments_without_recomputing(model, windy):
    picked = windy.select([4, 1])
    assert picked.segment_lengths == [windy.segment_lengths[4], windy.segment_lengths[1]]
    offsets = [sum(windy.segment_lengths[:i]) for i in range(windy.num_segments)]
    first = picked.tensors()["targets"][: windy.segment_lengths[4]]
    assert torch.equal(first, windy.tensors()["targets"][offsets[4] : offsets[5]])
    with pytest.raises(IndexError, match="segment 9 out of range"):
        windy.select([9])


def test_sensitivity_penalty_measures_velocity_slopes_in_units_of_the_prior_gains():
    inputs = torch.randn(5, 4, 16)
    mass_kg, dt_s = 0.8, 0.02

    def slopes(k_vel: float, k_thrust: float, k_rate: float):
        def correction(x: torch.Tensor) -> torch.Tensor:
            out = torch.zeros(*x.shape[:-1], 12)
            out[..., 6:9] = k_vel * x[..., 0:3] + k_thrust * x[..., 12:13] + k_rate * x[..., 9:12]
            return out

        return float(velocity_sensitivity_penalty(correction, inputs, mass_kg, dt_s))

    # vertical damping of -0.8 per tick on every axis: 3 * 0.64
    assert slopes(-0.8, 0.0, 0.0) == pytest.approx(3 * 0.64)
    # a thrust effect of 10 % of the prior's (dt / m per N) on each axis costs 3 * 0.01
    assert slopes(0.0, 0.1 * dt_s / mass_kg, 0.0) == pytest.approx(3 * 0.01)
    assert slopes(0.0, 0.0, 0.5) == 0.0  # body rates are free (rate-loop lag)


def test_sensitivity_penalty_equals_the_full_jacobian_of_a_nonlinear_correction():
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Tanh(), torch.nn.Linear(24, 12))
    inputs = torch.randn(6, 2, 16)
    mass_kg, dt_s = 0.8, 0.02
    got = velocity_sensitivity_penalty(net, inputs, mass_kg, dt_s)
    scale = torch.zeros(16)
    scale[0:3], scale[3:9], scale[12] = 1.0, 1.0 / (9.81 * dt_s), mass_kg / dt_s
    want = torch.stack(
        [
            (torch.autograd.functional.jacobian(lambda x: net(x)[6:9], x) * scale).square().sum()
            for x in inputs.reshape(-1, 16)
        ]
    ).mean()
    assert got.item() == pytest.approx(want.item(), rel=1e-3)
    # differentiable in the network's weights (it is a training loss)
    got.backward()
    assert net[0].weight.grad is not None and net[0].weight.grad.abs().sum() > 0


def test_sensitivity_term_is_part_of_the_fit_loss(model, windy):
    starts = windy.window_starts(model.context_len, 3)[:16]
    batch = windy.gather(starts, model.context_len, 3)
    on = vnd_losses(model, batch, FitConfig(horizon=3, lambda_sens=10.0), mmd_weight=0.0)
    off = vnd_losses(model, batch, FitConfig(horizon=3, lambda_sens=0.0), mmd_weight=0.0)
    assert float(on["sens"]) > 0 and float(off["sens"]) == 0
    added = float((on["total"] - off["total"]).detach())
    assert added == pytest.approx(10.0 * float(on["sens"]), rel=1e-4)
