"""Subcommands of ``vnd`` that talk to a running graph or to bags."""
