"""ROS-free logic of the autopilot bridges: frame conversions, thrust models, command gating,
and the field values of the PX4 (uXRCE-DDS) and MAVROS messages."""
