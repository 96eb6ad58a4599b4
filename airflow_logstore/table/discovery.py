"""Find the LogStore tables of a catalog (for scheduled reconciliation and compaction)."""

from __future__ import annotations

import logging

from airflow_logstore.core.properties import parse_table_properties
from airflow_logstore.exceptions import TablePropertyError
from airflow_logstore.table.catalog import CatalogSpec

log = logging.getLogger(__name__)


def logstore_tables(catalog: CatalogSpec, *, log_enabled_only: bool = True) -> list[str]:
    """``namespace.table`` of every table with LogStore settings (invalid ones are logged, skipped)."""
    loaded = catalog.load()
    found = []
    for namespace in loaded.list_namespaces():
        for identifier in loaded.list_tables(namespace):
            name = ".".join(identifier)
            try:
                config = parse_table_properties(loaded.load_table(identifier).properties)
            except TablePropertyError as exc:
                log.warning("table %s has invalid LogStore properties, skipped: %s", name, exc)
                continue
            if config.enabled or not log_enabled_only:
                found.append(name)
    return sorted(found)
