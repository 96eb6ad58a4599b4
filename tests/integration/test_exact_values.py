"""Every column type, written by the real dual write, reads back exactly through every read path.

A table with a column of each type a table can have (``testing.values.COLUMN_TYPES``: decimal(38,18)
and decimal(38,0) at full precision, timestamps with microseconds with and without a zone, dates,
binary, floats with NaN, infinities and -0.0, nulls) gets two batches from the real dual write on real
Spark, Kafka and Iceberg: seeded random rows, edge values first, written through (batch 1: inserts, a
local frame: the small-batch path, whose validation and key checks run in the driver) and merged
(batch 2: updates with before-images from the table, deletes, inserts, from Parquet files: the re-read
path), in a Spark session whose time zone is not UTC. Every path must give back exactly the rows written
(``testing.values.exact``): the Python reader per record, in bulk (both scanners), its JSON lines, a
normalized eventual read, hybrid reads, the Spark read job (its rows, and its JSON output) and the
``logstore`` Spark source.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_logstore.core.codec import typed_row
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read import read_job
from airflow_logstore.read.reader import LogReader, read_hybrid, read_log, run_read
from airflow_logstore.table.schema import field_types
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import log_values, make_table
from logstore_dev.testing.values import COLUMN_TYPES, edge_values, exact, exact_row, random_value

COLUMNS = {"c_" + re.sub(r"\W+", "_", ddl).strip("_"): ddl for ddl in COLUMN_TYPES}
SCHEMA = ", ".join(["id int", *(f"{name} {ddl}" for name, ddl in COLUMNS.items())])
INPUT_SCHEMA = f"{SCHEMA}, op string"
META = ("_partition", "_offset", "_writer_id", "_epoch", "_batch_id", "_record_type", "_source")
#: A zone whose offsets before 1911 have seconds (local mean time, +00:09:21): a timestamp written with
#: the session's offset and a pattern without seconds moves by 21 s.
SESSION_ZONE = "Europe/Paris"

Change = tuple[str, dict[str, Any]]  # (row kind, row with every column)


def _row(rng: random.Random, types: dict[str, str], key: int, edge: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"id": key}
    for name, type_name in types.items():
        if name == "id":
            continue
        if edge is not None:
            edges = edge_values(type_name)
            row[name] = edges[edge % len(edges)]
        else:
            row[name] = None if rng.random() < 0.15 else random_value(rng, type_name, edge_share=0.2)
    return row


def _batches(
    types: dict[str, str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Change], list[Change]]:
    """(batch 1 input, batch 2 input, batch 1's changes, batch 2's changes)."""
    rng = random.Random(33)
    first = [_row(rng, types, key, key - 1 if key <= 12 else None) for key in range(1, 81)]
    current = {row["id"]: row for row in first}
    second: list[dict[str, Any]] = []
    changes: list[Change] = []
    for key in range(1, 41):  # updates, the first ones to the edge values in another order
        row = _row(rng, types, key, 80 - key if key <= 12 else None)
        second.append({**row, "op": "update"})
        changes += [("-U", current[key]), ("+U", row)]
    for key in range(41, 51):
        second.append({"id": key, "op": "delete"})
        changes.append(("-D", current[key]))
    for key in range(81, 101):
        row = _row(rng, types, key, None)
        second.append({**row, "op": "insert"})
        changes.append(("+I", row))
    return first, second, [("+I", row) for row in first], changes


def _exact_changes(changes: list[Change]) -> list[Any]:
    return sorted(
        ((kind, sorted(exact_row(row).items(), key=lambda item: item[0])) for kind, row in changes), key=repr
    )


def _same(got: list[Change], want: list[Change]) -> None:
    """Equal exactly; else the first differing row's columns are named."""
    if _exact_changes(got) == _exact_changes(want):
        return
    by_key = {(kind, row["id"]): exact_row(row) for kind, row in want}
    for kind, row in got:
        expected = by_key.get((kind, row["id"]))
        if expected is None:
            raise AssertionError(f"unexpected {kind} of id {row['id']}")
        differ = {
            name: (value, expected[name]) for name, value in exact_row(row).items() if value != expected[name]
        }
        assert not differ, f"{kind} of id {row['id']}: (read, written) {differ}"
    raise AssertionError(f"{len(got)} changes read, {len(want)} written")


