"""The ``logstore`` command line: a thin shell over the library.

- ``app``: the parser, ``main`` and how a failure becomes a message.
- ``commands``: one module per command (``table``, ``write``, ``read``, ``publish``, ``reconcile``,
  ``compact``, ``services``, ``airflow``, ``demo``).
- ``demo``: the main job end to end on the embedded default (``./dev demo``).
"""

from airflow_logstore.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
