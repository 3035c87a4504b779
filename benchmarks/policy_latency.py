"""Batch-1 policy inference latency, as one control tick runs it.

Times :meth:`PolicyRunner.act` (reference look-ahead, observation build, network forward under
``torch.inference_mode``, one thread) with the shipped base bundle on a figure-eight reference.
Prints one JSON object as the last line: {"p50_us": ..., "p99_us": ...}.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.policy import PolicyRunner
from vnd_core.reference import ReferenceSpec
from vnd_core.state import hover_state


def main() -> None:
    """Measure and print the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=None, help="bundle file (default: shipped base)")
    parser.add_argument("--ticks", type=int, default=5000, help="timed inferences")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bundle = load_bundle(args.bundle or shipped_bundle_path())
    runner = PolicyRunner(bundle.policy, ReferenceSpec(kind="figure8"))
    rng = np.random.default_rng(0)
    base = hover_state(()).double().numpy()
    states = base + 0.01 * rng.standard_normal((args.ticks, base.shape[0]))
    for i in range(200):  # warm-up
        runner.act(states[i], 0.02 * i)
    durations = np.empty(args.ticks)
    for i in range(args.ticks):
        start = time.perf_counter()
        runner.act(states[i], 0.02 * i)
        durations[i] = time.perf_counter() - start
    us = durations * 1e6
    result = {
        "p50_us": round(float(np.percentile(us, 50)), 1),
        "p99_us": round(float(np.percentile(us, 99)), 1),
        "max_us": round(float(us.max()), 1),
        "ticks": args.ticks,
        "threads": 1,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
