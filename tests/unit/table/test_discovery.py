"""Finding the LogStore tables of a catalog (scheduled reconciliation and compaction, the UI view)."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import CatalogSpec, embedded_catalog
from airflow_logstore.table.discovery import logstore_tables


@pytest.fixture
def catalog(tmp_path: Path) -> CatalogSpec:
    spec = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    loaded = spec.load()
    loaded.create_namespace("ns")
    schema = pa.schema([pa.field("id", pa.int64())])
    for name, enabled in (("orders", "true"), ("plain", "false"), ("broken", "true"), ("bad", "maybe")):
        properties = {"log-store.enabled": enabled, "log-store.topic": f"ns.{name}.log"}
        properties["log-store.address"] = "127.0.0.1:9092"
        loaded.create_table(f"ns.{name}", schema, properties=properties)
    return spec


def test_log_enabled_tables_are_found_and_invalid_ones_skipped(catalog: CatalogSpec) -> None:
    assert logstore_tables(catalog) == ["ns.broken", "ns.orders"]
    assert logstore_tables(catalog, log_enabled_only=False) == ["ns.broken", "ns.orders", "ns.plain"]


def test_a_table_that_cannot_be_loaded_is_listed_and_named_not_fatal_to_the_others(
    catalog: CatalogSpec, caplog: pytest.LogCaptureFixture
) -> None:
    """One table's metadata gone (storage lost it): before, the whole listing failed, and with it the
    view's list of every table and the scheduled reconcile of every table."""
    Path(catalog.load().load_table("ns.broken").metadata_location.removeprefix("file://")).unlink()
    with caplog.at_level(logging.WARNING, logger="airflow_logstore.table.discovery"):
        assert logstore_tables(catalog) == ["ns.broken", "ns.orders"]
    assert "table ns.broken cannot be loaded (FileNotFoundError" in caplog.text


def _loads_fail(monkeypatch: pytest.MonkeyPatch, error: Exception, table: str | None = None) -> None:
    """The catalog's loads of ``table`` (``ns.name``; None: of every table) raise ``error``."""
    from pyiceberg.catalog.sql import SqlCatalog

    load = SqlCatalog.load_table

    def failing(self: SqlCatalog, identifier: object) -> object:
        if table is None or identifier == tuple(table.split(".")):
            raise error
        return load(self, identifier)  # type: ignore[arg-type]

    monkeypatch.setattr(SqlCatalog, "load_table", failing)


def test_a_table_dropped_while_the_catalog_is_listed_is_skipped(
    catalog: CatalogSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.exceptions import NoSuchTableError

    _loads_fail(monkeypatch, NoSuchTableError("Table does not exist: ns.orders"), "ns.orders")
    assert logstore_tables(catalog) == ["ns.broken"]


def test_a_table_this_user_may_not_read_is_skipped(
    catalog: CatalogSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another team's table in a shared catalog: not listed (its every task would fail)."""
    error = PermissionError(13, "Permission denied", "s3://other-team/ns/broken/metadata")
    _loads_fail(monkeypatch, error, "ns.broken")
    assert logstore_tables(catalog) == ["ns.orders"]


def test_when_no_table_can_be_loaded_the_catalogs_error_is_raised(
    catalog: CatalogSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every load fails (the storage is gone): the catalog is the problem, not each table."""
    _loads_fail(monkeypatch, OSError("the warehouse's storage does not answer"))
    with pytest.raises(OSError, match="storage does not answer"):
        logstore_tables(catalog)
