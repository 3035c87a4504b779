"""Bounded replay of control ticks, with an eviction rule that keeps rare conditions.

Storage: every accepted tick, sorted by stamp, unique stamps (a re-delivered tick is ignored).

Eviction rule (runs when the buffer holds more than ``capacity_ticks``; it evicts down to
``(1 - slack) * capacity_ticks`` so it runs rarely):

1. The stored ticks are cut into runs (gaps and mode changes, see :mod:`segmenter`) and each run
   into chunks of ``chunk_ticks`` consecutive ticks (a shorter tail joins the chunk before it).
2. Runs too short to hold one context window plus one target (``min_run_ticks``) go first,
   oldest first: they feed no window to the fit.
3. Every remaining chunk gets a descriptor of its condition (the learner passes the active
   encoder's latent of the chunk's last context window, or, before any model exists, the
   standardised mean prior error of the chunk). k-means (seeded, k-means++ start) partitions the
   chunks into ``clusters`` groups. Then, repeatedly, the oldest chunk of the cluster holding the
   most ticks is evicted, until the target size is reached.

So each condition keeps about an equal share of the capacity: a condition flown for a few
seconds survives hours of a common one, instead of being the first to go as under FIFO. Within a
condition the newest data stays, since it reflects the latest policy.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vnd_core.learner.records import TickRecords
from vnd_core.learner.segmenter import split_runs

# descriptor(records, chunks) -> (M, d) float array, one row per chunk (slices into records)
Descriptor = Callable[[TickRecords, list[slice]], np.ndarray]


@dataclass
class EvictionReport:
    """What one eviction pass removed."""

    evicted_ticks: int  # ticks removed in total
    short_run_ticks: int  # of which from runs too short for a context window
    clusters: int  # k used by k-means (0 when no clustering was needed)
    cluster_ticks_before: list[int]  # ticks per cluster before eviction
    cluster_ticks_after: list[int]  # ticks per cluster after eviction


class ReplayBuffer:
    """Stamp-ordered, deduplicated tick storage with cluster-balanced eviction."""

    def __init__(
        self,
        capacity_ticks: int,
        period_s: float,
        gap_factor: float = 1.5,
        chunk_ticks: int = 50,
        clusters: int = 6,
        slack: float = 0.05,
        seed: int = 0,
    ) -> None:
        if capacity_ticks < 2 * chunk_ticks or chunk_ticks < 1 or clusters < 1:
            raise ValueError(
                f"need capacity_ticks >= 2 * chunk_ticks, chunk_ticks >= 1 and clusters >= 1, "
                f"got {capacity_ticks}, {chunk_ticks}, {clusters}"
            )
        self.capacity_ticks = capacity_ticks
        self.period_s = period_s
        self.gap_factor = gap_factor
        self.chunk_ticks = chunk_ticks
        self.clusters = clusters
        self.slack = slack
        self.seed = seed
        self._records = TickRecords.empty()

    @property
    def records(self) -> TickRecords:
        """Every stored tick, sorted by stamp (do not modify the arrays)."""
        return self._records

    def __len__(self) -> int:
        return len(self._records)

    @property
    def over_capacity(self) -> bool:
        """True when an eviction pass is due."""
        return len(self._records) > self.capacity_ticks

    def add(self, records: TickRecords) -> int:
        """Store the ticks of ``records`` whose stamps are not stored yet (nor repeated within
        the batch: the first copy wins); returns how many were stored. Never evicts."""
        if len(records) == 0:
            return 0
        _, first = np.unique(records.stamp_ns, return_index=True)
        fresh = first[~np.isin(records.stamp_ns[first], self._records.stamp_ns)]
        if len(fresh) == 0:
            return 0
        new = records.take(fresh)
        # concat keeps condition labels only if both sides have them (see TickRecords.concat)
        merged = TickRecords.concat([self._records, new]) if len(self._records) else new
        self._records = merged.take(np.argsort(merged.stamp_ns, kind="stable"))
        return len(fresh)

    def chunks(self, min_run_ticks: int) -> tuple[list[slice], list[slice]]:
        """``(chunks, short_runs)``: chunks of the runs with at least ``min_run_ticks`` ticks
        and the runs shorter than that, as slices into :attr:`records`."""
        records = self._records
        runs = split_runs(records.stamp_ns, records.mode, self.period_s, self.gap_factor)
        chunks, short = [], []
        for run in runs:
            length = run.stop - run.start
            if length < min_run_ticks:
                short.append(run)
                continue
            starts = list(range(run.start, run.stop, self.chunk_ticks))
            if len(starts) > 1 and run.stop - starts[-1] < self.chunk_ticks:
                starts.pop()  # the short tail joins the chunk before it
            bounds = [*starts, run.stop]
            chunks += [slice(a, b) for a, b in itertools.pairwise(bounds)]
        return chunks, short

    def evict(self, descriptor: Descriptor, min_run_ticks: int) -> EvictionReport:
        """Apply the module's eviction rule; a no-op when not over capacity."""
        if not self.over_capacity:
            return EvictionReport(0, 0, 0, [], [])
        target = int(self.capacity_ticks * (1.0 - self.slack))
        excess = len(self._records) - target
        chunks, short = self.chunks(min_run_ticks)
        drop = np.zeros(len(self._records), dtype=bool)
        short_ticks = 0
        for run in short:  # already in stamp order: oldest first
            if excess <= 0:
                break
            drop[run] = True
            excess -= run.stop - run.start
            short_ticks += run.stop - run.start
        k, before, after = 0, [], []
        if excess > 0 and chunks:
            features = np.asarray(descriptor(self._records, chunks), dtype=np.float64)
            k = min(self.clusters, len(chunks))
            assignment = kmeans(features, k, self.seed)
            sizes = np.array([c.stop - c.start for c in chunks])
            load = np.bincount(assignment, weights=sizes, minlength=k)
            before = [int(x) for x in load]
            queues = [list(np.flatnonzero(assignment == j)) for j in range(k)]  # oldest first
            while excess > 0:
                fullest = int(np.argmax(load))
                if not queues[fullest]:
                    break
                chunk = chunks[queues[fullest].pop(0)]
                drop[chunk] = True
                excess -= chunk.stop - chunk.start
                load[fullest] -= chunk.stop - chunk.start
            after = [int(x) for x in load]
        evicted = int(drop.sum())
        self._records = self._records.take(~drop)
        return EvictionReport(evicted, short_ticks, k, before, after)


