"""ROS-free flight logic that the control nodes wrap: pose filtering, the encoder context,
the safety filter with its model-based fallback, live model swaps and run-time statistics.

Nothing here imports a middleware; nodes feed it plain numpy arrays and nanosecond stamps.
"""

# No re-exports: the command-line tools import single modules (e.g. msgfields) without
# paying for torch; import from the submodules directly.
