"""CSV flight logs: one row per odometry sample, with the command in effect on the same row.

The column schema (header names; every row one instant):

======================  =====  ======================================================
column                  unit   meaning
======================  =====  ======================================================
``t_s``                 s      time of the row (any epoch; stamps keep it)
``px_m py_m pz_m``      m      position, world frame
``qw qx qy qz``         1      attitude, body to world (scalar first)
``vx_mps vy_mps vz_mps`` m/s   velocity, world frame
``wx_radps wy_radps wz_radps`` rad/s  measured body rates, body frame
``thrust_n``            N      commanded collective thrust (along body up, positive)
``rate_x_radps rate_y_radps rate_z_radps`` rad/s  commanded body rates (optional)
``armed``               0/1    vehicle armed (optional; also true/false)
``mode``                label  flight mode, a number or a name (optional)
======================  =====  ======================================================

Frames are world ENU / body FLU unless the mapping says ``frame: ned_frd``. Without the rate
columns the measured body rates stand in for the command (and the report says so).

With ``armed`` and/or ``mode`` only flight is kept: rows while disarmed are dropped (counted as
``not_flying``) and a change of mode splits the segment (``phase_change``). An empty cell holds
the value of the row above (logs often write a state only when it changes); rows before the
first value count as not flying. Without either column every row counts as flight.

A mapping file (YAML) reads other layouts::

    frame: ned_frd                 # enu_flu (default) or ned_frd
    thrust: normalised             # newtons (default) or normalised (0..1 of full thrust)
    columns: {t_s: time, px_m: x}  # schema column -> the file's column
    scale: {t_s: 1.0e-6}           # schema column -> factor applied to the file's values

Normalised thrust becomes newtons through the vehicle's thrust curve (:mod:`.thrust_curve`:
``thrust_max_n`` and ``thrust_model_factor``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from vnd_core.units import NS_PER_S
from vnd_core.vehicle import VehicleParams

from vnd_tools.logimport.frames import FRAMES, command_to_flu, state_to_enu_flu
from vnd_tools.logimport.streams import FlightStreams
from vnd_tools.logimport.thrust_curve import ThrustCurve

STATE_COLUMNS = (
    *("px_m", "py_m", "pz_m", "qw", "qx", "qy", "qz", "vx_mps", "vy_mps", "vz_mps"),
    *("wx_radps", "wy_radps", "wz_radps"),
)
RATE_COLUMNS = ("rate_x_radps", "rate_y_radps", "rate_z_radps")
SCHEMA = ("t_s", *STATE_COLUMNS, "thrust_n", *RATE_COLUMNS)
PHASE_COLUMNS = ("armed", "mode")  # optional columns of the flight phase
THRUST_UNITS = ("newtons", "normalised")
_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


class CsvLogError(ValueError):
    """A CSV log or its mapping cannot be read; the message names the file and the reason."""


@dataclass(frozen=True)
class CsvMapping:
    """How a CSV file's columns map onto the schema (see the module docstring)."""

    frame: str = "enu_flu"  # frames of the file: enu_flu or ned_frd
    thrust: str = "newtons"  # unit of the thrust column: newtons or normalised
    columns: dict[str, str] = field(default_factory=dict)  # schema column -> file column
    scale: dict[str, float] = field(default_factory=dict)  # schema column -> factor

    def column(self, name: str) -> str:
        """The file's column holding schema column ``name``."""
        return self.columns.get(name, name)


