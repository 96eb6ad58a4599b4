"""A LogStore table's health as an operator watches it (the Airflow view's data), from metadata only.

:func:`table_health` reads a table through a :class:`TableProbe` (:class:`LiveProbe` for a real one)
at a bounded cost and returns the sections :mod:`airflow_logstore.health.view` describes, as JSON.
"""

from __future__ import annotations

from airflow_logstore.health.gather import catalog_health, describe_error, table_health
from airflow_logstore.health.probe import LiveProbe, TableProbe, catalog_probes

__all__ = ["LiveProbe", "TableProbe", "catalog_health", "catalog_probes", "describe_error", "table_health"]
