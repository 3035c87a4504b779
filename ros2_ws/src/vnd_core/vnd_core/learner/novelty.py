"""Flight the active model does not explain: what the update trigger counts.

A context window (C transitions, the states as the encoder reads them in flight) is
*unexplained* when its one-step velocity error, after the active model's residual at the
latent its encoder gives that same window, averaged over the ``UNEXPLAINED_AVERAGE_WINDOWS``
consecutive windows that end with it, is above ``calm_accel_mps2`` (the calm gate's
threshold, as an acceleration): measurement noise averages out, a force the model has not
learned does not. Without a model (a base bundle) the residual is zero and the measure
is the prior's error.

Why the active model and not the prior: a condition learned once must not start an update for
every new tick of it. Counted against the prior, every windy tick is new, so the learner spent
cycle after cycle on a wind it knew while a new one began. The continual learner still learns a
known condition again once its data have doubled (that count judges with the prior: model
None), and an update gives a share of its fit and policy training to the windows this measure
marks (:func:`focus_weights`).

The count is incremental (:class:`UnexplainedCounter`): each call encodes only the windows
that end after the last one it judged, so its cost does not grow with the time since the last
update.
"""

from __future__ import annotations

import numpy as np
import torch

from vnd_core.dynamics import NominalModel
from vnd_core.learner.records import TickRecords
from vnd_core.learner.segmenter import split_runs
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import Segment, TransitionDataset
from vnd_core.vnd.features import INPUT_DIM, RES_VEL
from vnd_core.vnd.model import VNDModel, VNDModelConfig

# Unexplained windows count only in runs this long (1 s): scattered ones are transitions or
# outliers of a condition the model explains, not a new condition.
UNEXPLAINED_RUN_TICKS = 50

# A window's error is averaged with the windows that end in the half second before it (25 windows
# in all, within one run of the replay). One window of 12 transitions, with the pose filter's
# velocities, leaves a calm figure-eight a median error of 0.7 m/s^2, above the calm threshold on
# most windows, so only the run length keeps calm flight out, and a damaged rotor's lost lift (0.8
# m/s^2), above it on 89 % of the windows, rarely stays above it for a whole run; averaged, calm
# flight falls to 0.06-0.24 m/s^2 and the lost lift stays above the threshold throughout.
UNEXPLAINED_AVERAGE_WINDOWS = 25


def window_unexplained_error(
    model: VNDModel | None, context: torch.Tensor, dt_s: float
) -> torch.Tensor:
    """Mean one-step velocity error (B, 3) [m/s^2] of context windows (B, C, 28) after
    ``model``'s residual at the latent of each window (``model`` None: the prior's error)."""
    velocity_error = context[..., INPUT_DIM + RES_VEL.start : INPUT_DIM + RES_VEL.stop]
    if model is not None and len(context):
        with torch.no_grad():
            z = model.encoder(context)  # (B, nz)
            residual = model.residual(context[..., :INPUT_DIM], z[:, None, :])  # (B, C, 12)
        velocity_error = velocity_error - residual[..., RES_VEL]
    return velocity_error.mean(dim=1) / dt_s


def window_unexplained_accel(
    model: VNDModel | None, context: torch.Tensor, dt_s: float
) -> torch.Tensor:
    """Norm (B,) [m/s^2] of :func:`window_unexplained_error`: one window alone."""
    return window_unexplained_error(model, context, dt_s).norm(dim=-1)


def trailing_mean(values: np.ndarray, count: int) -> np.ndarray:
    """Mean (N, K) of each row of ``values`` (N, K) with the ``count`` - 1 rows before it (fewer
    at the start)."""
    sums = np.cumsum(np.concatenate([np.zeros((1, values.shape[1])), values]), axis=0)
    stop = np.arange(1, len(values) + 1)
    start = np.maximum(stop - count, 0)
    return (sums[stop] - sums[start]) / (stop - start)[:, None]


def averaged_unexplained(error_mps2: torch.Tensor, threshold_mps2: float) -> np.ndarray:
    """Unexplained flag (B,) of consecutive windows of one run from their
    :func:`window_unexplained_error` (B, 3): the error averaged over
    ``UNEXPLAINED_AVERAGE_WINDOWS`` windows above ``threshold_mps2``."""
    averaged = trailing_mean(error_mps2.numpy().astype(np.float64), UNEXPLAINED_AVERAGE_WINDOWS)
    return np.linalg.norm(averaged, axis=1) > threshold_mps2


