"""``vnd import``: flight logs of other controllers -> replay bags that ``vnd learn`` reads.

Each SOURCE becomes one bag folder ``<out>/<file stem>/`` of ``vnd_msgs/msg/Transition``
messages (ticks on the control period, segments split at gaps), its import report printed and
written beside it as ``<out>/<file stem>.import.json``. Formats: CSV (``.csv``, the schema of
:mod:`vnd_tools.logimport.csvlog`, ``--mapping`` for other layouts) and rosbag2 (a bag folder,
MCAP or sqlite3, :mod:`vnd_tools.logimport.rosbag2log`, ``--odom`` / ``--command`` to choose
topics) and PX4 ULog (``.ulg``, :mod:`vnd_tools.logimport.ulog`, ``--ulog-instance`` to choose
the instance of a topic logged in several).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from vnd_core.vehicle import VehicleParams, load_vehicle

from vnd_tools.logimport.csvlog import CsvLogError, CsvMapping, load_mapping, read_csv_log
from vnd_tools.logimport.rosbag2log import VELOCITY_FRAMES, Rosbag2LogError, read_rosbag2_log
from vnd_tools.logimport.streams import FlightStreams
from vnd_tools.logimport.ulog import UlogError, parse_instances, read_ulog
from vnd_tools.logimport.writer import ImportConfig, LogImportError, resample, write_replay_bag

EXIT_SOME_FAILED = 1  # at least one source could not be imported (the others were)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd import``."""
    parser.add_argument("sources", nargs="+", type=Path, metavar="SOURCE", help="flight logs")
    parser.add_argument("--vehicle", required=True, help="vehicle name or vehicle YAML file")
    parser.add_argument("--out", required=True, type=Path, help="directory for the bags")
    parser.add_argument("--mapping", type=Path, default=None, help="CSV column mapping (YAML)")
    parser.add_argument("--odom", default=None, help="rosbag2: odometry or pose topic")
    parser.add_argument("--command", default=None, help="rosbag2: command topic")
    parser.add_argument(
        "--status", default=None, help="rosbag2: status topic (mavros State, px4 VehicleStatus)"
    )
    parser.add_argument(
        "--odom-velocity-frame",
        choices=VELOCITY_FRAMES,
        default="world",
        help="rosbag2 Odometry: frame of twist.linear (the stack's: world; nav_msgs': body)",
    )
    parser.add_argument(
        "--ulog-instance",
        action="append",
        default=[],
        metavar="TOPIC=N",
        help="ULog: read instance N (multi_id) of TOPIC (default: 0 unless it is short)",
    )
    parser.add_argument(
        "--min-segment-s", type=float, default=1.0, help="shortest segment kept [s]"
    )


def run(args: argparse.Namespace) -> int:
    """Import every source; returns the exit code (2: bad options, 1: a source failed)."""
    try:
        vehicle = load_vehicle(args.vehicle)
        mapping = load_mapping(args.mapping) if args.mapping is not None else None
        args.ulog_instances = parse_instances(args.ulog_instance)
    except (OSError, ValueError) as err:
        print(f"vnd import: {err}")
        return 2
    base = ImportConfig()
    config = ImportConfig(min_segment_ticks=max(2, round(args.min_segment_s / base.period_s)))
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for source in args.sources:
        started = time.perf_counter()
        try:
            streams = read_log(source, vehicle, args, mapping)
            records, report = resample(streams, vehicle, config)
            name = source.parent.name if source.suffix in (".mcap", ".db3") else source.stem
            write_replay_bag(args.out / name, records, report)
        except (CsvLogError, Rosbag2LogError, UlogError, LogImportError) as err:
            print(f"vnd import: {err}")
            failed += 1
            continue
        elapsed_s = time.perf_counter() - started
        print(report.describe())
        print(f"  import speed: {report.ticks / max(elapsed_s, 1e-9):.0f} ticks/s")
    return EXIT_SOME_FAILED if failed else 0


def read_log(
    source: Path, vehicle: VehicleParams, args: argparse.Namespace, mapping: CsvMapping | None
) -> FlightStreams:
    """The streams of ``source``, its format told by its name: a .csv or .ulg file, or a
    rosbag2 bag (its folder, or a .mcap / .db3 file in it)."""
    if source.suffix.lower() == ".csv":
        return read_csv_log(source, vehicle, mapping)
    if source.suffix.lower() == ".ulg":
        return read_ulog(source, vehicle, args.ulog_instances)
    bag = source.parent if source.suffix in (".mcap", ".db3") else source
    if (bag / "metadata.yaml").is_file():
        return read_rosbag2_log(
            bag, vehicle, args.odom, args.command, args.odom_velocity_frame, args.status
        )
    raise LogImportError(
        f"{source}: unknown log format (a .csv or .ulg file, or a rosbag2 bag folder with "
        "metadata.yaml)"
    )
