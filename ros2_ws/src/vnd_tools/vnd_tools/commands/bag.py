"""``vnd bag record|info|play``: rosbag2 (MCAP) bags without a ROS install.

    vnd bag record -o DIR TOPIC... [--all] [--duration S] [--storage mcap|sqlite3]
    vnd bag info DIR
    vnd bag reindex DIR
    vnd bag play DIR [--rate R] [--topics T ...] [--loop] [--wait-for-subscribers S]

record and play stop cleanly on SIGINT or SIGTERM (the bag is closed and stays readable). A
recorder killed harder (SIGKILL, power loss) leaves an MCAP file without footer and no
metadata.yaml, holding every message up to its last flush (at most 1 s old): ``reindex``
closes the file and writes metadata.yaml from the records, and ``info`` does it first when a
bag needs it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vnd_ros.bag import STORAGES, BagRecorder
from vnd_ros.bag_play import play
from vnd_ros.bag_read import BagError, bag_info, bag_needs_recovery, format_info, recover
from vnd_ros.launch.resolve import default_environment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-subcommands record, info and play."""
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    record = sub.add_parser("record", help="record topics into a new bag")
    record.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to record")
    record.add_argument("-o", "--output", type=Path, required=True, help="bag folder to create")
    record.add_argument("-a", "--all", action="store_true", help="record every topic")
    record.add_argument(
        "--duration", type=float, default=0.0, metavar="S", help="stop after S seconds"
    )
    record.add_argument("--storage", choices=sorted(STORAGES), default="mcap")
    info = sub.add_parser("info", help="duration, message counts and types of a bag")
    info.add_argument("bag", type=Path, help="bag folder (or .mcap/.db3 file)")
    reindex = sub.add_parser(
        "reindex", help="rebuild metadata.yaml (and close a torn MCAP) of a killed recording"
    )
    reindex.add_argument("bag", type=Path, help="bag folder")
    player = sub.add_parser("play", help="publish a bag with its original timing")
    player.add_argument("bag", type=Path, help="bag folder (or .mcap/.db3 file)")
    player.add_argument("-r", "--rate", type=float, default=1.0, help="speed factor (default 1)")
    player.add_argument("--topics", nargs="+", metavar="TOPIC", help="play only these topics")
    player.add_argument("-l", "--loop", action="store_true", help="repeat until stopped")
    player.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for every topic to have a subscriber before playing",
    )


def run(args: argparse.Namespace) -> int:
    """Dispatch to the verb; BagError becomes a one-line message and exit code 1."""
    verbs: dict[str, Callable[[argparse.Namespace], int]] = {
        "record": _record,
        "info": _info,
        "reindex": _reindex,
        "play": _play,
    }
    try:
        return verbs[args.verb](args)
    except BagError as err:
        print(f"vnd bag {args.verb}: error: {err}", file=sys.stderr)
        return 1


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM while the block runs (handlers restored after)."""
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda signum, frame: stop.set())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _use_loopback_default() -> None:
    """The project's loopback Cyclone config unless CYCLONEDDS_URI is already chosen."""
    os.environ.update(default_environment(os.environ))


def _record(args: argparse.Namespace) -> int:
    if not args.topics and not args.all:
        raise BagError("give topics to record or --all")
    _use_loopback_default()
    recorder = BagRecorder(args.output, args.topics, all_topics=args.all, storage=args.storage)
    with _stop_on_signals() as stop:
        recorder.start()
        print(f"[INFO] [vnd_bag]: recording into {args.output} (Ctrl-C to stop)", file=sys.stderr)
        deadline = time.monotonic() + args.duration if args.duration > 0 else None
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.1)
        counts = recorder.stop()
    for topic, reason in sorted(recorder.skipped_topics.items()):
        print(f"[WARN] [vnd_bag]: {topic} not recorded: {reason}", file=sys.stderr)
    for topic, count in sorted(counts.items()):
        print(f"{topic}: {count} messages")
    wanted = {topic if topic.startswith("/") else "/" + topic for topic in args.topics}
    missing = sorted(wanted - set(counts)) if not args.all else []
    for topic in missing:
        print(f"[WARN] [vnd_bag]: no writer of {topic} was seen: not recorded", file=sys.stderr)
    return 0


def _info(args: argparse.Namespace) -> int:
    if bag_needs_recovery(args.bag):
        print(
            f"[WARN] [vnd_bag]: {args.bag} was not closed (recorder killed?): recovering it",
            file=sys.stderr,
        )
        print(recover(args.bag).describe(), file=sys.stderr)
    print(format_info(bag_info(args.bag)))
    return 0


def _reindex(args: argparse.Namespace) -> int:
    print(recover(args.bag).describe())
    return 0


def _play(args: argparse.Namespace) -> int:
    _use_loopback_default()
    with _stop_on_signals() as stop:
        try:
            count = play(
                args.bag,
                rate=args.rate,
                topics=args.topics,
                loop=args.loop,
                wait_for_subscribers_s=args.wait_for_subscribers,
                stop=stop,
            )
        except KeyboardInterrupt:  # the node runtime turns SIGINT into KeyboardInterrupt
            print("playback interrupted", file=sys.stderr)
            return 0
    print(f"published {count} messages")
    return 0
