"""Bridge nodes from vnd CtbrCommand to autopilots: PX4 over uXRCE-DDS and MAVROS."""
