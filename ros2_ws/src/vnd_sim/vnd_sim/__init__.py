"""Simulated vehicle node: true plant, motion-capture emulation and scenario player."""