class UnexplainedCounter:
    """Unexplained windows among the ticks stamped after ``since_ns``, judged by one model.

    Call :meth:`update` with the stamp-ordered replay as it grows; a window is identified by
    the stamp of its last state and judged once. When ticks arrive behind the windows judged
    already (a restarted learner's backlog) or leave the replay (eviction), every window is
    judged again.
    """

    def __init__(
        self,
        model: VNDModel | None,
        prior: NominalModel,
        since_ns: int,
        context_len: int,
        action_delay_ticks: int,
        period_s: float,
        gap_factor: float,
        threshold_mps2: float,
    ) -> None:
        self.model = model
        self.prior = prior
        self.since_ns = since_ns
        self.context_len = context_len
        self.delay = action_delay_ticks
        self.period_s = period_s
        self.gap_factor = gap_factor
        self.threshold_mps2 = threshold_mps2
        self._judged_until_ns = since_ns  # windows ending at or before this stamp are judged
        self._flags: list[np.ndarray] = []  # per call: unexplained flag per window, in order
        self._ticks_behind = 0  # ticks stamped in (since_ns, judged_until_ns] when last judged

    @property
    def flags(self) -> np.ndarray:
        """Unexplained flag (W,) of every window judged so far, in stamp order."""
        return np.concatenate(self._flags) if self._flags else np.zeros(0, dtype=bool)

    def update(self, records: TickRecords) -> None:
        """Judge the windows of ``records`` (stamp-ordered) that end after the last judged one."""
        if self._count_behind(records) != self._ticks_behind:  # the judged past changed
            self._flags, self._judged_until_ns = [], self.since_ns
        # A window spans C + d + 1 states and is averaged with the windows before it: start
        # early enough to rebuild the first new ones and those.
        span_ticks = self.context_len + self.delay + 2 + UNEXPLAINED_AVERAGE_WINDOWS
        span_ns = int(span_ticks * self.gap_factor * self.period_s * 1e9)
        low_ns = max(self.since_ns, self._judged_until_ns - span_ns)
        tail = records.take(records.stamp_ns > low_ns)
        ends, flags = [], []
        for run in split_runs(tail.stamp_ns, tail.mode, self.period_s, self.gap_factor):
            end_ns, unexplained = self._judge_run(tail, run)
            new = end_ns > self._judged_until_ns
            ends.append(end_ns[new])
            flags.append(unexplained[new])
        if ends and sum(len(e) for e in ends):
            self._flags.append(np.concatenate(flags))
            self._judged_until_ns = int(np.concatenate(ends).max())
        self._ticks_behind = self._count_behind(records)

    def _count_behind(self, records: TickRecords) -> int:
        """Ticks of ``records`` stamped in (since_ns, judged_until_ns]."""
        stamps = records.stamp_ns
        low, high = np.searchsorted(stamps, [self.since_ns, self._judged_until_ns], "right")
        return int(high - low)

    def _judge_run(self, records: TickRecords, run: slice) -> tuple[np.ndarray, np.ndarray]:
        """(stamp of each window's last state, unexplained flag) of one contiguous run."""
        c, d = self.context_len, self.delay
        if run.stop - run.start < c + d + 1:  # too short for one window
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        dataset = TransitionDataset(
            self.prior, [Segment(records.state[run], records.action[run])], d
        )
        starts = dataset.window_starts(c, 0)
        if len(starts) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        error = window_unexplained_error(
            self.model, dataset.context(starts, c), self.prior.config.dt_s
        )
        unexplained = averaged_unexplained(error, self.threshold_mps2)
        # window g holds transitions g..g+C-1 of the run, i.e. states d+g .. d+g+C
        end_ns = records.stamp_ns[run][starts.numpy() + d + c]
        return end_ns.astype(np.int64), unexplained


def focus_weights(focus: torch.Tensor, fraction: float) -> torch.Tensor:
    """Draw weights (M,) that give the rows marked in ``focus`` (M,) bool a share
    ``fraction`` of all draws and spread the rest uniformly (uniform when none is marked)."""
    m, f = len(focus), int(focus.sum())
    weights = torch.full((m,), 1.0 / m)
    if f == 0:
        return weights
    return weights * (1.0 - fraction) + focus.float() * (fraction / f)


