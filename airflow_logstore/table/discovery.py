"""Find the LogStore tables of a catalog (for scheduled reconciliation and compaction)."""

from __future__ import annotations

import logging

from airflow_logstore.core.properties import parse_table_properties
from airflow_logstore.exceptions import TablePropertyError, first_line
from airflow_logstore.table.catalog import CatalogSpec

log = logging.getLogger(__name__)


def logstore_tables(catalog: CatalogSpec, *, log_enabled_only: bool = True) -> list[str]:
    """``namespace.table`` of every table with LogStore settings (invalid ones are logged, skipped).

    A table dropped between the listing and its load is skipped, and so is one this user may not read
    (another team's, in a shared catalog). A table whose metadata cannot be read for another reason is
    logged and kept: whether it is a LogStore table is unknown, and its own task (a reconcile, a
    compaction, a line of the view) names the error, instead of one table failing the whole list. When
    no table at all can be loaded, the catalog itself is the problem: its first error is raised."""
    from pyiceberg.exceptions import NoSuchTableError

    loaded = catalog.load()
    found, unreadable, loaded_any = [], [], False
    first_error: Exception | None = None
    for namespace in loaded.list_namespaces():
        for identifier in loaded.list_tables(namespace):
            name = ".".join(identifier)
            try:
                properties = loaded.load_table(identifier).properties
            except NoSuchTableError:
                log.info("table %s was dropped while the catalog was listed, skipped", name)
                continue
            except Exception as exc:
                first_error = first_error or exc
                if _forbidden(exc):
                    log.warning("table %s may not be read here (%s), skipped", name, first_line(exc))
                    continue
                log.warning(
                    "table %s cannot be loaded (%s: %s); listed, so that its own task names the error",
                    name,
                    type(exc).__name__,
                    first_line(exc),
                )
                unreadable.append(name)
                continue
            loaded_any = True
            try:
                config = parse_table_properties(properties)
            except TablePropertyError as exc:
                log.warning("table %s has invalid LogStore properties, skipped: %s", name, exc)
                continue
            if config.enabled or not log_enabled_only:
                found.append(name)
    if first_error is not None and not loaded_any:
        raise first_error
    return sorted(found + unreadable)


def _forbidden(exc: Exception) -> bool:
    """The catalog or the storage refused this user (not a broken table)."""
    from pyiceberg.exceptions import AuthorizationExpiredError, ForbiddenError, OAuthError

    return isinstance(exc, (PermissionError, ForbiddenError, AuthorizationExpiredError, OAuthError))
