"""The streaming, bulk-decoded ``run_read`` returns what the per-record path returns, chunk by chunk.

Chunks are made tiny (3 records) so that header sets, decisions, undecodable records and append-only
filtering all cross chunk boundaries. The reference is the per-record path (``LogReader._decode`` and
``_emit`` over every message of the same range), written with ``json.dumps`` per row.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.log import kafka_client
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read import reader as reader_module
from airflow_logstore.read.jsonlines import json_row
from airflow_logstore.read.reader import LogReader, ReadReport, records_to_arrow, run_read
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import make_table, write_jsonl

ROWS = [
    [{"id": i, "name": f"v{i}", "amount": i} for i in range(1, 12)],
    [
        {"id": 1, "name": "v1-b", "amount": 100, "op": "update"},
        {"id": 2, "op": "delete"},
        {"id": 12, "name": 'line\nbreak "q"', "amount": 12},
    ],
]
BAD_HEADERS = [("format-version", b"1"), ("writer-id", b"w"), ("epoch", b"one"), ("batch-id", b"1")]


class Recorder:
    """Dead letters of the reference path, kept here (the real topic gets the streaming path's)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, str]] = []

    def add(self, topic: str, message: Any, reason: str) -> None:
        self.entries.append((message.partition(), message.offset(), reason))


def reference(table: Any, consistency: str, changelog_mode: str) -> tuple[list[str], list[Any], ReadReport]:
    """JSON lines, dead letters and report of the per-record path over the whole log."""
    reader = LogReader(table, consistency=consistency, changelog_mode=changelog_mode)
    recorder = Recorder()
    reader.dead_letter = recorder  # type: ignore[assignment]
    report = reader.new_report()
    cons = kafka_client.consumer(reader.kafka_config)
    try:
        bounds = kafka_client.partition_offsets(cons, reader.topic, reader.config.partitions)
        first = {p: low for p, (low, _) in bounds.items()}
        read_filter = reader.read_filter(consistency == "consistent", None, first)
        last = {p: high for p, (_, high) in bounds.items()}
        if consistency == "consistent" and read_filter.state is not None:
            last = {p: min(last[p], read_filter.state.watermark.get(p, -1) + 1) for p in last}
        records = []
        for batch in kafka_client.scan(cons, reader.topic, first, last):
            for message in batch:
                report.scanned += 1
                record = reader._decode(message, read_filter, report)
                if record is not None:
                    records.extend(reader._emit(record, None, report))
    finally:
        cons.close()
    rows = records_to_arrow(records, reader.field_types).to_pylist() if records else []
    return sorted(json_row(row) for row in rows), sorted(recorder.entries), report


def _dead_letters(table: Any, topic: str) -> list[dict[str, Any]]:
    cons = kafka_client.consumer(table.kafka_config())
    try:
        (low, high) = kafka_client.partition_offsets(cons, topic, 1)[0]
        return [json.loads(m.value()) for b in kafka_client.scan(cons, topic, {0: low}, {0: high}) for m in b]
    finally:
        cons.close()


@pytest.fixture
def table(env: Any, spark: Any, tmp_path: Path) -> Any:
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="stream")
    writer.write_path(str(write_jsonl(tmp_path / "a.jsonl", ROWS[0])), 1)
    producer = kafka_client.producer(handle.kafka_config())
    topic = handle.config().topic
    producer.produce(topic, key=b"x", value=b"not ours", partition=0)
    producer.produce(topic, key=b"y", value=b'{"kind":"+I","row":{}}', partition=1, headers=BAD_HEADERS)
    good_headers = [("format-version", b"1"), ("writer-id", b"w"), ("epoch", b"1"), ("batch-id", b"1")]
    producer.produce(topic, key=b"z", value=b'{"kind":"+I","row":{"id":', partition=2, headers=good_headers)
    assert producer.flush(30) == 0
    writer.write_path(str(write_jsonl(tmp_path / "b.jsonl", ROWS[1])), 2)
    publish_visible_offsets(handle)
    return handle


@pytest.mark.parametrize("changelog_mode", ["all-kinds", "append-only"])
@pytest.mark.parametrize("consistency", ["eventual", "consistent"])
def test_streaming_read_equals_the_per_record_read_across_chunk_boundaries(
    table: Any, consistency: str, changelog_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    want_lines, want_dead, want_report = reference(table, consistency, changelog_mode)
    monkeypatch.setattr(reader_module, "CHUNK_RECORDS", 3)
    out = io.StringIO()
    summary = run_read(table, mode="log", consistency=consistency, changelog_mode=changelog_mode, output=out)
    lines = out.getvalue().splitlines()
    assert sorted(lines) == want_lines
    assert summary["records"] == len(want_lines) == summary["report"]["returned"]
    report = summary["report"]
    assert report["scanned"] == want_report.scanned
    assert report["by_decision"] == want_report.by_decision
    assert report["skipped_kinds"] == want_report.skipped_kinds
    assert report["dead_lettered"] == len(want_dead)
    if consistency == "eventual":
        assert len(want_dead) == 3  # no headers, a bad epoch header, a truncated value
    entries = _dead_letters(table, report["dead_letter_topic"])[-len(want_dead) :] if want_dead else []
    assert sorted((e["partition"], e["offset"], e["reason"]) for e in entries) == want_dead


def test_streaming_read_with_a_limit_stops_inside_a_chunk(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "CHUNK_RECORDS", 4)
    out = io.StringIO()
    summary = run_read(table, mode="log", consistency="eventual", output=out, limit=6)
    assert summary["records"] == 6 == len(out.getvalue().splitlines())
