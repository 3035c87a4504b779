"""Importing flight logs flown by other controllers into replay bags the learner reads.

The pipeline is the same for every format: a format module (:mod:`.csvlog`) turns a file into
time-stamped streams in the stack's frames (:class:`~.streams.FlightStreams`), :mod:`.checks`
counts and removes what cannot be learned from (each with a stated rule), :mod:`.writer`
resamples the clean streams onto the control period, splits them into segments and writes a
rosbag2 bag of ``vnd_msgs/msg/Transition`` messages with the file as its ``source``.
"""
