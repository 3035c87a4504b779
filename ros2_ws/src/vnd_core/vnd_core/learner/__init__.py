"""The continual learner, free of middleware.

- :class:`TickRecords`: batches of control-tick records (what vnd/replay carries).
- :class:`ReplayBuffer`: bounded, deduplicated storage with cluster-balanced eviction.
- :func:`split_runs`, :func:`to_segments`: segmentation on gaps and mode changes.
- :func:`train_policy_on_model`: policy training on prior ⊕ D(., ., z), z ~ N(0, I).
- :class:`ContinualLearner`, :class:`LearnerConfig`, :class:`UpdateResult`: the update loop.
- :class:`SimulatedFlight`: closed loop on the true plant that produces tick records.
"""

from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.continual import ContinualLearner, UpdateResult
from vnd_core.learner.policy_update import train_policy_on_model
from vnd_core.learner.records import MODE_POLICY, TickRecords
from vnd_core.learner.replay import EvictionReport, ReplayBuffer, kmeans
from vnd_core.learner.segmenter import split_runs, to_segments
from vnd_core.learner.simflight import FlightChunk, SimulatedFlight
from vnd_core.learner.validation import ValidationConfig

__all__ = [
    "MODE_POLICY",
    "ContinualLearner",
    "EvictionReport",
    "FlightChunk",
    "LearnerConfig",
    "ReplayBuffer",
    "SimulatedFlight",
    "TickRecords",
    "UpdateResult",
    "ValidationConfig",
    "kmeans",
    "split_runs",
    "to_segments",
    "train_policy_on_model",
]
