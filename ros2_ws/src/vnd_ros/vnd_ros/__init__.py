"""Middleware seam of the VND flight stack: rclpy and ROS 2 wire-compatible Cyclone DDS
backends, messages, QoS, parameters, launch and bags.
"""
