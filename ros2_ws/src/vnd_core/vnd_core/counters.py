"""Event counts by reason (rejected poses, broken contexts, filter interventions) that the
flight runtime and the encoder's context keep and nodes log at a throttled rate.
"""

from __future__ import annotations

from collections import Counter


class ReasonCounter:
    """Counts events by reason (e.g. rejected poses) and hands out what is new since the last
    :meth:`drain_new`, so a node can log a summary at a throttled rate instead of per event."""

    def __init__(self) -> None:
        self._totals: Counter[str] = Counter()
        self._new: Counter[str] = Counter()

    def count(self, reason: str, n: int = 1) -> None:
        """Record ``n`` more events of ``reason``."""
        self._totals[reason] += n
        self._new[reason] += n

    @property
    def totals(self) -> dict[str, int]:
        """All counts since construction, by reason."""
        return dict(self._totals)

    def total(self, reason: str | None = None) -> int:
        """Count of one reason, or of every reason when ``reason`` is None."""
        return self._totals[reason] if reason is not None else sum(self._totals.values())

    def drain_new(self) -> dict[str, int]:
        """Counts since the previous call (empty when nothing happened), then start afresh."""
        new = dict(self._new)
        self._new.clear()
        return new

    @staticmethod
    def format(counts: dict[str, int]) -> str:
        """``"a=3, b=1"`` with reasons in alphabetical order, for log lines."""
        return ", ".join(f"{reason}={n}" for reason, n in sorted(counts.items()))
