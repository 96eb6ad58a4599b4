"""Apache Flink, a real third-party consumer, reads a LogStore log in ``debezium-json``: the raw log after
reconciliation, and the committed feed with ``read_committed``.

Flink SQL (PyFlink in its own environment, ``tests/environments.py``; Flink's Kafka SQL connector from
Maven) reads the log as any Flink user would: the ``kafka`` connector, ``'format'='debezium-json'``, no
project code. One Flink JVM serves the whole session (``flink_sql.py``); each query is bounded
(``'scan.bounded.mode'='latest-offset'``), so its job ends and its changelog folds into the rows a
materialized view of it holds.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore import jars
from airflow_logstore.exceptions import FencedError
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.reconcile.reconciler import reconcile
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import make_table, table_state
from tests.environments import flink_python
from tests.integration.test_committed_feed import read_feed

SCRIPT = Path(__file__).with_name("flink_sql.py")
ANSWER = "FLINK-ANSWER "


class FlinkSql:
    """The session's Flink SQL process: :meth:`rows` runs a bounded query and returns its rows."""

    def __init__(self, process: subprocess.Popen[str], log: Path) -> None:
        self.process = process
        self.log = log

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(ANSWER):
                return dict(json.loads(line[len(ANSWER) :]))
        raise AssertionError(f"Flink ended (exit {self.process.wait()}): {self.log.read_text()[-4000:]}")

    def rows(
        self, statements: Sequence[str], query: str, config: Mapping[str, str] | None = None
    ) -> list[list[Any]]:
        assert self.process.stdin is not None
        request = {"config": dict(config or {}), "statements": list(statements), "query": query}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        assert "error" not in answer, answer["error"]
        return list(answer["rows"])


@pytest.fixture(scope="session")
def flink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkSql]:
    log = tmp_path_factory.mktemp("flink") / "flink.log"
    command = [str(flink_python()), str(SCRIPT), *map(str, jars.flink_kafka_jars())]
    with log.open("w") as errors:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, bufsize=1
        )
    session = FlinkSql(process, log)
    try:
        assert session._answer() == {"ready": True}
        yield session
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kafka_table(name: str, topic: str, bootstrap: str, columns: str, **options: str) -> str:
    """The DDL of a Flink table over ``topic``: ``debezium-json`` values, read from the earliest offset
    to the latest at the start of the query (bounded), a primary key ``id``."""
    settings = {
        "connector": "kafka",
        "topic": topic,
        "properties.bootstrap.servers": bootstrap,
        "properties.group.id": f"flink-{name}",
        "scan.startup.mode": "earliest-offset",
        "scan.bounded.mode": "latest-offset",
        "format": "debezium-json",
        "debezium-json.timestamp-format.standard": "ISO-8601",
        **options,
    }
    with_text = ", ".join(f"'{key}' = '{value}'" for key, value in settings.items())
    return f"CREATE TEMPORARY TABLE {name} ({columns}, PRIMARY KEY (id) NOT ENFORCED) WITH ({with_text})"


SCHEMA = "id long, name string, amount long, price decimal(38,18), op string"
COLUMNS = ("id", "name", "amount", "price", "op")
FLINK_COLUMNS = "id BIGINT, name STRING, amount BIGINT, price DECIMAL(38, 18)"
#: upserts of the same keys in every batch (updates), deletes, keys deleted and inserted again
BATCHES: list[list[dict[str, Any]]] = [
    [{"id": i, "name": f"a{i}", "amount": i, "price": Decimal(f"{i}.{i:018d}")} for i in range(1, 11)],
    [
        {"id": i, "name": f"b{i}", "amount": 10 * i, "price": Decimal("-1E-18") * i, "op": "update"}
        for i in range(1, 6)
    ]
    + [
        {"id": 6, "op": "delete"},
        {"id": 11, "name": "b11", "amount": 11, "price": Decimal("12345678901234567890.123456789012345678")},
    ],
    [
        {"id": 1, "name": "c1", "amount": 100, "price": Decimal("0"), "op": "update"},
        {"id": 6, "name": "again6", "amount": 6},
        {"id": 2, "op": "delete"},
    ],
]


def table_rows(handle: LogStoreTable) -> list[list[Any]]:
    """The Iceberg table's rows as the Flink script writes them (decimals at their scale, as text)."""
    rows = [
        [r["id"], r["name"], r["amount"], None if r["price"] is None else str(r["price"])]
        for r in table_state(handle).values()
    ]
    return sorted(rows, key=json.dumps)


#: the table's properties: its log in debezium-json, and the committed feed
PROPERTIES = {"log-store.data-format": "debezium-json", "log-store.committed-feed.enabled": "true"}


@pytest.fixture(scope="module")
def failed_over(env: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> LogStoreTable:
    """A ``debezium-json`` table written with writer failovers (from batch 2 on, an attempt that
    produced its records and was fenced before committing, then the retry), reconciled, published."""
    handle = make_table(env, schema=SCHEMA.removesuffix(", op string"), properties=PROPERTIES, prefix="flink")
    name, folder = str(handle.name), tmp_path_factory.mktemp("flink-input")
    for batch, rows in enumerate(BATCHES, start=1):
        path = folder / f"b{batch}"
        frame = spark.createDataFrame([tuple(row.get(c) for c in COLUMNS) for row in rows], SCHEMA)
        frame.coalesce(1).write.parquet(str(path))
        spark.catalog.refreshTable(handle.spark_name())
        fenced, retry = open_writer(spark, name, writer_id="w"), open_writer(spark, name, writer_id="w")
        if batch > 1:  # a zombie attempt: its records are in the log, its commit is refused
            with pytest.raises(FencedError):
                fenced.write_path(str(path), batch)
        assert retry.write_path(str(path), batch).snapshot_id is not None
    report = reconcile(handle)
    assert report.reversed > 0 and report.dead_lettered == 0
    publish_visible_offsets(handle)
    return handle


def test_flink_reads_the_reconciled_debezium_log_as_the_table(
    failed_over: LogStoreTable, flink: FlinkSql
) -> None:
    """Flink's view of the raw log after reconciliation, deduplicated by key
    (``table.exec.source.cdc-events-duplicate``), equals the Iceberg table."""
    topic, bootstrap, _ = failed_over.config().require_log()
    flink_rows = flink.rows(
        [kafka_table("raw_log", topic, bootstrap, FLINK_COLUMNS)],
        "SELECT id, name, amount, price FROM raw_log",
        {"table.exec.source.cdc-events-duplicate": "true"},
    )
    want = table_rows(failed_over)
    assert len(want) == 10
    assert sorted(flink_rows, key=json.dumps) == want


def test_flink_reads_the_committed_feed_with_read_committed_as_the_table(
    failed_over: LogStoreTable, flink: FlinkSql
) -> None:
    """Flink's view of ``<topic>.committed`` with ``read_committed`` and no deduplication equals the
    Iceberg table: the feed has each committed change once, and nothing of the fenced attempts or of the
    reconciler (a duplicate would stay as a second row; a reversal would retract a row the view holds)."""
    topic, bootstrap, _ = failed_over.config().require_log()
    assert read_feed(failed_over)  # every commit marker is written: Flink's latest offset is the feed's end
    flink_rows = flink.rows(
        [
            kafka_table(
                "feed",
                f"{topic}.committed",
                bootstrap,
                FLINK_COLUMNS,
                **{"properties.isolation.level": "read_committed"},
            )
        ],
        "SELECT id, name, amount, price FROM feed",
        {"table.exec.source.cdc-events-duplicate": "false"},
    )
    assert sorted(flink_rows, key=json.dumps) == table_rows(failed_over)
