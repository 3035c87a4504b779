"""Settings of the continual learner: :class:`LearnerConfig` and its presets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.learner.improvement import ImprovementConfig
from vnd_core.learner.validation import (
    ValidationConfig,
)
from vnd_core.trainer import TrainerConfig
from vnd_core.vnd.components import DEFAULT_COMPONENTS, check_components
from vnd_core.vnd.fit import FitConfig
from vnd_core.vnd.model import VNDModelConfig


@dataclass(frozen=True)
class LearnerConfig:
    """Settings of the continual learner; ``quick()``, ``standard()`` and ``full()`` are the
    presets."""

    control_period_s: float = CONTROL_PERIOD_S  # nominal period of the tick stream
    gap_factor: float = 1.5  # a stamp step above this many periods breaks a segment (1 to 2)
    velocity_half_window: int = 4  # learn from position-slope velocities over +-this many ticks
    capacity_ticks: int = 30_000  # replay capacity (10 min at 50 Hz)
    chunk_ticks: int = 50  # eviction granularity (1 s)
    eviction_clusters: int = 6  # k of the k-means partition the eviction balances
    eviction_slack: float = 0.05  # an eviction pass frees this fraction of the capacity
    min_new_ticks: int = 500  # new ticks needed before an update (10 s)
    min_interval_s: float = 10.0  # time needed between two updates
    min_windows: int = 64  # fit windows needed before the first update
    # new ticks whose window the active model does not explain (novelty.py) needed before an
    # update, unless the flight the prior does not explain has doubled; 0: any new data will do
    min_unexplained_ticks: int = 0
    # unexplained new ticks (counted as for min_unexplained_ticks) that preempt a running
    # update (see ContinualLearner.update); None: min_unexplained_ticks
    preempt_unexplained_ticks: int | None = None
    # share of each fit batch drawn from the windows the active model does not explain (a new
    # condition gets a fair share of a short fit however little of the replay it is yet)
    focus_fraction: float = 0.3
    # fit steps of an update whose data hold nothing new to the active model (no run of
    # unexplained windows): refining known conditions needs fewer than separating a new one
    # in the latent; None: always fit.steps
    refine_fit_steps: int | None = None
    model: VNDModelConfig = field(default_factory=VNDModelConfig)  # architecture of a new model
    fit: FitConfig = field(default_factory=FitConfig)  # model fit per update
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # policy training per update
    anchor_fraction: float = 0.2  # training episodes flown on the prior with z = 0
    pool_fraction: float = 0.8  # other episodes whose z is a re-encoded replay latent
    residual_components: str = DEFAULT_COMPONENTS  # residual parts the policy trains against
    validation: ValidationConfig = field(default_factory=ValidationConfig)  # candidate gates
    # policy training between model updates (improvement.py)
    improvement: ImprovementConfig = field(default_factory=ImprovementConfig)
    seed: int = 0  # seeds fit, training and eviction (each update offsets it by its version)

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        if not 1.0 < self.gap_factor < 2.0:
            # below 2 a single missing (e.g. non-POLICY, not stored) tick always breaks a run
            raise ValueError(f"gap_factor must be within (1, 2), got {self.gap_factor}")
        if not self.control_period_s > 0:
            raise ValueError(f"control_period_s must be > 0, got {self.control_period_s}")
        for name in ("min_new_ticks", "min_windows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.velocity_half_window < 0:
            raise ValueError(f"velocity_half_window must be >= 0, got {self.velocity_half_window}")
        if self.min_unexplained_ticks < 0:
            n = self.min_unexplained_ticks
            raise ValueError(f"min_unexplained_ticks must be >= 0, got {n}")
        if not 0.0 <= self.focus_fraction <= 1.0:
            raise ValueError(f"focus_fraction must be within [0, 1], got {self.focus_fraction}")
        if self.preempt_unexplained_ticks is not None and self.preempt_unexplained_ticks < 1:
            n = self.preempt_unexplained_ticks
            raise ValueError(f"preempt_unexplained_ticks must be >= 1 or None, got {n}")
        if self.refine_fit_steps is not None and self.refine_fit_steps < 1:
            raise ValueError(f"refine_fit_steps must be >= 1 or None, got {self.refine_fit_steps}")
        if self.min_interval_s < 0 or not 0 <= self.eviction_slack < 0.5:
            raise ValueError("min_interval_s must be >= 0 and eviction_slack within [0, 0.5)")
        self.model.validate()
        check_components(self.residual_components)
        self.fit.validate()
        self.trainer.validate()
        self.improvement.validate()

    @classmethod
    def quick(cls, **overrides: Any) -> LearnerConfig:
        """One update cycle in a few seconds of one core on about a minute of flight."""
        base = {
            "capacity_ticks": 6_000,
            "min_new_ticks": 250,
            "min_interval_s": 5.0,
            "fit": FitConfig.quick(seed=0),
            "trainer": TrainerConfig(
                num_envs=64,
                horizon_ticks=16,
                episode_ticks=150,
                iterations=10,
                learning_rate=1e-3,
            ),
            "validation": ValidationConfig(eval_rollouts=32, eval_ticks=50, hover_ticks=100),
        }
        return cls(**{**base, **overrides})

    @classmethod
    def standard(cls, **overrides: Any) -> LearnerConfig:
        """The flight default (``make demo``, the launch files): an update in 20-30 s of an
        idle core (35-67 s beside the 2-core demo stack). An update waits for 5 s of flight the
        active model does not explain, or for twice the flight the prior does not explain:
        on data it explains it has nothing to learn, could only lose calm tracking, and would
        hold the core for its whole cycle when a new condition begins."""
        base = {
            "capacity_ticks": 15_000,
            "min_new_ticks": 400,
            "min_interval_s": 8.0,
            "min_unexplained_ticks": 250,
            # 5 s of a new wind preempted the update running when it began, and the next update,
            # learning wind B from those 5-6 s, left it merged with calm flight in the latent
            # (0.06-0.08 m after it landed, against about 0.045 m when learned from 17 s)
            "preempt_unexplained_ticks": 500,
            # 200 steps learned a first wind but left a second one merged with calm flight in
            # the latent; 400 with the focus on unexplained windows learn it from 10 s of data.
            # Re-learning a known wind from more data needs no more than 200, and the shorter
            # cycle lands it about 12 s sooner beside the stack.
            "fit": FitConfig(steps=400, batch_size=64),
            "refine_fit_steps": 200,
            # Twice the rollouts in half the iterations: the same candidates (one update on 10 s
            # of a new wind: wind B 0.044 m against 0.029 m, wind A and calm as good) in about
            # 5 s less of the cycle, since a step's cost is mostly per-op overhead.
            "trainer": TrainerConfig(
                num_envs=256,
                horizon_ticks=32,
                iterations=30,
                learning_rate=3e-4,  # 1e-3 lost twice as much calm tracking for the same gain
                compile=True,  # built before flight by ContinualLearner.warm_up (warmup.py)
            ),
            "validation": ValidationConfig(eval_rollouts=64, eval_ticks=100, hover_ticks=150),
            "improvement": ImprovementConfig(enabled=True),
        }
        return cls(**{**base, **overrides})

    @classmethod
    def full(cls, **overrides: Any) -> LearnerConfig:
        """The longest budget (offline ``vnd learn``, or a vehicle computer with cores to
        spare): longer fits and policy training, wider validation."""
        base = {
            "fit": FitConfig(steps=400, batch_size=128),
            "trainer": TrainerConfig(
                num_envs=256,
                horizon_ticks=32,
                iterations=100,
                learning_rate=1e-3,
                compile=True,
            ),
            "validation": ValidationConfig(eval_rollouts=128, eval_ticks=150),
            "improvement": ImprovementConfig(enabled=True),
        }
        return cls(**{**base, **overrides})
