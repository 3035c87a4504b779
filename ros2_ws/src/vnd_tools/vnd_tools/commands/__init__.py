"""Subcommands of ``vnd`` that need no middleware."""
