"""Find the LogStore tables of a catalog (for scheduled reconciliation and compaction)."""

from __future__ import annotations

import logging

from airflow_logstore.core.properties import parse_table_properties
from airflow_logstore.exceptions import TablePropertyError, first_line
from airflow_logstore.table.catalog import CatalogSpec

log = logging.getLogger(__name__)


def logstore_tables(catalog: CatalogSpec, *, log_enabled_only: bool = True) -> list[str]:
    """``namespace.table`` of every table with LogStore settings (invalid ones are logged, skipped).

    A table dropped between the listing and its load is skipped. A table whose metadata cannot be read
    is logged and kept: whether it is a LogStore table is unknown, and its own task (a reconcile, a
    compaction, a line of the view) names the error instead of one table failing the whole list."""
    from pyiceberg.exceptions import NoSuchTableError

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
            except NoSuchTableError:
                log.info("table %s was dropped while the catalog was listed, skipped", name)
                continue
            except Exception as exc:
                log.warning(
                    "table %s cannot be loaded (%s: %s); listed, so that its own task names the error",
                    name,
                    type(exc).__name__,
                    first_line(exc),
                )
                found.append(name)
                continue
            if config.enabled or not log_enabled_only:
                found.append(name)
    return sorted(found)
