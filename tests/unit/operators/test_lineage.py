"""OpenLineage of the operators (``operators/_lineage.py``): the datasets each operator reports on start and
on complete for a real table in a SQLite catalog whose properties turn its log and committed feed on
(no broker is contacted), through the OpenLineage provider's own extractor; and without the provider."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators._lineage import (
    Lineage,
    LineageDataset,
    TableLineage,
    catalog_namespace,
    kafka_dataset,
    location_dataset,
    operator_lineage,
)
from airflow_logstore.operators.compaction import LogStoreCompactionOperator
from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.operators.read import LogStoreReadOperator
from airflow_logstore.operators.read_visible import LogStoreReadVisibleOperator
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.operators.streaming_write import LogStoreStreamingDualWriteOperator
from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import CatalogSpec, embedded_catalog
from airflow_logstore.table.tables import LogStoreTable, create_table

BROKERS = "PLAINTEXT://broker-1:9093,broker-2:9093"
KAFKA = "kafka://broker-1:9093"
LOG_PROPERTIES = {
    "log-store.enabled": "true",
    "log-store.topic": "orders-log",
    "log-store.address": BROKERS,
    "log-store.committed-feed.enabled": "true",
}


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``db.orders`` in a SQLite catalog under ``tmp_path``, its log and committed feed enabled by its
    properties, with one snapshot; ``LogStoreHook.table`` returns it. Its location, warehouse namespace
    and snapshot id for the assertions."""
    catalog = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    handle = LogStoreTable.open("db.orders", catalog)
    create_table(handle, "id int, amount long", primary_key=["id"])  # no log yet: no topic is created
    iceberg = handle.load()
    iceberg.transaction().set_properties(LOG_PROPERTIES).commit_transaction()
    iceberg = handle.load()
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("amount", pa.int64())])
    iceberg.append(pa.Table.from_pylist([{"id": 1, "amount": 10}], schema=schema))
    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: LogStoreTable.open(name, catalog))
    snapshot = handle.load().current_snapshot()
    assert snapshot is not None
    return {
        "handle": handle,
        "path": iceberg.location().removeprefix("file://"),
        "warehouse": f"file:{catalog.warehouse.removeprefix('file://').rstrip('/')}",
        "snapshot_id": snapshot.snapshot_id,
    }


def table_dataset(table: dict[str, Any], version: Any = None) -> LineageDataset:
    return LineageDataset(
        "file", table["path"], (table["warehouse"], "db.orders"), None if version is None else str(version)
    )


LOG = LineageDataset(KAFKA, "orders-log")
FEED = LineageDataset(KAFKA, "orders-log.committed")


# -- names -------------------------------------------------------------------------------------------


def test_a_topic_is_named_by_the_first_bootstrap_server() -> None:
    assert kafka_dataset(BROKERS, "t") == LineageDataset("kafka://broker-1:9093", "t")
    assert kafka_dataset(" kafka:9092 , other:9092", "t").namespace == "kafka://kafka:9092"
    assert kafka_dataset("kafka", "t").namespace == "kafka://kafka:9092"  # Kafka's default port
    assert kafka_dataset("[::1]:9094", "t").namespace == "kafka://[::1]:9094"
    with pytest.raises(ValueError, match="no bootstrap server"):
        kafka_dataset(" , ", "t")


@pytest.mark.parametrize(
    ("location", "namespace", "name"),
    [
        ("/data/in/batch.jsonl", "file", "/data/in/batch.jsonl"),
        ("file:///warehouse/db/orders/", "file", "/warehouse/db/orders"),
        ("file://host/share/in.csv", "file://host", "/share/in.csv"),
        ("s3://bucket/warehouse/db/orders", "s3://bucket", "warehouse/db/orders"),
        ("s3a://bucket/in/", "s3://bucket", "in"),
        ("gs://bucket/in.parquet", "gs://bucket", "in.parquet"),
        ("hdfs://namenode:8020/warehouse/t", "hdfs://namenode:8020", "/warehouse/t"),
        ("s3://AKIA:s3cret@bucket/in.csv", "s3://bucket", "in.csv"),
    ],
)
def test_a_location_is_scheme_and_authority_then_the_path(location: str, namespace: str, name: str) -> None:
    assert location_dataset(location) == LineageDataset(namespace, name)


def test_a_relative_input_path_is_named_by_its_absolute_path() -> None:
    assert location_dataset("in/batch.jsonl") == LineageDataset("file", os.path.abspath("in/batch.jsonl"))


def test_the_catalog_namespace_is_the_rest_uri_or_the_warehouse_never_a_password() -> None:
    rest = CatalogSpec(type="rest", uri="https://user:pw@catalog:8181/api/", warehouse="s3://wh/")
    assert catalog_namespace(rest) == "https://catalog:8181/api"
    sql = CatalogSpec(type="sql", uri="postgresql+psycopg2://u:secret@db/cat", warehouse="s3a://bucket/wh/")
    assert catalog_namespace(sql) == "s3://bucket/wh"
    local = CatalogSpec(type="sql", uri="sqlite:////x/cat.db", warehouse="file:///x/warehouse")
    assert catalog_namespace(local) == "file:/x/warehouse"
    assert catalog_namespace(CatalogSpec(name="lake", type="sql", uri="sqlite:////x/c.db")) == "lake"


