#!/usr/bin/env python3
"""Record the bag that the CI bag-replay test (ros2_ws/src/vnd_policy/test/test_bag_replay.py)
replays: a short simulated flight of the full stack, learner off.

    .venv/bin/python scripts/record_replay_fixture.py [--bundle PATH] [--duration 12]

Flies a figure-eight (calm, then wind from +x half-way so the latents move) through ``vnd fly``'s
machinery and stores, under ros2_ws/src/vnd_policy/test/data/:

- ``replay_fixture/``: the MCAP bag of odom, vnd/command, vnd/latent and vnd/replay;
- ``replay_bundle.safetensors``: the bundle it flew (default: the shipped base bundle), so the
  test does not depend on the shipped bundle staying the same;
- ``replay_fixture.json``: namespace, bundle sha256, scenario, message counts.

Run it again whenever the encoder, the policy or their parameter files change what the nodes
compute; the test then compares against the new behaviour. Fails when the bag exceeds 2 MB.
The shipped base bundle has no VND model (its latents are empty), so for a test that checks
latents give ``--bundle`` a learner bundle, e.g. ``runs/<stamp>/learner/bundles/v0002.safetensors``
of a ``vnd fly`` run (the committed fixture was recorded that way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "ros2_ws" / "src" / "vnd_policy" / "test" / "data"
NAMESPACE = "replayfix"  # vehicle namespace of the recording
TOPICS = ("odom", "vnd/command", "vnd/latent", "vnd/replay")
MAX_BAG_BYTES = 2 * 1024 * 1024
SCENARIO = """name: replay_fixture
description: figure-eight, calm then wind from +x (bag-replay test fixture)
duration_s: {duration}
reference: {{kind: figure8, center_m: [0.0, 0.0, 1.2], amplitude_m: 1.2, period_s: 6.0}}
phases:
  - {{name: calm, start_s: 0.0}}
  - {{name: wind_a, start_s: {wind}}}
events:
  - {{at_s: {wind}, type: wind, kind: constant, velocity_mps: [4.0, 0.0, 0.0]}}
"""


def main() -> int:
    """Fly, then copy the bag, the bundle and the description into the test data folder."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="bundle to fly (default: shipped base)")
    parser.add_argument("--duration", type=float, default=12.0, help="flight seconds")
    parser.add_argument("--launch-file", type=Path, help="sim launch file (default: ours)")
    args = parser.parse_args()
    os.environ.setdefault("CYCLONEDDS_URI", f"file://{REPO / 'config/cyclonedds_loopback.xml'}")
    os.environ.setdefault("VND_MIDDLEWARE", "dds")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from vnd_core.bundle import shipped_bundle_path
    from vnd_tools import flight_bag
    from vnd_tools.commands import fly

    bundle = (args.bundle or shipped_bundle_path()).resolve()
    with tempfile.TemporaryDirectory(prefix="vnd_replay_fixture_") as tmp:
        scenario = Path(tmp) / "replay_fixture.yaml"
        scenario.write_text(SCENARIO.format(duration=args.duration, wind=args.duration / 2))
        options = fly.FlightOptions(
            scenario=str(scenario),
            out=Path(tmp) / "run",
            learn=False,
            vehicle=NAMESPACE,
            bundle=str(bundle),
            topics=TOPICS,
            measure_latency=False,
        )
        if args.launch_file:
            options.launch_file = args.launch_file
        outcome = fly.fly(options)
        if outcome.reason != "done":
            print(f"flight ended with '{outcome.reason}': fixture not written", file=sys.stderr)
            return 1
        meta = json.loads((options.out / flight_bag.META_FILE).read_text())
        bag = options.out / "bag"
        size = sum(path.stat().st_size for path in bag.iterdir())
        if size > MAX_BAG_BYTES:
            print(f"bag is {size} bytes > {MAX_BAG_BYTES}: shorten --duration", file=sys.stderr)
            return 1
        target = DATA_DIR / "replay_fixture"
        if target.exists():
            shutil.rmtree(target)
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copytree(bag, target)
        shutil.copyfile(bundle, DATA_DIR / "replay_bundle.safetensors")
    description = {
        "namespace": NAMESPACE,
        "bundle_file": "replay_bundle.safetensors",
        "bundle_sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
        "bundle_source": bundle.name,
        "scenario": SCENARIO.format(duration=args.duration, wind=args.duration / 2),
        "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages": meta["messages_recorded"],
        "bag_bytes": size,
    }
    (DATA_DIR / "replay_fixture.json").write_text(json.dumps(description, indent=2) + "\n")
    print(f"wrote {target} ({size / 1024:.0f} KiB) and {DATA_DIR / 'replay_fixture.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
