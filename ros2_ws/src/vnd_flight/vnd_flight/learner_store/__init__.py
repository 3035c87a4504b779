"""ROS-free storage of the learner node, one module each (import them directly).

- :mod:`vnd_flight.learner_store.replay_store`: the replay store (rosbag2 MCAP segments);
- :mod:`vnd_flight.learner_store.registry`: the bundle registry (files + index.json);
- :mod:`vnd_flight.learner_store.ipc`: pickle-free framing of the worker-process pipe.

Nothing is imported here, so the store and the framing load without torch.
"""