def test_a_table_without_log_or_feed_names_only_itself(table: dict[str, Any]) -> None:
    plain = TableLineage.planned(table["handle"], {})
    assert (plain.table(), plain.log(), plain.feed()) == (None, None, None)
    no_feed = TableLineage.planned(
        table["handle"], {**LOG_PROPERTIES, "log-store.committed-feed.enabled": "false"}
    )
    assert (no_feed.log(), no_feed.feed()) == (LOG, None)


# -- what each operator reports ----------------------------------------------------------------------


def test_dual_write(table: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    op = LogStoreDualWriteOperator(task_id="w", table="db.orders", input_path="/data/b7.jsonl", batch_id=7)
    assert op.lineage(None) == Lineage(
        (LineageDataset("file", "/data/b7.jsonl"),), (table_dataset(table), LOG)
    )
    # execute keeps its XCom value: the batch's snapshot is the table's version on complete
    xcom = {"table": "db.orders", "batch_id": 7, "snapshot_id": table["snapshot_id"], "skipped": False}
    monkeypatch.setattr(op, "_write", lambda context, writer_id: xcom)
    assert op.execute({}) == xcom
    assert op.lineage(op.lineage_result).outputs == (table_dataset(table, table["snapshot_id"]), LOG)
    only_file = LogStoreDualWriteOperator(
        task_id="f", table="db.orders", input_path="s3://in/b.csv", batch_id=1, emit_mode="file"
    )
    assert only_file.lineage(None) == Lineage((LineageDataset("s3://in", "b.csv"),), (table_dataset(table),))


def test_publish(table: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_logstore.publish import publisher

    op = LogStorePublishVisibleOffsetsOperator(task_id="p", table="db.orders")
    assert op.lineage(None) == Lineage((table_dataset(table), LOG), (FEED,))
    report = publisher.PublishReport("db.orders", current_snapshot_id=table["snapshot_id"])
    monkeypatch.setattr(publisher, "publish_visible_offsets", lambda handle: report)
    op.execute({})
    assert op.lineage(op.lineage_result) == Lineage(
        (table_dataset(table, table["snapshot_id"]), LOG), (FEED,)
    )


def test_compaction(table: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_logstore.compaction.policy import CompactionReport

    op = LogStoreCompactionOperator(task_id="c", table="db.orders")
    assert op.lineage(None) == Lineage((table_dataset(table),), (table_dataset(table),))
    report = CompactionReport("db.orders", "run", status="compacted", compaction_snapshots=[41, 42])
    report.start_snapshot_id = table["snapshot_id"]
    monkeypatch.setattr(op, "_compact", report.to_dict)
    op.execute({})
    assert op.lineage(op.lineage_result) == Lineage(
        (table_dataset(table, table["snapshot_id"]),), (table_dataset(table, 42),)
    )
    dry = LogStoreCompactionOperator(task_id="d", table="db.orders", dry_run="True")
    assert dry.lineage(None).outputs == ()
    assert dry.lineage(CompactionReport("db.orders", "run", dry_run=True).to_dict()).outputs == ()


def test_reconcile(table: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    op = LogStoreReconcileOperator(task_id="r", table="db.orders")
    assert op.lineage(None) == Lineage((LOG,), (LOG,))
    monkeypatch.setattr(op, "_reconcile", lambda: {"status": "lease-held", "dry_run": False})
    op.execute({})
    assert op.lineage(op.lineage_result) == Lineage((LOG,), ())  # another run held the lease
    assert LogStoreReconcileOperator(task_id="d", table="db.orders", dry_run=True).lineage(None).outputs == ()


def test_create_table_before_and_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: LogStoreTable.open(name, catalog))
    op = LogStoreCreateTableOperator(
        task_id="c", table="db.fresh", schema="id int", primary_key=["id"], properties=LOG_PROPERTIES
    )
    # before: no location yet, the topics its properties name
    assert op.lineage(None) == Lineage((), (LOG, FEED))
    handle = LogStoreTable.open("db.fresh", catalog)
    create_table(handle, "id int", primary_key=["id"])
    handle.load().transaction().set_properties(LOG_PROPERTIES).commit_transaction()
    warehouse = f"file:{catalog.warehouse.removeprefix('file://').rstrip('/')}"
    location = handle.load().location().removeprefix("file://")
    created = LineageDataset("file", location, (warehouse, "db.fresh"))
    assert op.lineage({"table": "db.fresh", "created": True}) == Lineage((), (created, LOG, FEED))


@pytest.mark.parametrize(
    ("mode", "reads"),
    [("file", ["table"]), ("log", ["log"]), ("hybrid", ["table", "log"])],
)
def test_read(table: dict[str, Any], monkeypatch: pytest.MonkeyPatch, mode: str, reads: list[str]) -> None:
    op = LogStoreReadOperator(task_id="r", table="db.orders", mode=mode, output_path="/out/rows.jsonl")
    out = (LineageDataset("file", "/out/rows.jsonl"),)

    def inputs(version: Any) -> tuple[LineageDataset, ...]:
        return tuple(table_dataset(table, version) if r == "table" else LOG for r in reads)

    assert op.lineage(None) == Lineage(inputs(None), out)
    summary = {"table": "db.orders", "mode": mode, "snapshot_id": table["snapshot_id"]}
    monkeypatch.setattr(op, "_read", lambda: summary)
    op.execute({})
    assert op.lineage(op.lineage_result) == Lineage(inputs(table["snapshot_id"]), out)
    pinned = LogStoreReadOperator(task_id="p", table="db.orders", mode=mode, snapshot_id="12")
    assert pinned.lineage(None) == Lineage(inputs(12), ())


def test_read_visible(table: dict[str, Any]) -> None:
    op = LogStoreReadVisibleOperator(task_id="v", table="db.orders", output_path="s3://out/changes.jsonl")
    assert op.lineage(None) == Lineage((LOG,), (LineageDataset("s3://out", "changes.jsonl"),))


def test_streaming_write(table: dict[str, Any]) -> None:
    op = LogStoreStreamingDualWriteOperator(task_id="s", table="db.orders", source_topic="orders-cdc")
    source = LineageDataset(KAFKA, "orders-cdc")
    assert op.lineage(None) == Lineage((source,), (table_dataset(table), LOG))
    last = {"batch_id": 3, "snapshot_id": table["snapshot_id"]}
    event = {"status": "finished", "report_id": "r1", "result": {"batches": 4, "last_batch": last}}
    op.execute_complete({}, event)
    assert op.lineage(op.lineage_result).outputs == (table_dataset(table, table["snapshot_id"]), LOG)
    elsewhere = LogStoreStreamingDualWriteOperator(
        task_id="e", table="db.orders", source_topic="cdc", source_bootstrap="source-kafka:9092"
    )
    assert elsewhere.lineage(None).inputs == (LineageDataset("kafka://source-kafka:9092", "cdc"),)


# -- through the OpenLineage provider ----------------------------------------------------------------


def test_the_provider_extracts_the_facets_on_start_and_on_complete(
    table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the provider's listener asks for (its ExtractorManager, on running and on success), and the
    facets as OpenLineage's client sends them."""
    pytest.importorskip("airflow.providers.openlineage")
    from airflow.providers.openlineage.extractors.base import DefaultExtractor
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.utils.state import TaskInstanceState
    from openlineage.client.serde import Serde

    op = LogStoreDualWriteOperator(task_id="w", table="db.orders", input_path="/data/b7.jsonl", batch_id=7)
    manager, run = ExtractorManager(), SimpleNamespace(run_id="manual__1")
    assert manager.get_extractor_class(op) is DefaultExtractor
    started = manager.extract_metadata(run, op, TaskInstanceState.RUNNING, task_instance=None)
    assert [(d.namespace, d.name) for d in started.inputs] == [("file", "/data/b7.jsonl")]
    assert [(d.namespace, d.name) for d in started.outputs] == [
        ("file", table["path"]),
        (KAFKA, "orders-log"),
    ]
    assert "version" not in started.outputs[0].facets

    xcom = {"table": "db.orders", "snapshot_id": table["snapshot_id"]}
    monkeypatch.setattr(op, "_write", lambda context, writer_id: xcom)
    op.execute({})
    completed = manager.extract_metadata(run, op, TaskInstanceState.SUCCESS, task_instance=None)
    sent = Serde.to_dict(completed.outputs[0])
    assert sent["namespace"] == "file" and sent["name"] == table["path"]
    assert sent["facets"]["symlinks"]["identifiers"] == [
        {"namespace": table["warehouse"], "name": "db.orders", "type": "TABLE"}
    ]
    assert sent["facets"]["version"]["datasetVersion"] == str(table["snapshot_id"])
    assert "SymlinksDatasetFacet" in sent["facets"]["symlinks"]["_schemaURL"]
    assert Serde.to_dict(completed.outputs[1]) == {"namespace": KAFKA, "name": "orders-log", "facets": {}}
    # a failed try returned nothing: the datasets it meant to write, no version
    failed_op = LogStoreDualWriteOperator(
        task_id="f", table="db.orders", input_path="/data/b8.jsonl", batch_id=8
    )
    failed = manager.extract_metadata(run, failed_op, TaskInstanceState.FAILED, task_instance=None)
    assert [(d.name, "version" in d.facets) for d in failed.outputs] == [
        (table["path"], False),
        ("orders-log", False),
    ]


def test_without_the_provider_no_lineage_and_no_error(
    table: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider is an optional extra: without it (its modules cannot be imported) the operators still
    import and run, and report no lineage rather than fail."""
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)
    assert operator_lineage(Lineage((LOG,), ())) is None
    op = LogStorePublishVisibleOffsetsOperator(task_id="p", table="db.orders")
    assert op.get_openlineage_facets_on_start() is None
    assert op.get_openlineage_facets_on_complete(None) is None
    assert op.lineage(None) == Lineage((table_dataset(table), LOG), (FEED,))  # the description stays
