"""``vnd import``: flight logs of other controllers -> replay bags that ``vnd learn`` reads.

Each SOURCE becomes one bag folder ``<out>/<file stem>/`` of ``vnd_msgs/msg/Transition``
messages (ticks on the control period, segments split at gaps), its import report printed and
written beside it as ``<out>/<file stem>.import.json``. Formats: CSV (``.csv``, the schema of
:mod:`vnd_core.logimport.csvlog`, ``--mapping`` for other layouts).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from vnd_core.logimport.csvlog import CsvLogError, load_mapping, read_csv_log
from vnd_core.logimport.writer import ImportConfig, LogImportError, resample, write_replay_bag
from vnd_core.vehicle import load_vehicle

EXIT_SOME_FAILED = 1  # at least one source could not be imported (the others were)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd import``."""
    parser.add_argument("sources", nargs="+", type=Path, metavar="SOURCE", help="flight logs")
    parser.add_argument("--vehicle", required=True, help="vehicle name or vehicle YAML file")
    parser.add_argument("--out", required=True, type=Path, help="directory for the bags")
    parser.add_argument("--mapping", type=Path, default=None, help="CSV column mapping (YAML)")
    parser.add_argument(
        "--min-segment-s", type=float, default=1.0, help="shortest segment kept [s]"
    )


def run(args: argparse.Namespace) -> int:
    """Import every source; returns the exit code (2: bad options, 1: a source failed)."""
    try:
        vehicle = load_vehicle(args.vehicle)
        mapping = load_mapping(args.mapping) if args.mapping is not None else None
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
            if source.suffix.lower() != ".csv":
                raise LogImportError(f"{source}: unknown log format (this version reads .csv)")
            streams = read_csv_log(source, vehicle, mapping)
            records, report = resample(streams, vehicle, config)
            write_replay_bag(args.out / source.stem, records, report)
        except (CsvLogError, LogImportError) as err:
            print(f"vnd import: {err}")
            failed += 1
            continue
        elapsed_s = time.perf_counter() - started
        print(report.describe())
        print(f"  import speed: {report.ticks / max(elapsed_s, 1e-9):.0f} ticks/s")
    return EXIT_SOME_FAILED if failed else 0
