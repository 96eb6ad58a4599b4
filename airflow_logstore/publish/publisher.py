"""Turn committed snapshots into the durable, monotonic visibility watermark in the control topic.

``publish_visible_offsets`` (the library function the Airflow operator wraps) reads, in the protocol's
order, the log's end offsets, *then* the control state (so no record below those ends belongs to an
epoch the state does not know), *then* the table; then it

1. copies every LogStore commit of the live snapshots that the ledger lacks into the control topic's
   ledger (so expiring a snapshot never loses its batch -> epoch -> offsets);
2. scans the log from the current watermark to those ends (headers only) and classifies each record
   (:func:`~airflow_logstore.core.visibility.scan_watermark`);
3. moves the watermark per partition up to the first undecided record (a batch still in flight, or a
   dead epoch whose successor has not committed yet); never backwards;
4. when the table has a committed feed, copies what became visible to it, once, in a Kafka transaction
   (:mod:`airflow_logstore.publish.feed`);
5. writes a control checkpoint when one is due (:mod:`airflow_logstore.log.control_topic`).

Publishing twice, or after an older snapshot, changes nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_logstore.core import control
from airflow_logstore.core.closing import Closing
from airflow_logstore.core.ledger import ledger_name, missing_commits, with_commits
from airflow_logstore.core.records import WatermarkRecord
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import (
    Decision,
    WatermarkMove,
    newly_visible_commits,
    scan_watermark,
    watermark_scan_range,
)
from airflow_logstore.log import control_topic, kafka_client
from airflow_logstore.log.control_topic import maybe_checkpoint
from airflow_logstore.pause import pause_point
from airflow_logstore.publish.feed import FeedCopier
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits

if TYPE_CHECKING:
    from pyiceberg.table import Table

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
    feed: dict[str, Any] | None = None  # what this publish copied to the committed feed, if enabled
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def publish_visible_offsets(handle: LogStoreTable) -> PublishReport:
    """Advance the table's visibility watermark as far as committed snapshots allow (a one-shot
    :class:`Publisher`)."""
    with Publisher(handle) as publisher:
        return publisher.publish()


class Publisher(Closing):
    """Publishes one table's watermark again and again, keeping its Kafka clients between publishes.

    Each :meth:`publish` is the whole publish of the module's steps, in the protocol's order: the log's
    end offsets, *then* the control state read to the topic's end at call time, *then* the table. What
    it keeps is only connections and what a re-read would return: the log consumer, the control state
    it folds on incrementally (:class:`~airflow_logstore.log.control_topic.ControlReader`), and the
    committed feed's token with the feed's progress (:class:`~airflow_logstore.publish.feed.FeedCopier`).
    A new client's first requests cost up to a few hundred milliseconds; a long-lived publisher (a
    writer that publishes after each commit, a service) pays them once. Two publishers at once are as
    safe as two one-shot publishes: the watermark only moves up, and the feed's token fences the older
    holder (it takes the token again at its next copy, and reads the progress after it).
    """

    def __init__(self, handle: LogStoreTable) -> None:
        self.handle = handle
        self.side = handle.log_side()
        self._cons: Any = None
        self.control = self.side.control.reader()
        self.feed = FeedCopier(self.side)

    def publish(self) -> PublishReport:
        """Advance the watermark as far as committed snapshots allow; copy to the feed; checkpoint."""
        started = time.monotonic()
        side = self.side
        if self._cons is None:
            # an offset that retention deleted while the scan ran is an error here, never a silent skip:
            # the scan would settle the range up to the next record it saw, records it never classified
            self._cons = kafka_client.consumer(side.kafka_config, **{"auto.offset.reset": "error"})
        cons = self._cons
        try:
            # The log's end offsets, *then* the control state, *then* the table: every record below those
            # ends was produced after its epoch's claim was acknowledged, so the state read next knows
            # that epoch and never mistakes the record for a foreign one (which would let the watermark
            # pass it).
            bounds = kafka_client.partition_offsets(cons, side.topic, side.config.partitions)
            pause_point("publish:offsets-read")
            state = self.control.read()
            table = self.handle.load()
            live = snapshot_commits(table)
            added = missing_commits(state, live)
            ledger_added = record_commits(side.control, added)
            state = with_commits(state, added)  # a new state: the reader's own is folded on next time
            start, end = watermark_scan_range(state.watermark, bounds)
            records = (
                (message.partition(), message.offset(), message.headers())
                for batch in kafka_client.scan(cons, side.topic, start, end)
                for message in batch
            )
            move = scan_watermark(records, state, start, end)
        except BaseException:
            self.control.reset()  # a failed publish starts the next one from a whole read
            raise
        report = _report(self.handle, state, move, current_snapshot_id(table), ledger_added)
        if report.advanced:
            value = watermark_value(move, report.newly_visible, report.current_snapshot_id)
            side.control.append(control.watermark_key(uuid.uuid4().hex), value)
        pause_point("publish:watermark-moved")
        log_start = {p: low for p, (low, _) in bounds.items()}
        if side.config.committed_feed:  # also when the watermark stayed: a killed copy is completed here
            report.feed = self.feed.copy(state, move.watermark, log_start)
        report.checkpoint = maybe_checkpoint(side.control, state, log_start)
        if report.checkpoint is not None:
            # a checkpoint written or tried: the next read starts from the latest checkpoint again, so
            # that its ``checkpoint_start`` says when the next one is due
            self.control.reset()
        report.seconds = round(time.monotonic() - started, 3)
        _log(self.handle, report)
        return report

    def close(self) -> None:
        """Let go of the Kafka clients (the feed's token included)."""
        try:
            self.feed.close()
            self.control.close()
        finally:
            if self._cons is not None:
                self._cons.close()
                self._cons = None


def record_commits(ctl: control_topic.ControlTopic, commits: Iterable[CommitInfo]) -> list[str]:
    """Append ``commits`` to the control topic's ledger, in order; return their "writer/batch/epoch"."""
    added = []
    for commit in commits:
        ctl.record_commit(commit.to_json(), commit.writer_id, commit.batch_id)
        added.append(ledger_name(commit))
    return added


def current_snapshot_id(table: Table) -> int | None:
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot else None


def _report(
    handle: LogStoreTable,
    state: control.ControlState,
    move: WatermarkMove,
    snapshot_id: int | None,
    ledger_added: list[str],
) -> PublishReport:
    """The report of a publish whose scan decided ``move`` from ``state``'s watermark."""
    previous, new = state.watermark, move.watermark
    advanced = any(new.get(p, -1) > previous.get(p, -1) for p in new)
    return PublishReport(
        str(handle.name),
        watermark_before={str(p): o for p, o in sorted(previous.items())},
        watermark_after={str(p): o for p, o in sorted(new.items())},
        advanced=advanced,
        scanned=move.scanned,
        ledger_added=ledger_added,
        newly_visible=newly_visible_commits(state, previous, new) if advanced else [],
        blocked_by=move.blocked_by,
        undecodable=move.undecodable,
        current_snapshot_id=snapshot_id,
    )


def watermark_value(
    move: WatermarkMove, newly_visible: list[str], snapshot_id: int | None
) -> WatermarkRecord:
    """The watermark record of a move: the offsets, the commits it made visible, what it settled."""
    return WatermarkRecord.from_json(
        {
            "offsets": move.watermark,
            "commits": newly_visible,
            "snapshot_id": snapshot_id,
            "published_at_ms": int(time.time() * 1000),
            **move.settled,
        }
    )


def _log(handle: LogStoreTable, report: PublishReport) -> None:
    log.info(
        "published %s: watermark %s -> %s, %s records scanned, %s newly visible commits, ledger +%s",
        handle.name,
        report.watermark_before,
        report.watermark_after,
        report.scanned,
        len(report.newly_visible),
        len(report.ledger_added),
    )


def is_visible(handle: LogStoreTable, writer_id: str, batch_id: int) -> bool:
    """True when the batch's records are all at or below the published watermark."""
    state = handle.log_side().control.read()
    commit = state.committed(writer_id, batch_id)
    if commit is None:
        return False
    return all(state.watermark.get(p, -1) >= last for p, (_, last) in commit.offsets.items())


__all__ = [
    "Decision",
    "PublishReport",
    "Publisher",
    "is_visible",
    "publish_visible_offsets",
    "record_commits",
    "watermark_value",
]
