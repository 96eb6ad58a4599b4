"""The ``logstore`` command line: a thin shell over the library.

- ``app``: the parser, ``main`` and how a failure becomes a message.
- ``commands``: one module per command (``table``, ``write``, ``read``, ``publish``, ``reconcile``,
  ``compact``, ``dags``).

The development setup's commands (``services``, ``airflow``, ``demo``) are the repository's own
``python -m logstore_dev`` (``./dev``), outside the wheel.
"""

from airflow_logstore.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
