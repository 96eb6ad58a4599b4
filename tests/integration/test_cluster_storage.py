"""The cluster profile's storage services as real processes: PostgreSQL, moto's S3 server and Iceberg's
REST catalog server on it. A table made through the catalog with pyiceberg has its files in the bucket;
every process listens on 127.0.0.1 only; up() is idempotent; down() ends the processes."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.exceptions import ServiceError
from logstore_dev.services._process import alive, rss_mib
from logstore_dev.services.local import free_ports
from logstore_dev.services.objectstore import LocalObjectStore
from logstore_dev.services.postgres import LocalPostgres
from logstore_dev.services.rest_catalog import LocalRestCatalog

pytest.importorskip("moto", reason="the cluster extra (moto[server], psycopg2-binary) is not installed")

ACCESS_KEY, SECRET_KEY = "logstore-test-key", "logstore-test-secret"
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


@dataclass
class Storage:
    postgres: LocalPostgres
    s3: LocalObjectStore
    catalog: LocalRestCatalog
    started_s: dict[str, float] = field(default_factory=dict)

    def services(self) -> dict[str, Any]:
        return {"postgres": self.postgres, "s3": self.s3, "catalog": self.catalog}


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    root = tmp_path_factory.mktemp("cluster-storage")
    pg_port, s3_port, rest_port = free_ports(3)
    # As root, PostgreSQL runs as the postgres OS user, who cannot enter pytest's base folder
    # (/tmp/pytest-of-root, mode 0700, and every pytest session resets it to 0700): its state goes
    # to a folder of its own, removed at the end.
    pg_root = Path(tempfile.mkdtemp(prefix="logstore-pg-")) if os.geteuid() == 0 else root
    s3 = LocalObjectStore(port=s3_port, state_dir=root / "s3", access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    storage = Storage(
        postgres=LocalPostgres(port=pg_port, state_dir=pg_root / "postgres", password="pg-test-password"),
        s3=s3,
        catalog=LocalRestCatalog(
            port=rest_port,
            state_dir=root / "catalog",
            s3_endpoint=s3.endpoint,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
        ),
    )
    try:
        for name, service in storage.services().items():
            started = time.monotonic()
            service.up()
            storage.started_s[name] = time.monotonic() - started
        yield storage
    finally:
        for service in reversed(storage.services().values()):
            service.down()
        if pg_root != root:
            shutil.rmtree(pg_root, ignore_errors=True)


def test_a_table_through_the_rest_catalog_has_its_files_in_the_bucket(storage: Storage) -> None:
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("cluster", **storage.catalog.client_properties())
    catalog.create_namespace_if_not_exists("storage_test")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    table = catalog.create_table("storage_test.items", schema=schema)
    table.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=schema))
    table.append(pa.table({"id": [4], "name": ["d"]}, schema=schema))

    again = load_catalog("again", **storage.catalog.client_properties()).load_table("storage_test.items")
    assert sorted(again.scan().to_arrow().to_pylist(), key=lambda row: row["id"]) == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b"},
        {"id": 3, "name": "c"},
        {"id": 4, "name": "d"},
    ]
    assert again.metadata_location.startswith("s3://warehouse/storage_test/items/metadata/")
    listed = storage.s3.client().list_objects_v2(Bucket="warehouse", Prefix="storage_test/items/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert sum(key.endswith(".parquet") for key in keys) == 2
    assert again.metadata_location.removeprefix("s3://warehouse/") in keys


def test_postgres_takes_airflow_logins_on_its_url(storage: Storage) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(storage.postgres.url)
    try:
        with engine.connect() as connection:
            row = connection.execute(sqlalchemy.text("SELECT current_user, current_database()")).one()
    finally:
        engine.dispose()
    assert tuple(row) == ("airflow", "airflow")


def test_every_process_listens_on_loopback_only(storage: Storage) -> None:
    import psutil

    for name, service in storage.services().items():
        pid = service.pid()
        assert pid is not None, name
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        listening = [
            conn.laddr
            for process in processes
            for conn in _connections(process, pid)
            if conn.status == psutil.CONN_LISTEN
        ]
        assert listening, f"{name} listens nowhere"
        assert {addr.ip for addr in listening} <= LOOPBACK, f"{name} listens on {listening}"
        assert service.port in {addr.port for addr in listening}, name


def _connections(process: Any, service_pid: int) -> list[Any]:
    """A process's inet connections. A child that exited since it was listed (a PostgreSQL backend
    lives as long as its session) has none; the service's own process must still be there."""
    import psutil

    try:
        return list(process.net_connections(kind="inet"))
    except psutil.NoSuchProcess:
        if process.pid == service_pid:
            raise
        return []


def test_up_again_is_idempotent_and_a_taken_port_is_named(storage: Storage, tmp_path: Path) -> None:
    for name, service in storage.services().items():
        pid = service.pid()
        started = time.monotonic()
        status = service.up()
        assert status["running"] and status["pid"] == pid, name
        assert time.monotonic() - started < 5, name
    squatter = LocalObjectStore(
        port=storage.catalog.port, state_dir=tmp_path / "s3", access_key="a", secret_key="b"
    )
    with pytest.raises(ServiceError, match=f"port {storage.catalog.port} on 127.0.0.1 is taken"):
        squatter.up(timeout=10)


def test_memory_and_start_times(storage: Storage, record_property: Any) -> None:
    numbers = {
        name: f"{rss_mib(service.pid()):.0f} MiB RSS, up in {storage.started_s[name]:.1f}s"
        for name, service in storage.services().items()
    }
    record_property("report", "; ".join(f"{name} {text}" for name, text in numbers.items()))
    for name, service in storage.services().items():
        assert rss_mib(service.pid()) < 1024, name


def test_down_ends_every_process(storage: Storage) -> None:
    import psutil

    for name, service in reversed(storage.services().items()):
        pid = service.pid()
        assert pid is not None, name
        group = [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
        assert service.down() is True, name
        assert not any(alive(member) for member in group), name
        assert service.pid() is None and service.status()["running"] is False, name
        assert service.down() is False, name