def _of_rows(rows: list[dict[str, Any]], types: dict[str, str]) -> list[Change]:
    """Rows with ``_kind`` (and read metadata) as changes."""
    return [(row["_kind"], {name: row[name] for name in types}) for row in rows]


def _json_changes(lines: Iterator[str], types: dict[str, str], source: str | None = None) -> list[Change]:
    """JSON lines of a read, decoded as a reader of the value rule decodes them (exact numbers)."""
    changes = []
    for line in lines:
        raw = json.loads(line, parse_float=Decimal)
        if source is None or raw.get("_source") == source:
            changes.append((raw.get("_kind", "+I"), typed_row(raw, types)))
    return changes


def _parquet(spark: Any, path: Path, rows: list[dict[str, Any]]) -> str:
    """``rows`` as a Parquet input of two files, written by Spark from the Python values (exact: decimals
    as BigDecimal, timestamps as microseconds, floats as they are)."""
    names = ["id", *COLUMNS, "op"]
    frame = spark.createDataFrame([tuple(row.get(name) for name in names) for row in rows], INPUT_SCHEMA)
    frame.repartition(2).write.parquet(str(path))
    return str(path)


def _local(spark: Any, path: str) -> Any:
    """The rows of a Parquet input as a local frame (a ``LocalRelation``, through Spark's own Arrow
    conversion): it takes the small-batch path (validation and key checks in the driver)."""
    from airflow_logstore.write.inputs import small_batch_rows

    frame = spark.read.parquet(path)
    local = spark.createDataFrame(frame.toArrow(), frame.schema)
    assert small_batch_rows(local) == frame.count()
    return local


