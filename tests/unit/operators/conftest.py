"""Fixtures shared by the operator tests of this folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import embedded_catalog
from airflow_logstore.table.tables import LogStoreTable, create_table


@pytest.fixture
def handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LogStoreTable:
    """A real key table ``db.orders`` in a SQLite catalog under ``tmp_path`` (no log), which
    ``LogStoreHook.table`` returns, and a local Spark connection."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    catalog = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    table = LogStoreTable.open("db.orders", catalog)
    create_table(table, "id int, amount long", primary_key=["id"])
    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: LogStoreTable.open(name, catalog))
    return table
