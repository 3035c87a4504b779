"""Evaluation of adaptation methods (``vnd eval``) and offline replay tools.

- :mod:`suite`: :class:`~vnd_core.evaluation.suite.EvalConfig` (the quick and full presets),
  the methods built from a base bundle and the run over methods, scenarios and seeds.
- :mod:`baselines`: the domain-randomised and oracle policies (a parametric disturbance model
  on top of the prior) and the oracle's true-disturbance input.
- :mod:`continual_loop`: the simulated-time continual loop (asynchronous updates after a
  simulated compute delay, on a flight side the caller gives: ``vnd eval`` flies the stack's
  flight runtime, ``vnd_flight.evaluation_flight``) and the base / vnd methods.
- :mod:`report`: per-run metrics (RMSE, max error, crash, recovery time), aggregation over
  seeds, results.json / results.md and plots.
- :mod:`replay_bag`: rosbag2 (MCAP) reading and writing of vnd_msgs/msg/Transition without a
  middleware.
"""
