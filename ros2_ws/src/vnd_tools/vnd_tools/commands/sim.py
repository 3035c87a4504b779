"""``vnd sim``: one closed-loop episode of the true plant, in-process and in simulated time."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from vnd_core.bundle import BundleError, load_bundle, shipped_bundle_path
from vnd_core.config_io import ConfigError
from vnd_core.episode import EpisodeResult, run_episode
from vnd_core.scenario import load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd sim``."""
    parser.add_argument("--bundle", type=Path, default=None, help="bundle (default: shipped base)")
    parser.add_argument("--scenario", required=True, help="scenario name or YAML path")
    parser.add_argument("--duration", type=float, default=None, help="seconds (default: scenario)")
    parser.add_argument("--json", type=Path, required=True, help="write metrics JSON here")
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG plot here")
    parser.add_argument("--seed", type=int, default=0, help="seed of the plant's noise")


def plot_episode(result: EpisodeResult, title: str, path: Path) -> None:
    """Trajectory in x-y with the reference, and position error over time (first env)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_xy, ax_err) = plt.subplots(1, 2, figsize=(11, 4.5))
    ax_xy.plot(result.reference_m[:, 0, 0], result.reference_m[:, 0, 1], "k--", label="reference")
    ax_xy.plot(result.position_m[:, 0, 0], result.position_m[:, 0, 1], label="vehicle")
    # a hover reference is a single point: mark it so it stays visible
    ax_xy.plot(*result.reference_m[0, 0, :2], "k+", markersize=14, label="reference at t = 0")
    ax_xy.set(xlabel="x [m]", ylabel="y [m]", title="trajectory (top view)")
    ax_xy.axis("equal")
    ax_xy.legend()
    ax_err.plot(result.time_s, result.error_m[:, 0] * 100.0)
    ax_err.set(xlabel="time [s]", ylabel="position error [cm]", title="tracking error")
    ax_err.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Fly the episode, write JSON (and the plot); returns the exit code."""
    torch.set_num_threads(1)
    bundle_path = args.bundle or shipped_bundle_path()
    try:
        bundle = load_bundle(bundle_path)
        scenario = load_scenario(args.scenario)
    except (BundleError, ConfigError) as err:
        print(f"vnd sim: {err}")
        return 2
    result = run_episode(bundle.policy, scenario, args.duration, batch_size=1, seed=args.seed)
    metrics = result.metrics
    report = {
        "scenario": scenario.name,
        "bundle": str(bundle_path),
        "bundle_version": bundle.version,
        "duration_s": float(result.time_s[-1]) if len(result.time_s) else 0.0,
        "seed": args.seed,
        "rmse_m": metrics["rmse_m"],
        "max_error_m": metrics["max_error_m"],
        "crashed": metrics["crashed"],
        "per_second_error_m": metrics["per_second_error_m"],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot is not None:
        title = (
            f"{scenario.name}: RMSE {metrics['rmse_m']:.3f} m, max {metrics['max_error_m']:.3f} m"
        )
        plot_episode(result, title, args.plot)
    print(
        f"{scenario.name}: rmse {metrics['rmse_m']:.4f} m, max {metrics['max_error_m']:.4f} m, "
        f"crashed {metrics['crashed']}"
    )
    return 0