def _lines(path: Path) -> list[str]:
    """The lines of a JSON-lines file: split at "\n" only (``splitlines`` also splits at U+2028, which a
    JSON string may hold as it is)."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line]


@pytest.fixture(scope="module")
def written(env: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _write(env, spark, tmp_path_factory.mktemp("exact"), {})


def _write(env: Any, spark: Any, folder: Path, properties: dict[str, str]) -> dict[str, Any]:
    """Both batches written by the dual write to a new table with ``properties``."""
    handle = make_table(env, schema=SCHEMA, prefix="exact", properties=properties)
    types = field_types(handle.load().schema())
    first, second, changes_1, changes_2 = _batches(types)
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", SESSION_ZONE)
    try:
        writer = open_writer(spark, str(handle.name), writer_id="exact")
        inserts = _parquet(spark, folder / "b1", [{**r, "op": "insert"} for r in first])
        one = writer.write_frame(_local(spark, inserts), 1)
        two = writer.write_path(_parquet(spark, folder / "b2", second), 2)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    publish_visible_offsets(handle)
    return {
        "handle": handle,
        "types": types,
        "first": first,
        "changes": changes_1 + changes_2,
        "changes_1": changes_1,
        "changes_2": changes_2,
        "snapshot_1": one.snapshot_id,
        "results": (one, two),
        "folder": folder,
    }


def test_the_table_holds_exactly_the_rows_written(written: dict[str, Any]) -> None:
    one, two = written["results"]
    assert (one.log_records, two.log_records) == (80, 110)
    rows = written["handle"].load().scan().to_arrow().to_pylist()
    final = {row["id"]: row for row in written["first"]}
    for kind, row in written["changes_2"]:
        if kind in ("+U", "+I"):
            final[row["id"]] = row
        elif kind == "-D":
            del final[row["id"]]
    assert sorted((exact_row(r) for r in rows), key=repr) == sorted(
        (exact_row(r) for r in final.values()), key=repr
    )


def test_per_record_reads_are_exact(written: dict[str, Any]) -> None:
    read = read_log(written["handle"], consistency="consistent")
    assert read.report.dead_lettered == 0
    got = [(r.kind.value, r.row) for r in read.records]
    _same(got, written["changes"])


@pytest.mark.parametrize("scanner", ["librdkafka", "jvm"])
def test_bulk_reads_are_exact(written: dict[str, Any], scanner: str) -> None:
    reader = LogReader(written["handle"], consistency="consistent", scanner=scanner)
    report = reader.new_report()
    rows = [row for table in reader.iterate_batches("earliest", report=report) for row in table.to_pylist()]
    assert report.dead_lettered == 0
    _same(_of_rows(rows, written["types"]), written["changes"])


def test_json_lines_of_a_read_are_exact(written: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "log.jsonl"
    summary = run_read(written["handle"], mode="log", consistency="consistent", output_path=str(out))
    assert summary["records"] == 190
    lines = _lines(out)
    _same(_json_changes(iter(lines), written["types"]), written["changes"])


def test_a_normalized_eventual_read_is_exact(written: dict[str, Any]) -> None:
    """The log holds no duplicate: normalize passes every change through, the deletes of rows holding
    NaN included (a NaN never equalled itself, so such a delete was absorbed as stale)."""
    read = LogReader(written["handle"], consistency="eventual", normalize=True).read("earliest")
    got = [(r.kind.value, r.row) for r in read.records]
    _same(got, written["changes"])


def test_hybrid_reads_are_exact(written: dict[str, Any], tmp_path: Path) -> None:
    handle, types = written["handle"], written["types"]
    hybrid = read_hybrid(handle, snapshot_id=written["snapshot_1"], consistency="consistent")
    file_rows = [("+I", row) for row in hybrid.file_rows.to_pylist()]
    _same(file_rows, written["changes_1"])
    log = [(r.kind.value, r.row) for r in hybrid.log.records]
    _same(log, written["changes_2"])
    out = tmp_path / "hybrid.jsonl"
    run_read(
        handle,
        mode="hybrid",
        snapshot_id=written["snapshot_1"],
        consistency="consistent",
        output_path=str(out),
    )
    lines = _lines(out)
    _same(_json_changes(iter(lines), types, "file"), written["changes_1"])
    _same(_json_changes(iter(lines), types, "log"), written["changes_2"])


def _spark_read(spark: Any, table: str, out: Path, *options: str) -> dict[str, Any]:
    args = read_job.parser().parse_args(
        ["--table", table, "--consistency", "consistent", "--output", str(out), *options]
    )
    return read_job.run(spark, args, None, {})


@pytest.mark.parametrize("output_format", ["parquet", "json"])
def test_the_spark_read_job_is_exact(
    written: dict[str, Any], spark: Any, tmp_path: Path, output_format: str
) -> None:
    handle, types = written["handle"], written["types"]
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", SESSION_ZONE)
    try:
        log = _spark_read(
            spark, str(handle.name), tmp_path / "log", "--mode", "log", "--output-format", output_format
        )
        hybrid = _spark_read(
            spark,
            str(handle.name),
            tmp_path / "hybrid",
            "--mode",
            "hybrid",
            "--snapshot-id",
            str(written["snapshot_1"]),
            "--output-format",
            output_format,
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert (log["log_records"], log["dead_lettered"]) == (190, 0)
    assert (hybrid["file_rows"], hybrid["log_records"], hybrid["dead_lettered"]) == (80, 110, 0)

    def read(folder: Path, default_kind: str | None = None) -> list[Change]:
        if output_format == "parquet":
            rows = pq.read_table(folder).to_pylist()
            return _of_rows([{"_kind": default_kind, **row} for row in rows], types)
        lines = (line for part in sorted(folder.glob("part-*")) for line in _lines(part))
        return _json_changes(lines, types)

    _same(read(tmp_path / "log"), written["changes"])
    _same(read(tmp_path / "hybrid" / "file", "+I"), written["changes_1"])
    _same(read(tmp_path / "hybrid" / "log"), written["changes_2"])


def test_the_logstore_spark_source_is_exact(written: dict[str, Any], spark: Any) -> None:
    """``spark.read.format("logstore")``, log and hybrid, in a session whose time zone is not UTC; the
    rows are taken out of Spark as Arrow (instants stay instants)."""
    handle, types = written["handle"], written["types"]
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", SESSION_ZONE)
    try:
        reader = spark.read.format("logstore").options(table=str(handle.name), consistency="consistent")
        log = reader.load().toArrow().to_pylist()
        hybrid = reader.option("mode", "hybrid").option(
            "startingPosition", f"snapshot:{written['snapshot_1']}"
        )
        rows = hybrid.load().toArrow().to_pylist()
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    _same(_of_rows(log, types), written["changes"])
    _same(_of_rows([r for r in rows if r["_source"] == "file"], types), written["changes_1"])
    _same(_of_rows([r for r in rows if r["_source"] == "log"], types), written["changes_2"])


def test_the_log_values_are_what_the_codec_writes(written: dict[str, Any]) -> None:
    """The Spark produce writes each column value as ``codec.value_text`` does: decimals, timestamps,
    dates, binary, nulls byte for byte (floats and strings aside: Java and Python write the shortest
    text of a double, and escape control characters, differently; both read back exactly)."""
    from airflow_logstore.core.codec import value_text

    read = read_log(written["handle"], consistency="consistent")
    raw_values = _raw_values(written["handle"])
    types = written["types"]
    checked = 0
    for record in read.records:
        text = raw_values[(record.partition, record.offset)]
        for name, type_name in types.items():
            if type_name in ("float", "double", "string") and record.row[name] is not None:
                continue  # floats: see above; strings: Jackson escapes as \u001F, Python as \u001f
            assert f'"{name}":{value_text(record.row[name])}' in text, (name, text)
            checked += 1
    assert checked > 1000


def _raw_values(handle: Any) -> dict[tuple[int, int], str]:
    return {position: value.decode("utf-8") for position, value in log_values(handle).items()}


def test_exact_tells_what_equality_does_not() -> None:
    """The comparison these tests rest on."""
    assert exact(Decimal("1.50")) != exact(Decimal("1.5")) and exact(-0.0) != exact(0.0)
    assert exact(float("nan")) == exact(float("nan"))


def test_debezium_json_reads_back_exactly_on_every_path(
    env: Any, spark: Any, tmp_path: Path, written: dict[str, Any]
) -> None:
    """The same batches in ``debezium-json``: Spark writes the envelope byte for byte as the codec does
    (each value in the writers' layout, so a reversal keeps its row's bytes; additions are creates,
    retractions deletes), and the per-record and bulk readers (both scanners) and the Spark read job
    give back exactly the rows written."""
    from airflow_logstore.core import codec

    debezium = _write(env, spark, tmp_path, {"log-store.data-format": "debezium-json"})
    handle, types, changes = debezium["handle"], debezium["types"], debezium["changes"]
    assert debezium["changes"] == written["changes"]
    raw = _raw_values(handle)
    assert len(raw) == 190
    for text in raw.values():
        value = text.encode("utf-8")
        layout = codec._layout(value)
        assert layout is not None and layout[0] is codec.DataFormat.DEBEZIUM_JSON, text[:200]
        envelope = json.loads(value)
        assert envelope["op"] == codec.debezium_op(layout[1])
        assert envelope["source"] == {"connector": "airflow-logstore", "row_kind": layout[1].value}
    read = read_log(handle, consistency="consistent")
    assert read.report.dead_lettered == 0
    _same([(r.kind.value, r.row) for r in read.records], changes)
    for scanner in ("librdkafka", "jvm"):
        reader = LogReader(handle, consistency="consistent", scanner=scanner)
        report = reader.new_report()
        rows = [
            row for table in reader.iterate_batches("earliest", report=report) for row in table.to_pylist()
        ]
        assert report.dead_lettered == 0
        _same(_of_rows(rows, types), changes)
    summary = _spark_read(
        spark, str(handle.name), tmp_path / "log", "--mode", "log", "--output-format", "parquet"
    )
    assert (summary["log_records"], summary["dead_lettered"]) == (190, 0)
    _same(_of_rows(pq.read_table(tmp_path / "log").to_pylist(), types), changes)
