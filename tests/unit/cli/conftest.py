"""The state folder the command-line tests run in: no service runs, the broker's port is closed."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.cli.support import State, closed_port


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> State:
    """A state folder with ``t.logged`` (its log on a closed port) and ``t.plain`` (no log)."""
    from airflow_logstore.table.catalog import default_catalog
    from airflow_logstore.table.schema import parse_schema
    from airflow_logstore.table.tables import ICEBERG_DEFAULTS

    home = tmp_path / "home"
    for name in ("LOGSTORE_CATALOG", "LOGSTORE_KAFKA_CONFIG", "LOGSTORE_SPARK_MASTER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOGSTORE_HOME", str(home))
    monkeypatch.setenv("LOGSTORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LOGSTORE_KAFKA_PORT", str(closed_port()))
    monkeypatch.setenv("LOGSTORE_KAFKA_TIMEOUT_S", "1")
    broker = f"127.0.0.1:{closed_port()}"
    catalog = default_catalog().load()
    catalog.create_namespace("t")
    schema = parse_schema("id int, name string", ["id"])
    log = {"log-store.enabled": "true", "log-store.topic": "logged", "log-store.address": broker}
    catalog.create_table("t.logged", schema, properties={**ICEBERG_DEFAULTS, **log})
    catalog.create_table("t.plain", schema, properties=dict(ICEBERG_DEFAULTS))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": 1, "name": "a"}\n')
    return State(home, rows, broker)


@pytest.fixture
def taken_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """LOGSTORE_KAFKA_PORT is held by another program (a listening socket)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        monkeypatch.setenv("LOGSTORE_KAFKA_PORT", str(port))
        yield port
