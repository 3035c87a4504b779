"""Tools of the VND stack: the ``vnd`` command (one module per subcommand under
``vnd_tools.commands``), the flight and preflight report writers and the host
diagnostics (stall probe, CPU steal sampling) that ``vnd fly`` runs when asked.

It may import every other package; no package imports it.
"""