def unexplained_windows(
    model: VNDModel | None, dataset: TransitionDataset, context_len: int, threshold_mps2: float
) -> torch.Tensor:
    """Flag (W,) per context window (``dataset.window_starts(context_len, 0)``, the windows a
    fit re-encodes): ``model`` does not explain it (:func:`averaged_unexplained`, within its
    segment) and it lies in a run of at least ``UNEXPLAINED_RUN_TICKS`` such windows."""
    starts = dataset.window_starts(context_len, 0)
    if len(starts) == 0:
        return torch.zeros(0, dtype=torch.bool)
    dt_s = dataset.prior.config.dt_s
    error = torch.cat(
        [
            window_unexplained_error(model, dataset.context(part, context_len), dt_s)
            for part in starts.split(4096)
        ]
    )
    # a segment's windows start at consecutive transitions; a jump starts the next segment
    breaks = (np.flatnonzero(np.diff(starts.numpy()) != 1) + 1).tolist()
    flags = np.concatenate(
        [averaged_unexplained(part, threshold_mps2) for part in error.tensor_split(breaks)]
    )
    # runs as the trigger counts them: scattered windows (transitions, outliers of a
    # condition the model explains) are no new condition, and focusing on them costs
    # tracking of a condition the model explains
    return torch.from_numpy(long_runs(flags, UNEXPLAINED_RUN_TICKS))


def ticks_in_long_runs(flags: np.ndarray, min_run: int) -> int:
    """Total length of the runs of True in ``flags`` (N,) that are at least ``min_run`` long."""
    return int(long_runs(flags, min_run).sum())


def long_runs(flags: np.ndarray, min_run: int) -> np.ndarray:
    """``flags`` (N,) bool with the runs of True shorter than ``min_run`` cleared."""
    flags = np.asarray(flags, dtype=bool)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    kept = np.zeros(len(flags) + 1, dtype=np.int64)
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        if stop - start >= min_run:
            kept[start] += 1
            kept[stop] -= 1
    return np.cumsum(kept)[:-1] > 0


class NewFlightCounts:
    """Unexplained new ticks per judge (a name: "model", "prior"), counted incrementally.

    A count is judged again at most every ``RECOUNT_TICKS`` stored ticks; a judge with another
    model or another start of the new flight starts a fresh :class:`UnexplainedCounter`.
    """

    RECOUNT_TICKS = 25  # stored ticks between two counts of one judge

    def __init__(
        self, vehicle: VehicleParams, period_s: float, gap_factor: float, threshold_mps2: float
    ) -> None:
        self.vehicle = vehicle
        self.period_s = period_s
        self.gap_factor = gap_factor
        self.threshold_mps2 = threshold_mps2
        # judge -> (ticks stored when counted, count, the counter judging the new ticks)
        self._counts: dict[str, tuple[int, int, UnexplainedCounter]] = {}

    def clear(self) -> None:
        """Forget every count (an update started: the new flight starts again)."""
        self._counts.clear()

    def last(self, judge: str, default: int = 0) -> int:
        """The count ``judge`` gave last (``default`` when it has not counted yet)."""
        entry = self._counts.get(judge)
        return entry[1] if entry is not None else default

    def count(
        self,
        judge: str,
        model: VNDModel | None,
        records: TickRecords,
        since_ns: int,
        model_config: VNDModelConfig,
    ) -> int:
        """Ticks of ``records`` stamped after ``since_ns`` in windows ``model`` (None: the
        prior) does not explain, in runs of at least ``UNEXPLAINED_RUN_TICKS``."""
        entry = self._counts.get(judge)
        counter = entry[2] if entry is not None else None
        fresh = counter is not None and counter.model is model and counter.since_ns == since_ns
        if entry is not None and fresh and abs(len(records) - entry[0]) < self.RECOUNT_TICKS:
            return entry[1]
        if counter is None or not fresh:
            counter = UnexplainedCounter(
                model,
                NominalModel(self.vehicle),
                since_ns,
                model_config.context_len,
                model_config.action_delay_ticks,
                self.period_s,
                self.gap_factor,
                self.threshold_mps2,
            )
        counter.update(records)
        count = ticks_in_long_runs(counter.flags, UNEXPLAINED_RUN_TICKS)
        self._counts[judge] = (len(records), count, counter)
        return count