def kmeans(points: np.ndarray, k: int, seed: int, iterations: int = 25) -> np.ndarray:
    """Cluster index (M,) of ``points`` (M, d) by Lloyd's k-means with a k-means++ start.

    Deterministic for a seed. Features are standardised per dimension first, so no single
    descriptor component dominates by its units.
    """
    m = len(points)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    k = max(1, min(k, m))
    std = points.std(axis=0)
    x = (points - points.mean(axis=0)) / np.where(std > 1e-12, std, 1.0)
    rng = np.random.default_rng(seed)
    centres = [x[rng.integers(m)]]
    for _ in range(1, k):
        dist = np.min([np.sum((x - c) ** 2, axis=1) for c in centres], axis=0)
        total = dist.sum()
        index = rng.choice(m, p=dist / total) if total > 0 else rng.integers(m)
        centres.append(x[index])
    centre = np.stack(centres)
    assignment = np.zeros(m, dtype=np.int64)
    for iteration in range(iterations):
        dist = ((x[:, None, :] - centre[None]) ** 2).sum(-1)
        new = dist.argmin(axis=1)
        if iteration > 0 and np.array_equal(new, assignment):
            break
        assignment = new
        for j in range(k):
            members = x[assignment == j]
            if len(members):
                centre[j] = members.mean(axis=0)
    return assignment
