"""Small helpers to create LogStore tables and look at both stores in tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_logstore.core.changelog import apply_retract, apply_upsert
from airflow_logstore.core.codec import RowKind
from airflow_logstore.read.reader import LogRead, read_log
from airflow_logstore.table.schema import primary_key_of
from airflow_logstore.table.tables import LogStoreTable, create_table
from logstore_dev.testing.environment import LogStoreTestEnv

DEFAULT_SCHEMA = "id int, name string, amount long"


def make_table(
    env: LogStoreTestEnv,
    *,
    schema: str = DEFAULT_SCHEMA,
    primary_key: Sequence[str] = ("id",),
    properties: Mapping[str, str] | None = None,
    log: bool = True,
    prefix: str = "t",
    name: str | None = None,
) -> LogStoreTable:
    """A new table with a unique name (namespace ``it``; ``name``: that one, from ``env.unique``) and,
    when ``log``, its own topics."""
    name = name or env.unique(prefix)
    props = env.log_properties(f"{name}_log") if log else {}
    props.update(properties or {})
    handle = LogStoreTable.open(f"it.{name}")
    create_table(handle, schema, primary_key=primary_key, properties=props)
    return handle


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return path


def write_parquet(
    spark: Any,
    path: Path,
    rows: Iterable[Mapping[str, Any]],
    files: int = 1,
    schema: str = "id long, name string, amount long, op string",
) -> Path:
    """``rows`` as a Parquet folder of ``files`` files (in their order when there is one file); a row's
    missing columns are nulls."""
    names = [part.split()[0] for part in schema.split(",")]
    frame = spark.createDataFrame([tuple(row.get(name) for name in names) for row in rows], schema)
    (frame.repartition(files) if files > 1 else frame.coalesce(1)).write.parquet(str(path))
    return path


def table_state(
    handle: LogStoreTable, snapshot_id: int | None = None
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The Iceberg table's rows keyed by primary key (or by the whole row for key-less tables)."""
    table = handle.load()
    key = primary_key_of(table.schema())
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return {_key(row, key): row for row in rows}


def _key(row: Mapping[str, Any], key: Sequence[str]) -> tuple[Any, ...]:
    if key:
        return tuple(row[c] for c in key)
    return tuple(sorted(row.items()))


def eventual_log(handle: LogStoreTable, **options: Any) -> LogRead:
    return read_log(handle, consistency="eventual", **options)


def fold_log(
    read: LogRead, primary_key: Sequence[str], semantics: str = "retract"
) -> dict[Any, dict[str, Any]]:
    """Apply a log read to an empty table (retract or upsert semantics); fail on retract anomalies."""
    records = [(_key(r.row, primary_key), r.kind, r.row) for r in read.records]
    if semantics == "upsert":
        return dict(apply_upsert(records))
    result = apply_retract(records)
    if result.anomalies:
        raise AssertionError(
            f"log does not fold to one row per key: {dict(list(result.anomalies.items())[:3])}"
        )
    return result.state


def kinds(read: LogRead) -> list[RowKind]:
    return [r.kind for r in read.records]


def log_values(handle: LogStoreTable) -> dict[tuple[int, int], bytes]:
    """Every record value of the table's log as written, by (partition, offset)."""
    from airflow_logstore.log import kafka_client

    side = handle.log_side()
    topic, config = side.topic, side.config
    consumer = kafka_client.consumer(side.kafka_config)
    found: dict[tuple[int, int], bytes] = {}
    try:
        bounds = kafka_client.partition_offsets(consumer, topic, config.partitions)
        start = {p: low for p, (low, _) in bounds.items()}
        for messages in kafka_client.scan(
            consumer, topic, start, {p: high for p, (_, high) in bounds.items()}
        ):
            for message in messages:
                found[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    return found
