"""Turn committed snapshots into the durable, monotonic visibility watermark in the control topic.

``publish_visible_offsets`` (the library function the Airflow operator wraps):

1. copies every LogStore commit of the live snapshots into the control topic's ledger (so expiring a
   snapshot never loses its batch -> epoch -> offsets);
2. reads the log's end offsets, *then* the control state (so no record below those ends belongs to an
   epoch the state does not know), scans the log from the current watermark to those ends (headers
   only) and classifies each record;
3. moves the watermark per partition up to the first undecided record (a batch still in flight, or a
   dead epoch whose successor has not committed yet); never backwards;
4. writes a control checkpoint when one is due (:mod:`airflow_logstore.log.checkpoints`).

Publishing twice, or after an older snapshot, changes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core import control
from airflow_logstore.core.codec import decode_headers
from airflow_logstore.core.visibility import Decision, WatermarkScan, classify, newly_visible_commits
from airflow_logstore.exceptions import RecordDecodeError
from airflow_logstore.log import kafka_client
from airflow_logstore.log.checkpoints import maybe_checkpoint
from airflow_logstore.pause import pause_point
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits

log = logging.getLogger(__name__)


@dataclass
class PublishReport:
    table: str
    watermark_before: dict[str, int] = field(default_factory=dict)
    watermark_after: dict[str, int] = field(default_factory=dict)
    advanced: bool = False
    scanned: int = 0
    ledger_added: list[str] = field(default_factory=list)
    newly_visible: list[str] = field(default_factory=list)
    blocked_by: dict[str, dict[str, Any]] = field(default_factory=dict)
    undecodable: int = 0
    current_snapshot_id: int | None = None
    checkpoint: dict[str, Any] | None = None  # a control checkpoint written by this publish
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def sync_ledger(
    handle: LogStoreTable, ctl: kafka_client.ControlTopic, state: control.ControlState, table: Any = None
) -> list[str]:
    """Add the commits of live snapshots that the ledger lacks; return their "writer/batch/epoch"."""
    table = table or handle.load()
    added = []
    for commit in snapshot_commits(table):
        if state.committed(commit.writer_id, commit.batch_id) is not None:  # in the ledger, or retired
            continue
        ctl.record_commit(commit.to_json(), commit.writer_id, commit.batch_id)
        state.commits[commit.key] = commit
        added.append(f"{commit.writer_id}/{commit.batch_id}/{commit.epoch}")
    return added


def publish_visible_offsets(handle: LogStoreTable) -> PublishReport:
    """Advance the table's visibility watermark as far as committed snapshots allow."""
    started = time.monotonic()
    config = handle.config()
    topic, _, _ = config.require_log()
    ctl = handle.control(config)
    report = PublishReport(str(handle.name))
    cons = kafka_client.consumer(handle.kafka_config(config))
    try:
        # The log's end offsets first, the control state second: every record below those ends was
        # produced after its epoch's claim was acknowledged, so the state read next knows that epoch
        # and never mistakes the record for a foreign one (which would let the watermark pass it).
        bounds = kafka_client.partition_offsets(cons, topic, config.partitions)
        pause_point("publish:offsets-read")
        state = ctl.read()
        table = handle.load()
        snapshot = table.current_snapshot()
        report.current_snapshot_id = snapshot.snapshot_id if snapshot else None
        report.ledger_added = sync_ledger(handle, ctl, state, table)
        previous = dict(state.watermark)
        report.watermark_before = {str(p): o for p, o in sorted(previous.items())}
        start = {p: max(previous.get(p, -1) + 1, low) for p, (low, _) in bounds.items()}
        end = {p: high for p, (_, high) in bounds.items()}
        scan = WatermarkScan(previous)
        for batch in kafka_client.scan(cons, topic, start, end):
            for message in batch:
                report.scanned += 1
                partition, offset = message.partition(), message.offset()
                if partition in scan.blocked:
                    continue
                try:
                    meta = decode_headers(message.headers())
                except RecordDecodeError:
                    report.undecodable += 1
                    scan.observe(partition, offset, None)
                    continue
                decision = classify(meta, partition, offset, state)
                if decision.undecided and partition not in scan.blocked:
                    report.blocked_by[str(partition)] = {
                        "offset": offset,
                        "writer_id": meta.writer_id,
                        "batch_id": meta.batch_id,
                        "epoch": meta.epoch,
                        "state": decision.value,
                    }
                scan.observe(partition, offset, decision, meta.pair_half)
        new = scan.finish(end)
    finally:
        cons.close()

    report.watermark_after = {str(p): o for p, o in sorted(new.items())}
    if any(new.get(p, -1) > previous.get(p, -1) for p in new):
        report.advanced = True
        report.newly_visible = newly_visible_commits(state, previous, new)
        value = {
            "offsets": {str(p): o for p, o in sorted(new.items())},
            "commits": report.newly_visible,
            "snapshot_id": report.current_snapshot_id,
            "published_at_ms": int(time.time() * 1000),
            **scan.settled(start, new),
        }
        offset = ctl.append(control.K_WATERMARK, value)
        if offset == state.end_offset:  # nothing came between: the checkpoint can include this move
            control.fold([control.ControlRecord(control.K_WATERMARK, value, offset)], state)
    report.checkpoint = maybe_checkpoint(ctl, state, {p: low for p, (low, _) in bounds.items()})
    report.seconds = round(time.monotonic() - started, 3)
    log.info(
        "published %s: watermark %s -> %s, %s records scanned, %s newly visible commits, ledger +%s",
        handle.name,
        report.watermark_before,
        report.watermark_after,
        report.scanned,
        len(report.newly_visible),
        len(report.ledger_added),
    )
    return report


def is_visible(handle: LogStoreTable, writer_id: str, batch_id: int) -> bool:
    """True when the batch's records are all at or below the published watermark."""
    state = handle.control().read()
    commit = state.committed(writer_id, batch_id)
    if commit is None:
        return False
    return all(state.watermark.get(p, -1) >= last for p, (_, last) in commit.offsets.items())


__all__ = ["Decision", "PublishReport", "is_visible", "publish_visible_offsets", "sync_ledger"]