def load_mapping(path: str | Path) -> CsvMapping:
    """Read and check a mapping file; CsvLogError naming the file and the bad entry."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise CsvLogError(f"{path}: cannot read mapping: {err}") from err
    if not isinstance(raw, dict):
        raise CsvLogError(f"{path}: a mapping file is a YAML mapping")
    unknown = set(raw) - {"frame", "thrust", "columns", "scale"}
    if unknown:
        raise CsvLogError(f"{path}: unknown keys {sorted(unknown)} (known: frame, thrust, ...)")
    mapping = CsvMapping(
        frame=str(raw.get("frame", "enu_flu")),
        thrust=str(raw.get("thrust", "newtons")),
        columns={str(k): str(v) for k, v in (raw.get("columns") or {}).items()},
        scale={str(k): float(v) for k, v in (raw.get("scale") or {}).items()},
    )
    if mapping.frame not in FRAMES:
        raise CsvLogError(f"{path}: frame {mapping.frame!r} is not one of {', '.join(FRAMES)}")
    if mapping.thrust not in THRUST_UNITS:
        raise CsvLogError(f"{path}: thrust {mapping.thrust!r} is not one of {THRUST_UNITS}")
    for section, known in ((mapping.columns, (*SCHEMA, *PHASE_COLUMNS)), (mapping.scale, SCHEMA)):
        bad = sorted(set(section) - set(known))
        if bad:
            raise CsvLogError(f"{path}: {bad} are not schema columns (schema: {known})")
    return mapping


def read_csv_log(
    path: str | Path, vehicle: VehicleParams, mapping: CsvMapping | None = None
) -> FlightStreams:
    """The streams of CSV log ``path``; CsvLogError naming the file, line and column of what
    cannot be read. Empty cells read as NaN (the checks count and drop them)."""
    path = Path(path)
    mapping = mapping or CsvMapping()
    try:
        with path.open(newline="") as stream:
            reader = csv.reader(stream)
            header = [name.strip() for name in next(reader, [])]
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise CsvLogError(f"{path}: cannot read CSV: {err}") from err
    if not header:
        raise CsvLogError(f"{path}: empty file (no header line)")
    where = {name: i for i, name in enumerate(header)}
    needed = ("t_s", *STATE_COLUMNS, "thrust_n")
    missing = [mapping.column(n) for n in needed if mapping.column(n) not in where]
    if missing:
        raise CsvLogError(f"{path}: missing columns {missing}; the header has {header}")
    has_rates = all(mapping.column(n) in where for n in RATE_COLUMNS)
    names = [n for n in SCHEMA if n not in RATE_COLUMNS or has_rates]
    values = np.full((len(rows), len(names)), np.nan)
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise CsvLogError(
                f"{path}:{line}: {len(row)} fields, the header has {len(header)} (truncated?)"
            )
        for j, name in enumerate(names):
            cell = row[where[mapping.column(name)]].strip()
            if not cell:
                continue
            try:
                values[line - 2, j] = float(cell) * mapping.scale.get(name, 1.0)
            except ValueError:
                raise CsvLogError(
                    f"{path}:{line}: column {mapping.column(name)!r}: {cell!r} is not a number"
                ) from None
    table = dict(zip(names, values.T, strict=True))
    time_s = table["t_s"]
    if not np.isfinite(time_s).all():
        raise CsvLogError(f"{path}: rows {np.flatnonzero(~np.isfinite(time_s)) + 2} lack a time")
    stamp_ns = np.round(time_s * NS_PER_S).astype(np.int64)
    state = np.stack([table[n] for n in STATE_COLUMNS], axis=1)
    thrust_n = table["thrust_n"]
    curve = ThrustCurve.of(vehicle) if mapping.thrust == "normalised" else None
    if curve is not None:
        thrust_n = curve.thrust_n(thrust_n)
    phase, notes = _flight_phase(path, header, rows, mapping)
    substitutions = []
    if phase is None:
        substitutions.append("flight phase: every row counts as flight (no armed or mode column)")
    if has_rates:
        rates = np.stack([table[n] for n in RATE_COLUMNS], axis=1)
    else:
        rates = state[:, 10:13]
        substitutions.append("commanded body rates: the measured body rates of the same row")
    command = np.concatenate([thrust_n[:, None], rates], axis=1)
    return FlightStreams(
        source=str(path),
        state_stamp_ns=stamp_ns,
        state=state_to_enu_flu(state, mapping.frame),
        command_stamp_ns=stamp_ns.copy(),
        command=command_to_flu(command, mapping.frame),
        substitutions=substitutions,
        phase=phase,
        thrust_curve=curve,
        notes=notes,
    )


def write_csv_log(
    path: str | Path,
    stamp_ns: np.ndarray,
    state: np.ndarray,
    command: np.ndarray,
    mapping: CsvMapping | None = None,
    extra: dict[str, list[str]] | None = None,
) -> Path:
    """Write rows in the schema (or a mapping's column names, no unit or frame conversion):
    ``stamp_ns`` (N,), ``state`` (N, 13), ``command`` (N, 4), then the ``extra`` columns (name
    -> N cells, e.g. ``armed`` and ``mode``) as given. For tests and examples."""
    mapping = mapping or CsvMapping()
    extra = extra or {}
    path = Path(path)
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow([*(mapping.column(n) for n in SCHEMA), *extra])
        for i, (t, s, c) in enumerate(zip(stamp_ns, state, command, strict=True)):
            writer.writerow(
                [
                    repr(int(t) / NS_PER_S),
                    *map(repr, s.tolist()),
                    *map(repr, c.tolist()),
                    *(cells[i] for cells in extra.values()),
                ]
            )
    return path


def _held_cells(cells: list[str]) -> list[str | None]:
    """``cells`` with each empty one holding the value above it (None before the first)."""
    held: list[str | None] = []
    last: str | None = None
    for cell in cells:
        last = cell.strip() or last
        held.append(last)
    return held


def _flight_phase(
    path: Path, header: list[str], rows: list[list[str]], mapping: CsvMapping
) -> tuple[np.ndarray | None, list[str]]:
    """The flight phase of each row from the optional ``armed`` / ``mode`` columns (the mode's
    code while armed, -1 otherwise) and a note of what was read; None without either."""
    where = {name: i for i, name in enumerate(header)}
    present = [name for name in PHASE_COLUMNS if mapping.column(name) in where]
    if not present:
        return None, []
    phase = np.zeros(len(rows), dtype=np.int64)
    notes = []
    if "armed" in present:
        column = mapping.column("armed")
        cells = _held_cells([row[where[column]] for row in rows])
        for line, cell in enumerate(cells, start=2):
            if cell is not None and cell.lower() not in (*_TRUE, *_FALSE):
                raise CsvLogError(f"{path}:{line}: column {column!r}: {cell!r} is not 0/1")
        flying = np.array([cell is not None and cell.lower() in _TRUE for cell in cells])
        phase[~flying] = -1
        notes.append(f"flight phase: disarmed rows dropped (column {column!r})")
    if "mode" in present:
        column = mapping.column("mode")
        modes = _held_cells([row[where[column]] for row in rows])
        codes: dict[str, int] = {}
        for i, mode in enumerate(modes):
            if mode is None:
                phase[i] = -1
            elif phase[i] >= 0:
                phase[i] = codes.setdefault(mode, len(codes))
        seen = ", ".join(codes) or "none while armed"
        notes.append(f"flight phase: segments split at mode changes (column {column!r}: {seen})")
    return phase, notes
