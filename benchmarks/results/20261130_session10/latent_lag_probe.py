"""Fly a learned bundle in simulated time from 20 s of wind B into 20 s of wind A, with the
encoder, then with z switched by hand from wind B's mean latent to wind A's a fixed lag after
the onset; print the error peak and the recovery of the wind-A phase (session 10 experiment).

    python latent_lag_probe.py BUNDLE [SEEDS] [enc]

The onset is 2 s into the 6-s figure-eight, as at 170 s in the demo. ``enc`` flies the encoder
runs only. The means are taken from the last encoder run's latents (wind B 10-19.8 s, wind A
25-39 s).
"""

import dataclasses
import json
import sys

import numpy as np
import torch
from vnd_core import recovery as rc
from vnd_core.bundle import load_bundle
from vnd_core.evaluation import continual_loop as cl
from vnd_core.scenario import Phase, load_scenario

ONSET_S, END_S, PERIOD_S = 20.0, 40.0, 6.0


def b_then_a():
    """recurring_wind's wind B, then its wind A, 20 s each."""
    base = load_scenario("recurring_wind")
    wind = {e.at_s: e for e in base.events}
    return dataclasses.replace(
        base,
        name="b_then_a",
        duration_s=END_S,
        phases=(Phase("wind_b", 0.0), Phase("wind_a", ONSET_S)),
        events=(
            dataclasses.replace(wind[90.0], at_s=0.0),
            dataclasses.replace(wind[170.0], at_s=ONSET_S),
        ),
    )


def fly(bundle, scenario, seed: int, z_of_t=None):
    """One simulated flight; ``z_of_t(t_s)`` replaces the encoder's latent when given."""
    original = cl._Flight.act
    if z_of_t is not None:

        def act(self, measured, t_s, stamp_ns, plant):
            return self.runner.act(measured, t_s, z_of_t(t_s)), True

        cl._Flight.act = act
    try:
        return cl.run_method(cl.Method("probe", bundle, cl.LATENT_ENCODER), scenario, seed)
    finally:
        cl._Flight.act = original


def summary(result) -> dict:
    """Error peak in the first 1.5 s of wind A, its time, recovery and steady error."""
    t, e = result.time_s, result.error_m
    phase = (t >= ONSET_S) & (t < END_S)
    recovery = rc.recovery(t[phase], e[phase], ONSET_S, END_S, PERIOD_S)
    early = (t >= ONSET_S) & (t < ONSET_S + 1.5)
    return {
        "peak_m": round(float(e[early].max()), 3),
        "t_peak_s": round(float(t[early][e[early].argmax()] - ONSET_S), 2),
        "recovery_s": round(recovery.recovery_s, 2),
        "steady_m": round(recovery.steady_m, 4),
    }


def latents_of(result, model) -> tuple[np.ndarray, np.ndarray]:
    """Scenario times (T,) and the encoder's latents (T, nz) of a flight (NaN while invalid)."""
    estimator = cl.LatentEstimator()
    estimator.set_model(model)
    records, rows = result.records, []
    for i, stamp in enumerate(records.stamp_ns):
        estimator.add_odometry(int(stamp), records.state[i])
        estimator.add_command(int(stamp), records.action[i])
        z = estimator.latent()
        rows.append(z if z is not None else np.full(model.latent_dim, np.nan, np.float32))
    return result.time_s - 0.02, np.array(rows)


def main() -> None:
    torch.set_num_threads(1)
    bundle = load_bundle(sys.argv[1])
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    lags = () if len(sys.argv) > 3 else (0.0, 0.1, 0.2, 0.3, 0.4)
    scenario = b_then_a()
    out = {}
    for seed in range(seeds):
        result = fly(bundle, scenario, seed)
        out[f"encoder_s{seed}"] = summary(result)
    t, z = latents_of(result, bundle.model)
    z_b = np.nanmean(z[(t > 10) & (t < ONSET_S - 0.2)], 0).astype(np.float32)
    z_a = np.nanmean(z[(t > ONSET_S + 5) & (t < END_S - 1)], 0).astype(np.float32)
    way = (z - z_b) @ (z_a - z_b) / ((z_a - z_b) @ (z_a - z_b))
    out["encoder_proj"] = {
        f"{k:.1f}": round(float(way[np.argmin(abs(t - ONSET_S - k))]), 2)
        for k in np.arange(0, 0.61, 0.1)
    }
    for lag in lags:
        for seed in range(seeds):
            switched = fly(
                bundle, scenario, seed, lambda t_s, lag=lag: z_a if t_s >= ONSET_S + lag else z_b
            )
            out[f"switch_{lag:.1f}s_s{seed}"] = summary(switched)
    print(json.dumps(out, indent=0))


if __name__ == "__main__":
    main()
