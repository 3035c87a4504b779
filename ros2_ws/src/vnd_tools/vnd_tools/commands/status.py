"""``vnd status``: one table of the flight stack of a vehicle: modes, versions, rates, latency.

    vnd status [--vehicle NS] [--watch] [--spin-time S]

Reads ``vnd/node_status`` (every node's latest report; transient local, so it arrives at once)
and ``vnd/learner/status``. ``--watch`` reprints the table every second until Ctrl-C.

A node that stops reporting keeps its row, marked ``STALE 4.2 s`` (time since its last report)
once that exceeds :data:`STALE_AFTER_S`. A killed node's latched report dies with its process,
so a fresh ``vnd status`` could not see it at all: every run remembers the last report of each
node in a small JSON file (``--state-dir``), and a remembered node that is silent now is listed
as stale with the age of its last report (forgotten after :data:`FORGET_AFTER_S`). The exit
code is 1 when no node reported within the spin time or when a row is stale.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from vnd_core.units import NS_PER_S
from vnd_core.wire import MODE_NAMES
from vnd_ros.client import StackClient
from vnd_ros.launch.resolve import default_environment
from vnd_ros.stack_records import LearnerHealth, NodeHealth, StackSnapshot

WATCH_PERIOD_S = 1.0  # table refresh period of --watch (the nodes report at 1 Hz)
STATUS_PERIOD_S = 1.0  # vnd/node_status and vnd/learner/status period of every node
# Three missed reports: one late report is jitter under load, three in a row is a node gone.
STALE_AFTER_S = 3.0 * STATUS_PERIOD_S
FORGET_AFTER_S = 3600.0  # remembered nodes silent this long leave the table (an older stack)
HEADER = (
    f"{'node':<18} {'mode':<8} {'version':<12} {'rate Hz':>8} {'p50 ms':>7} {'p99 ms':>7} "
    f"{'ticks':>8} {'missed':>6}  counters"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vnd status``."""
    parser.add_argument("--vehicle", default="vnd1", help="vehicle namespace (default vnd1)")
    parser.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    parser.add_argument(
        "--spin-time",
        type=float,
        default=1.5,
        metavar="S",
        help="time to collect reports before printing (default 1.5 s)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        metavar="DIR",
        help="where the last report of every node is remembered (default $VND_STATE_DIR, "
        "else ~/.cache/vnd)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the table once, or repeatedly with --watch."""
    os.environ.update(default_environment(os.environ))  # loopback unless configured
    memory = StatusMemory(memory_path(args.state_dir, args.vehicle))
    try:
        with StackClient(args.vehicle) as client:
            snapshot = client.watch_status()
            client.spin_for(args.spin_time)
            if not snapshot.nodes and snapshot.learner is None:
                print(f"no status from vehicle '{args.vehicle}' within {args.spin_time} s")
            view = memory.update(snapshot, time.time_ns())
            if not view.nodes and view.learner is None and not args.watch:
                return 1
            print(format_table(view, time.time_ns()), flush=True)
            while args.watch:
                client.spin_for(WATCH_PERIOD_S)
                view = memory.update(snapshot, time.time_ns())
                print(f"\n{time.strftime('%H:%M:%S')}\n" + format_table(view, time.time_ns()))
                sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    return 1 if view.stale_rows(time.time_ns()) else 0


def default_state_dir() -> Path:
    """``$VND_STATE_DIR``, else ``$XDG_CACHE_HOME/vnd``, else ``~/.cache/vnd``."""
    if os.environ.get("VND_STATE_DIR"):
        return Path(os.environ["VND_STATE_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "vnd"


def memory_path(state_dir: Path, vehicle: str) -> Path:
    """The remembered-status file of ``vehicle`` on this machine's DDS domain."""
    domain = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    return state_dir / f"status_domain{domain}_{vehicle.strip('/').replace('/', '_')}.json"


@dataclasses.dataclass
class StatusView:
    """What the table shows: every node's latest report and when it was made."""

    nodes: dict[str, NodeHealth]  # node name -> latest report (live or remembered)
    node_report_ns: dict[str, int]  # node name -> when that report was made [ns, wall clock]
    learner: LearnerHealth | None  # latest learner report, None when never seen
    learner_report_ns: int  # when the learner report was made [ns, wall clock]

    def stale_rows(self, now_ns: int) -> list[str]:
        """Names of the rows (nodes, "learner") whose report is older than STALE_AFTER_S."""
        rows = [n for n, t in self.node_report_ns.items() if _age_s(t, now_ns) > STALE_AFTER_S]
        if self.learner is not None and _age_s(self.learner_report_ns, now_ns) > STALE_AFTER_S:
            rows.append("learner")
        return rows


def report_time_ns(stamp_ns: int, received_ns: int) -> int:
    """When a report was made [ns, wall clock]: its stamp, unless that is in the future or
    implausibly old (another clock, e.g. sim time), then the time it arrived.

    A latched report from a wedged node arrives at once but is old: the stamp tells.
    """
    if received_ns - FORGET_AFTER_S * NS_PER_S <= stamp_ns <= received_ns:
        return stamp_ns
    return received_ns


class StatusMemory:
    """The last report of every node of one vehicle, kept across ``vnd status`` runs in a JSON
    file, so a node killed before this run started still has its (stale) row."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._nodes: dict[str, tuple[NodeHealth, int]] = {}
        self._learner: tuple[LearnerHealth, int] | None = None
        self._load()

    def update(self, snapshot: StackSnapshot, now_ns: int) -> StatusView:
        """Merge the live reports into memory, save it, and return what to show."""
        for name, health in snapshot.nodes.items():
            made_ns = report_time_ns(health.stamp_ns, snapshot.node_received_ns.get(name, now_ns))
            if name not in self._nodes or made_ns >= self._nodes[name][1]:
                self._nodes[name] = (health, made_ns)
        if snapshot.learner is not None:
            made_ns = report_time_ns(
                snapshot.learner.stamp_ns, snapshot.learner_received_ns or now_ns
            )
            if self._learner is None or made_ns >= self._learner[1]:
                self._learner = (snapshot.learner, made_ns)
        forget_ns = now_ns - FORGET_AFTER_S * NS_PER_S
        self._nodes = {name: entry for name, entry in self._nodes.items() if entry[1] > forget_ns}
        if self._learner is not None and self._learner[1] <= forget_ns:
            self._learner = None
        self._save()
        return StatusView(
            nodes={name: entry[0] for name, entry in self._nodes.items()},
            node_report_ns={name: entry[1] for name, entry in self._nodes.items()},
            learner=self._learner[0] if self._learner else None,
            learner_report_ns=self._learner[1] if self._learner else 0,
        )

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            print(f"vnd status: ignoring unreadable {self.path}: {err}", file=sys.stderr)
            return
        try:
            for entry in data.get("nodes", []):
                report = dict(entry["report"])
                report["warnings"] = tuple(report.get("warnings", ()))
                health = NodeHealth(**report)
                self._nodes[health.node] = (health, int(entry["report_ns"]))
            if data.get("learner"):
                entry = data["learner"]
                self._learner = (LearnerHealth(**entry["report"]), int(entry["report_ns"]))
        except (TypeError, KeyError, AttributeError, ValueError) as err:
            # another version of vnd wrote it: start afresh rather than show wrong rows
            print(f"vnd status: ignoring {self.path} (other format: {err})", file=sys.stderr)
            self._nodes, self._learner = {}, None

    def _save(self) -> None:
        data = {
            "nodes": [
                {"report": dataclasses.asdict(health), "report_ns": made_ns}
                for health, made_ns in self._nodes.values()
            ],
            "learner": None
            if self._learner is None
            else {"report": dataclasses.asdict(self._learner[0]), "report_ns": self._learner[1]},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(self.path)  # atomic: a concurrent vnd status reads old or new, never half
        except OSError as err:  # the table still prints; only the memory is lost
            print(f"vnd status: cannot remember status in {self.path}: {err}", file=sys.stderr)


def _age_s(report_ns: int, now_ns: int) -> float:
    return max(now_ns - report_ns, 0) / NS_PER_S


def stale_text(report_ns: int, now_ns: int) -> str:
    """``"  STALE 4.2 s"`` when the report is older than STALE_AFTER_S, else ""."""
    age_s = _age_s(report_ns, now_ns)
    return f"  STALE {age_s:.1f} s" if age_s > STALE_AFTER_S else ""


def format_table(snapshot: StatusView, now_ns: int) -> str:
    """The node table and the learner line; stale rows end in ``STALE <age> s``."""
    lines = [HEADER]
    for name in sorted(snapshot.nodes):
        h = snapshot.nodes[name]
        version = f"{h.active_version}" + (
            f" (prev {h.previous_version})" if h.previous_version else ""
        )
        version += " pin" if h.pinned else ""
        mode = MODE_NAMES.get(h.mode, str(h.mode)) if "policy" in name.rsplit("/", 1)[-1] else "-"
        stale = stale_text(snapshot.node_report_ns.get(name, h.stamp_ns), now_ns)
        lines.append(
            f"{name:<18} {mode:<8} {version:<12} {h.rate_hz:>8.1f} {h.latency_p50_ms:>7.2f} "
            f"{h.latency_p99_ms:>7.2f} {h.ticks:>8d} {h.missed_ticks:>6d}  "
            f"{format_counters(h.counters)}{stale}"
        )
        lines.extend(f"{'':<18} ! {warning}" for warning in h.warnings)
    learner = snapshot.learner
    if learner is None:
        lines.append("learner: no status")
    else:
        lines.append(
            f"learner: {learner.state_name}, {learner.ticks_stored} ticks stored, latest version "
            f"{learner.latest_version}, updates {learner.updates_accepted} accepted / "
            f"{learner.updates_rejected} rejected, policy improvements "
            f"{learner.improvements_accepted}, last update {learner.last_update_duration_s:.1f} s"
            + (f" ({learner.message})" if learner.message else "")
            + stale_text(snapshot.learner_report_ns or learner.stamp_ns, now_ns)
        )
        refusal = refusal_line(learner)
        if refusal:
            lines.append(refusal)
    return "\n".join(lines)


def refusal_line(learner: LearnerHealth) -> str:
    """The line about flight nodes refusing learner bundles ('' when none ever did)."""
    if learner.latest_refused:
        return f"learner: LATEST BUNDLE REFUSED: {learner.refusal}"
    if learner.bundles_refused:
        return f"learner: {learner.bundles_refused} bundle(s) refused, newest: {learner.refusal}"
    return ""


def format_counters(counters: dict) -> str:
    """Non-zero counters as ``name=value`` (zero counters carry no news)."""
    return " ".join(f"{key}={value}" for key, value in sorted(counters.items()) if value) or "-"
