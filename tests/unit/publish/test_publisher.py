"""One publish without services: the reads in the protocol's order, the records it appends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import parse_table_properties
from airflow_logstore.core.records import Payload, as_json
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.publish import publisher
from airflow_logstore.table.tables import LogSide

LEDGER = CommitInfo("w", 1, epoch=1, offsets={0: (0, 1)}, tasks=frozenset({"0.1"}))
TABLE_ONLY = CommitInfo("w", 2, epoch=1, offsets={0: (2, 2)}, tasks=frozenset({"0.1"}))
PROPERTIES = {"log-store.enabled": "true", "log-store.topic": "t", "log-store.address": "k:9092"}


@dataclass
class Message:
    at: tuple[int, int]
    meta: RecordMeta

    def partition(self) -> int:
        return self.at[0]

    def offset(self) -> int:
        return self.at[1]

    def headers(self) -> list[tuple[str, bytes]]:
        return encode_headers(self.meta)


class Control:
    def __init__(self, steps: list[str]) -> None:
        self.steps = steps
        self.appended: list[tuple[str, Any]] = []

    def read(self) -> ControlState:
        self.steps.append("control state")
        return ControlState(epochs={"w": 1}, commits={LEDGER.key: LEDGER}, watermark={0: -1}, end_offset=5)

    def reader(self) -> Control:  # read again and again: the same read
        return self

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass

    def record_commit(self, value: dict[str, Any], writer_id: str, batch_id: int) -> int:
        self.appended.append((control.commit_key(writer_id, batch_id), value))
        return 5

    def append(self, key: str, value: Payload | dict[str, Any]) -> int:
        self.appended.append((key, as_json(value)))
        return 6


class Snapshot:
    snapshot_id = 77


class Table:
    def current_snapshot(self) -> Snapshot:
        return Snapshot()


class Handle:
    name = "db.t"

    def __init__(self, steps: list[str], ctl: Control) -> None:
        self.steps, self.ctl = steps, ctl

    def log_side(self) -> LogSide:
        return LogSide(parse_table_properties(PROPERTIES), {"bootstrap.servers": "k:9092"}, self.ctl)  # type: ignore[arg-type]

    def load(self) -> Table:
        self.steps.append("table")
        return Table()


def test_publish_reads_ends_then_state_then_table_and_appends_ledger_then_watermark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []
    ctl = Control(steps)

    class Consumer:
        def close(self) -> None:
            steps.append("closed")

    def offsets(cons: Any, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        steps.append("log ends")
        return {0: (0, 4)}

    def scan(cons: Any, topic: str, start: dict[int, int], end: dict[int, int]) -> Any:
        assert (topic, start, end) == ("t", {0: 0}, {0: 4})
        yield [Message((0, o), RecordMeta("w", 1, 1 if o < 2 else 2, task="0.1")) for o in range(3)]
        yield [Message((0, 3), RecordMeta("w", 1, 3, task="0.1"))]  # in flight: the watermark stops

    monkeypatch.setattr(publisher.kafka_client, "consumer", lambda config, **settings: Consumer())
    monkeypatch.setattr(publisher.kafka_client, "partition_offsets", offsets)
    monkeypatch.setattr(publisher.kafka_client, "scan", scan)
    monkeypatch.setattr(publisher, "snapshot_commits", lambda table: [LEDGER, TABLE_ONLY])
    monkeypatch.setattr(publisher, "maybe_checkpoint", lambda ctl, state, log_start: None)

    report = publisher.publish_visible_offsets(Handle(steps, ctl))  # type: ignore[arg-type]

    assert steps == ["log ends", "control state", "table", "closed"]
    assert ctl.appended[0][0] == "commit/w/2"
    assert ctl.appended[1][0].startswith(control.K_WATERMARK_PREFIX)  # a key of its own (compaction)
    watermark = ctl.appended[1][1]
    assert watermark["offsets"] == {"0": 2} and watermark["snapshot_id"] == 77
    assert watermark["commits"] == ["w/1/1", "w/2/1"]
    assert watermark["scanned"] == {"0": [0, 2]}
    assert report.ledger_added == ["w/2/1"]
    assert report.watermark_before == {"0": -1} and report.watermark_after == {"0": 2}
    assert report.advanced and report.scanned == 4
    assert report.blocked_by == {
        "0": {"offset": 3, "writer_id": "w", "batch_id": 3, "epoch": 1, "state": "in-flight"}
    }
