"""Flight runtime of the VND stack, the logic the ROS nodes wrap: pose filtering, the
policy controller with its safety filter and model-based fallback, bundle loading and
live swaps, the learner's store, the PX4 / MAVROS bridge logic and run-time statistics.

Nothing here imports a middleware; nodes feed it plain numpy arrays and nanosecond
stamps. It builds on vnd_core and is imported by the node packages and vnd_tools.
"""

# No re-exports: tools import single modules (e.g. msgfields) without paying for torch.
