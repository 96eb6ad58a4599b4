"""Read a LogStore table: ``file`` (an Iceberg snapshot), ``log`` (consistent or eventual) or ``hybrid``.

- ``file``: the rows of the current or a given snapshot.
- ``log`` consistent (``log-store.consistency-guarantee.enabled=true`` / ``log.consistency=consistent``, or
  Paimon's ``transactional``, or the same key as a per-read option): records at or below the published
  visibility watermark whose (writer, batch, epoch) was committed: every committed change exactly once,
  no Kafka transaction.
- ``log`` eventual: every record at once, at-least-once, reconciliation's reversals included;
  ``normalize=True`` deduplicates per key with keyed state (costly: see BENCHMARKS.md).
- ``hybrid``: a snapshot's rows, then the log from that snapshot's log positions, without the records
  the snapshot already holds (``core.visibility.hybrid_keeps``).

Changelog modes: ``all-kinds`` returns +I/-U/+U/-D; ``append-only`` returns +I only and counts the
other kinds in the report. Undecodable records go to the table's dead-letter topic and are counted.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from airflow_logstore.core.changelog import Normalizer
from airflow_logstore.core.codec import (
    H_WRITER,
    RECONCILER_WRITER_ID,
    RecordMeta,
    RowKind,
    decode_headers,
    decode_value,
    typed_row,
)
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import (
    ChangelogMode,
    Consistency,
    parse_consistency,
    resolve_read_options,
)
from airflow_logstore.core.summary import S_POSITIONS, CommitInfo, positions_from_json
from airflow_logstore.core.visibility import Decision, ReadFilter, visible_end
from airflow_logstore.exceptions import OptionError, RecordDecodeError
from airflow_logstore.log import jvm_scan, kafka_client
from airflow_logstore.log.deadletter import DeadLetterTopic
from airflow_logstore.read.batches import (
    CHUNK_RECORDS,
    META_COLUMNS,
    DecodedChunk,
    decode_chunk,
    decode_columns,
)
from airflow_logstore.table.schema import field_types, primary_key_of
from airflow_logstore.table.tables import LogStoreTable, merged_state

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import DataScan, Table

log = logging.getLogger(__name__)

__all__ = [
    "META_COLUMNS",
    "HybridPlan",
    "LogReader",
    "LogRecord",
    "ReadReport",
    "StartPosition",
    "filter_for",
    "run_read",
]


@dataclass(frozen=True)
class StartPosition:
    """Where a log read starts: earliest, latest, timestamp:<ms|ISO-8601>, snapshot:<id>, or
    positions:<JSON> (per partition the first offset to read: a follower's resume position).

    :param value: the timestamp (ms) or the snapshot id.
    :param offsets: for ``positions``, (partition, first offset) pairs.
    :param hybrid: for ``positions``, the snapshot whose log part the read continues (its hybrid rule
        still applies: see :meth:`resume_token`), or None.
    """

    kind: str
    value: int | None = None
    offsets: tuple[tuple[int, int], ...] = ()
    hybrid: SnapshotStart | None = None

    @classmethod
    def parse(cls, text: str | None) -> StartPosition:
        text = (text or "earliest").strip()
        if text in ("earliest", "latest"):
            return cls(text)
        kind, _, value = text.partition(":")
        if kind == "timestamp" and value:
            if value.lstrip("-").isdigit():
                return cls(kind, int(value))
            try:
                moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise OptionError("from", f"'{value}' is neither epoch milliseconds nor ISO-8601") from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            return cls(kind, int(moment.timestamp() * 1000))
        if kind == "snapshot" and value.lstrip("-").isdigit():
            return cls(kind, int(value))
        if kind == "positions" and value:
            try:
                parsed = json.loads(value)
            except ValueError:
                raise OptionError("from", f"'{value}' after 'positions:' is not JSON") from None
            if not isinstance(parsed, Mapping):
                raise OptionError("from", f"'{value}' after 'positions:' is not a JSON object")
            return cls._from_token(parsed) if "positions" in parsed else cls.at(parsed)
        raise OptionError(
            "from",
            f"'{text}' is not earliest, latest, timestamp:<ms|ISO>, snapshot:<id> or positions:<JSON>",
        )

    @classmethod
    def of(cls, start: StartPosition | Mapping[Any, Any] | str | None) -> StartPosition | dict[int, int]:
        """``start`` as a read takes it: text parsed, a resume token (a mapping with ``positions``) as
        a ``positions`` start; any other mapping (partition -> offset) with integer keys."""
        if isinstance(start, StartPosition):
            return start
        if start is None or isinstance(start, str):
            return cls.parse(start)
        if "positions" in start:
            return cls._from_token(start)
        return {int(p): int(o) for p, o in start.items()}

    @classmethod
    def _from_token(cls, token: Mapping[str, Any]) -> StartPosition:
        hybrid = token.get("snapshot")
        return cls.at(token["positions"], None if hybrid is None else SnapshotStart.from_json(hybrid))

    @classmethod
    def at(cls, offsets: Mapping[Any, Any], hybrid: SnapshotStart | None = None) -> StartPosition:
        """A ``positions`` start: ``offsets`` maps partitions (int or str) to the first offset to read."""
        if not isinstance(offsets, Mapping):
            raise OptionError("from", f"positions must map partitions to offsets, not {offsets!r}")
        pairs = ((_non_negative("partition", p), _non_negative("offset", o)) for p, o in offsets.items())
        return cls("positions", None, tuple(sorted(pairs)), hybrid)

    def resume_token(self) -> dict[str, Any]:
        """A ``positions`` start as plain JSON, what a follower hands out and :meth:`of` takes back:
        ``{"positions": {"0": 12, "1": 7}}``, plus ``"snapshot"`` (what the snapshot holds, see
        :class:`SnapshotStart`) when the read continues a snapshot's log part. Self-contained: resuming
        needs no snapshot, so the snapshot may expire meanwhile."""
        token: dict[str, Any] = {"positions": {str(p): o for p, o in self.offsets}}
        if self.hybrid is not None:
            token["snapshot"] = self.hybrid.to_json()
        return token


def _non_negative(what: str, value: Any) -> int:
    """``value`` as an int >= 0 (an int, or a string of digits as JSON keys are)."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise OptionError("from", f"{what} {value!r} in a positions start is not a non-negative integer")
    return int(value)


@dataclass
class LogRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    kind: RowKind
    row: dict[str, Any]
    meta: RecordMeta
    decision: Decision | None = None
    #: a follower's resume position after this record (see ``read.follow``): plain JSON, which
    #: ``follow(reader, start=...)`` takes back; None for batch reads
    resume_position: dict[str, Any] | None = None


@dataclass
class ReadReport:
    table: str
    mode: str
    consistency: str
    changelog_mode: str
    start: dict[str, int] = field(default_factory=dict)
    end: dict[str, int] = field(default_factory=dict)
    watermark: dict[str, int] = field(default_factory=dict)
    scanned: int = 0
    returned: int = 0
    by_decision: dict[str, int] = field(default_factory=dict)
    skipped_kinds: dict[str, int] = field(default_factory=dict)
    not_yet_visible: int = 0
    dead_lettered: int = 0
    dead_letter_topic: str | None = None
    #: ``--normalize``: records in, dropped, ``-U`` absorbed and added (see ``core.changelog.Normalizer``)
    normalized_in: int = 0
    normalized_dropped: int = 0
    normalized_absorbed: int = 0
    normalized_added: int = 0
    #: per partition the offset after the log's last record when the read started (``end`` is where a
    #: consistent read stopped: the records between the two are ``not_yet_visible``)
    log_end: dict[str, int] = field(default_factory=dict)
    snapshot_id: int | None = None
    file_rows: int | None = None
    scanner: str = "librdkafka"  # or "jvm": the records came as columns from the JVM scan

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def counted(self, normalizer: Normalizer) -> None:
        """The normalizer's counts (they add up to the records it returned)."""
        self.normalized_in, self.normalized_dropped = normalizer.fed, normalizer.dropped
        self.normalized_absorbed, self.normalized_added = normalizer.absorbed, normalizer.added

    def of_hybrid(self, held: SnapshotStart, file_rows: int) -> None:
        """This report is of the log part of a hybrid read of ``held``, whose file part had ``file_rows``."""
        self.mode, self.snapshot_id, self.file_rows = "hybrid", held.snapshot_id, file_rows


@dataclass
class LogRead:
    records: list[LogRecord]
    report: ReadReport
    field_types: dict[str, str]

    def to_arrow(self) -> pa.Table:
        return records_to_arrow(self.records, self.field_types)

    def rows(self) -> list[tuple[RowKind, dict[str, Any]]]:
        return [(r.kind, r.row) for r in self.records]


def records_to_arrow(records: Iterable[LogRecord], types: Mapping[str, str]) -> pa.Table:
    import pyarrow as pa

    rows = []
    for record in records:
        row = dict(record.row)
        row.update(
            {
                "_kind": record.kind.value,
                "_partition": record.partition,
                "_offset": record.offset,
                "_writer_id": record.meta.writer_id,
                "_epoch": record.meta.epoch,
                "_batch_id": record.meta.batch_id,
                "_record_type": record.meta.record_type.value,
            }
        )
        rows.append(row)
    if rows:
        return pa.Table.from_pylist(rows)
    return pa.table({name: pa.array([], type=pa.null()) for name in [*types, *META_COLUMNS]})


def read_file(handle: LogStoreTable, snapshot_id: int | None = None) -> pa.Table:
    """The table's rows at ``snapshot_id`` (default: the current snapshot)."""
    table = handle.load()
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def snapshot_positions(table: Table, snapshot_id: int | None) -> tuple[int | None, dict[int, int]]:
    """(snapshot id, log positions) of a snapshot: where the log continues after its data.

    Compaction snapshots carry no positions; the nearest LogStore ancestor's positions apply.
    """
    chosen, summary = _logstore_summary(table, snapshot_id)
    return chosen, positions_from_json(summary.get(S_POSITIONS))


@dataclass(frozen=True)
class SnapshotStart:
    """What the log part of a hybrid read needs of its snapshot: which commits it already holds.

    :param sequence: the snapshot's sequence number (0: no snapshot, it holds nothing).
    :param included: its ``logstore.log-included`` (None: written before that list).
    :param snapshot_id: the snapshot (the LogStore snapshot whose summary applies), for reports.
    :param positions: its ``logstore.log-positions``: where its log part starts each partition.
    """

    sequence: int
    included: frozenset[str] | None
    snapshot_id: int | None = None
    positions: tuple[tuple[int, int], ...] = ()

    def log_start(self, partitions: int) -> dict[int, int]:
        """Where the log part of a hybrid read of this snapshot starts, per partition (its positions)."""
        positions = dict(self.positions)
        return {p: positions.get(p, 0) for p in range(partitions)}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.snapshot_id,
            "sequence": self.sequence,
            "included": None if self.included is None else sorted(self.included),
            "positions": {str(p): o for p, o in self.positions},
        }

    @classmethod
    def from_json(cls, data: Any) -> SnapshotStart:
        """:raises OptionError: ``data`` is not what :meth:`to_json` writes."""
        try:
            included, snapshot_id = data["included"], data.get("id")
            return cls(
                _non_negative("sequence", data["sequence"]),
                None if included is None else frozenset(str(name) for name in included),
                None if snapshot_id is None else int(snapshot_id),
                StartPosition.at(data.get("positions") or {}).offsets,
            )
        except OptionError:
            raise
        except (KeyError, TypeError, AttributeError, ValueError):
            raise OptionError("from", f"the snapshot of a positions start is malformed: {data!r}") from None


def snapshot_start(table: Table, snapshot_id: int | None) -> SnapshotStart:
    chosen, summary = _logstore_summary(table, snapshot_id)
    snapshot = table.snapshot_by_id(chosen) if chosen is not None else None
    commit = CommitInfo.from_summary(summary)
    return SnapshotStart(
        snapshot.sequence_number or 0 if snapshot is not None else 0,
        commit.included if commit is not None else (frozenset() if chosen is None else None),
        chosen,
        tuple(sorted(positions_from_json(summary.get(S_POSITIONS)).items())),
    )


def _logstore_summary(table: Table, snapshot_id: int | None) -> tuple[int | None, Mapping[str, str]]:
    """(the snapshot chosen, the summary of it or of its nearest ancestor that carries positions)."""
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    if snapshot is None:
        if snapshot_id is not None:
            raise OptionError("snapshot", f"snapshot {snapshot_id} does not exist (expired?)")
        return None, {}
    chosen = snapshot.snapshot_id
    while True:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if S_POSITIONS in summary:
            return chosen, summary
        parent = snapshot.parent_snapshot_id
        if parent is None:  # the table's first snapshot: nothing was committed before it
            return chosen, {}
        snapshot = table.snapshot_by_id(parent)
        if snapshot is None:  # kept by a ref (a staging branch) while its ancestors expired
            raise OptionError(
                "snapshot",
                f"snapshot {chosen} has no log positions any more: it carries none (compaction) and its "
                f"ancestor {parent} expired; read a newer snapshot",
            )


class RecordRule(Protocol):
    """What keeps or drops a record in a record-by-record read: a :class:`ReadFilter`, or a follower's
    rule built on one (``read.follow.EventualAfterSnapshot``)."""

    def decide(self, meta: RecordMeta, partition: int, offset: int) -> tuple[bool, Decision | None]: ...


def filter_for(
    state: ControlState | None, consistent: bool, hybrid: SnapshotStart | None, start: Mapping[int, int]
) -> ReadFilter:
    """The one rule every reader of this package keeps records by, for a given control state: a batch
    read builds it once, a follower once per round from its current state.

    :param hybrid: what the snapshot holds when the read is a hybrid read's log part (else None).
    :param start: where the read starts each partition.
    """
    if hybrid is None:
        return ReadFilter(state, consistent)
    return ReadFilter(state, consistent, hybrid.sequence, dict(start), hybrid.included)


class LogReader:
    """One read of a table's log; see the module docstring for the modes."""

    def __init__(
        self,
        handle: LogStoreTable,
        *,
        options: Mapping[str, Any] | None = None,
        consistency: Consistency | str | None = None,
        changelog_mode: ChangelogMode | str | None = None,
        dead_letter: DeadLetterTopic | None = None,
        normalize: bool = False,
        scanner: str = "auto",
    ) -> None:
        jvm_scan.choose_scanner(scanner, 0)  # a bad name fails here
        self.scanner = scanner
        self.handle = handle
        self.table = handle.load()
        self.config = handle.config(self.table)
        resolved = resolve_read_options(self.config, options)
        self.consistency = parse_consistency(consistency) if consistency else resolved.consistency
        self.changelog_mode = ChangelogMode(changelog_mode) if changelog_mode else resolved.changelog_mode
        self.topic, _, _ = self.config.require_log()
        #: the Kafka client settings and the control topic, gathered once with ``config`` (a reader is
        #: one read, or one follower: its control topic's id is asked once, see ``ControlTopic.known_id``)
        side = handle.log_side_of(self.config)
        self.kafka_config, self.control = side.kafka_config, side.control
        self.field_types = field_types(self.table.schema())
        self.primary_key = primary_key_of(self.table.schema())
        self.dead_letter = dead_letter or DeadLetterTopic.for_log(
            self.kafka_config, self.topic, self.config.replication_factor
        )
        self.normalize = normalize
        if normalize and self.consistency is Consistency.CONSISTENT:
            raise OptionError(
                "normalize", "normalize applies to eventual reads; consistent reads are exactly-once"
            )

    def state(self) -> ControlState:
        return merged_state(self.table, self.control.read())

    def start_offsets(
        self, start: StartPosition | Mapping[int, int], cons: Any, bounds: Mapping[int, tuple[int, int]]
    ) -> dict[int, int]:
        if isinstance(start, Mapping):
            return {p: max(int(start.get(p, bounds[p][0])), bounds[p][0]) for p in bounds}
        if start.kind == "earliest":
            return {p: low for p, (low, _) in bounds.items()}
        if start.kind == "latest":
            return {p: high for p, (_, high) in bounds.items()}
        if start.kind == "timestamp":
            return kafka_client.offsets_for_time(
                cons, self.topic, self.config.partitions, int(start.value or 0)
            )
        if start.kind == "positions":
            return self._resume_offsets(dict(start.offsets), bounds)
        _, positions = snapshot_positions(self.table, start.value)
        return {p: max(positions.get(p, 0), bounds[p][0]) for p in bounds}

    def _resume_offsets(
        self, offsets: Mapping[int, int], bounds: Mapping[int, tuple[int, int]]
    ) -> dict[int, int]:
        """A resume position's offsets, checked against the log: a position below the log start means
        retention deleted records the reader never returned, one past the end a recreated topic.

        :raises OptionError: naming the partition and both offsets (never a silent skip or re-read).
        """
        for partition, (low, high) in sorted(bounds.items()):
            at = offsets.get(partition)
            if at is None:
                raise OptionError(
                    "from", f"the positions start has no offset for partition {partition} of '{self.topic}'"
                )
            if at < low:
                raise OptionError(
                    "from",
                    f"resume position {at} of partition {partition} of '{self.topic}' is below its log "
                    f"start {low}: retention deleted records {at}..{low - 1} before this reader returned "
                    "them; start from 'earliest' (or a snapshot) to go on without them",
                )
            if at > high:
                raise OptionError(
                    "from",
                    f"resume position {at} of partition {partition} of '{self.topic}' is past its end "
                    f"{high}: the log topic was recreated since; start from 'earliest' or a snapshot",
                )
        return {p: offsets[p] for p in bounds}

    def snapshot_start(self, start: StartPosition | Mapping[int, int]) -> SnapshotStart | None:
        """For a read that starts at a snapshot, what that snapshot holds (else None).

        Such a read is the log part of a hybrid read: it returns the changes the snapshot does not hold.
        A ``positions`` start that names a snapshot (a follower's resume position) continues one.
        """
        if isinstance(start, Mapping):
            return None
        if start.kind == "positions":
            return start.hybrid
        return snapshot_start(self.table, start.value) if start.kind == "snapshot" else None

    def read_filter(
        self, consistent: bool, hybrid: SnapshotStart | None, start: Mapping[int, int]
    ) -> ReadFilter:
        """The rule this read keeps records by (the control state is read only when it is needed)."""
        state = self.state() if consistent or hybrid is not None else None
        return filter_for(state, consistent, hybrid, start)

    def read(
        self,
        start: StartPosition | Mapping[int, int] | str = "earliest",
        end: Mapping[int, int] | None = None,
        limit: int | None = None,
        *,
        hybrid: SnapshotStart | None = None,
    ) -> LogRead:
        """Read from ``start`` up to ``end`` (default: the log end now) into a list.

        :param hybrid: the log part of a hybrid read of this snapshot (``start`` is then its
            positions): see ``core.visibility.hybrid_keeps``.
        """
        records: list[LogRecord] = []
        report = self.new_report()
        stream = self.iterate(start, end, report=report, hybrid=hybrid)
        try:
            for record in stream:
                records.append(record)
                if limit is not None and len(records) >= limit:
                    break
        finally:
            stream.close()
        report.returned = len(records)
        return LogRead(records, report, self.field_types)

    def iterate(
        self,
        start: StartPosition | Mapping[int, int] | str = "earliest",
        end: Mapping[int, int] | None = None,
        *,
        report: ReadReport | None = None,
        hybrid: SnapshotStart | None = None,
    ) -> Generator[LogRecord, None, None]:
        """Stream the records from ``start`` to ``end`` one by one, without keeping them (constant
        memory: one chunk of :data:`CHUNK_RECORDS` at a time)."""
        report = report or self.new_report()
        normalizer = Normalizer() if self.normalize else None
        chunks = self._chunks(start, end, report, hybrid)
        try:
            for messages, chunk in chunks:
                for record in _chunk_records(messages, chunk, self.field_types):
                    yield from self._emit(record, normalizer, report)
        finally:
            chunks.close()
            if normalizer is not None:
                report.counted(normalizer)

    def iterate_batches(
        self,
        start: StartPosition | Mapping[int, int] | str = "earliest",
        end: Mapping[int, int] | None = None,
        *,
        report: ReadReport | None = None,
        hybrid: SnapshotStart | None = None,
        limit: int | None = None,
    ) -> Iterator[pa.Table]:
        """Stream the records from ``start`` to ``end`` as Arrow tables (the table's columns, then
        :data:`META_COLUMNS`), one per chunk of at most :data:`CHUNK_RECORDS` scanned records: memory
        holds one chunk, whatever the number of records. ``report.returned`` counts the rows yielded.
        """
        report = report or self.new_report()
        normalizer = Normalizer() if self.normalize else None
        chunks = self._chunks(start, end, report, hybrid, columns=normalizer is None)
        try:
            for messages, chunk in chunks:
                if normalizer is not None:  # keyed state, record by record (see BENCHMARKS.md)
                    records = [
                        output
                        for record in _chunk_records(messages, chunk, self.field_types)
                        for output in self._emit(record, normalizer, report)
                    ]
                    table = records_to_arrow(records, self.field_types) if records else None
                else:
                    table = chunk.rows
                    if self.changelog_mode is ChangelogMode.APPEND_ONLY:
                        table = self._append_only(table, report)
                if table is None or table.num_rows == 0:
                    continue
                if limit is not None and report.returned + table.num_rows >= limit:
                    table = table.slice(0, limit - report.returned)
                    report.returned += table.num_rows
                    if table.num_rows:
                        yield table
                    return
                report.returned += table.num_rows
                yield table
        finally:
            chunks.close()
            if normalizer is not None:
                report.counted(normalizer)

    @staticmethod
    def _append_only(table: pa.Table, report: ReadReport) -> pa.Table:
        """Only the ``+I`` rows; the others counted by kind in ``report.skipped_kinds``."""
        import pyarrow.compute as pc

        inserts = pc.equal(table.column("_kind"), RowKind.INSERT.value)
        skipped = table.filter(pc.invert(inserts)).column("_kind")
        for entry in pc.value_counts(skipped).to_pylist():
            kind, count = str(entry["values"]), int(entry["counts"])
            report.skipped_kinds[kind] = report.skipped_kinds.get(kind, 0) + count
        return table.filter(inserts)

    def new_report(self) -> ReadReport:
        return ReadReport(str(self.handle.name), "log", self.consistency.value, self.changelog_mode.value)

    def _chunks(
        self,
        start: StartPosition | Mapping[int, int] | str,
        end: Mapping[int, int] | None,
        report: ReadReport,
        hybrid: SnapshotStart | None,
        *,
        columns: bool = False,
    ) -> Generator[tuple[list[Any], DecodedChunk], None, None]:
        """The read's records, decoded and classified a chunk at a time; dead letters sent on the way.

        :param columns: the caller needs only the decoded rows (no messages): a read of at least
            :data:`~airflow_logstore.log.jvm_scan.JVM_MIN_RECORDS` records may then come from the JVM
            scan (``scanner``), and the messages yielded are empty.
        """
        start = StartPosition.of(start)
        report.dead_letter_topic = self.dead_letter.topic
        cons = kafka_client.consumer(self.kafka_config)
        try:
            bounds = kafka_client.partition_offsets(cons, self.topic, self.config.partitions)
            first = self.start_offsets(start, cons, bounds)
            last = (
                {p: high for p, (_, high) in bounds.items()}
                if end is None
                else {p: min(int(end.get(p, bounds[p][1])), bounds[p][1]) for p in bounds}
            )
            consistent = self.consistency is Consistency.CONSISTENT
            read_filter = self.read_filter(consistent, hybrid or self.snapshot_start(start), first)
            state = read_filter.state
            report.log_end = {str(p): o for p, o in sorted(last.items())}
            if state is not None and consistent:
                visible = visible_end(last, state.watermark)
                report.not_yet_visible = sum(max(0, last[p] - max(visible[p], first[p])) for p in last)
                report.watermark = {str(p): o for p, o in sorted(state.watermark.items())}
                last = visible
            report.start = {str(p): o for p, o in sorted(first.items())}
            report.end = {str(p): o for p, o in sorted(last.items())}
            size = sum(max(0, last[p] - first[p]) for p in last)
            scanner = jvm_scan.choose_scanner(self.scanner, size) if columns else "librdkafka"
            report.scanner = scanner
            if scanner == "jvm":
                decoded = self._jvm_chunks(first, last, read_filter)
            else:
                decoded = self._librdkafka_chunks(cons, first, last, read_filter)
            try:
                for messages, chunk, scanned in decoded:
                    report.scanned += scanned
                    for decision, count in chunk.by_decision.items():
                        report.by_decision[decision] = report.by_decision.get(decision, 0) + count
                    for message, reason in chunk.dead:
                        self.dead_letter.add(self.topic, message, reason)
                    yield messages, chunk
            finally:
                decoded.close()  # a read stopped early (a limit) stops the JVM at once
        finally:
            cons.close()
            self.dead_letter.flush()
            report.dead_lettered = self.dead_letter.count

    def _librdkafka_chunks(
        self, cons: Any, first: Mapping[int, int], last: Mapping[int, int], read_filter: ReadFilter
    ) -> Generator[tuple[list[Any], DecodedChunk, int], None, None]:
        for messages in kafka_client.scan(cons, self.topic, first, last, batch_size=CHUNK_RECORDS):
            yield messages, decode_chunk(messages, read_filter, self.field_types), len(messages)

    def _jvm_chunks(
        self, first: Mapping[int, int], last: Mapping[int, int], read_filter: ReadFilter
    ) -> Generator[tuple[list[Any], DecodedChunk, int], None, None]:
        """The records as columns from the JVM scan (every record sent: no dense spans)."""
        scan = jvm_scan.JvmScan(self.kafka_config, self.topic, first, last, frame_records=CHUNK_RECORDS)
        for chunk in scan.chunks():
            yield [], decode_columns(chunk, scan.header_sets, read_filter, self.field_types), len(chunk)

    def _decode(self, message: Any, read_filter: RecordRule, report: ReadReport) -> LogRecord | None:
        """One record, decoded and classified on its own: the follower's path, and the reference the
        bulk path (``read.batches``) is tested against."""
        try:
            meta = decode_headers(message.headers())
            keep, decision = read_filter.decide(meta, message.partition(), message.offset())
            if decision is not None:
                report.by_decision[decision.value] = report.by_decision.get(decision.value, 0) + 1
            if not keep:
                return None
            kind, raw_row = decode_value(message.value())
            row = typed_row(raw_row, self.field_types)
        except RecordDecodeError as exc:
            self.dead_letter.add(self.topic, message, str(exc))
            return None
        return LogRecord(
            message.partition(),
            message.offset(),
            message.timestamp()[1],
            message.key(),
            kind,
            row,
            meta,
            decision,
        )

    def _emit(self, record: LogRecord, normalizer: Normalizer | None, report: ReadReport) -> list[LogRecord]:
        outputs = [record]
        if normalizer is not None:
            key = record.key if record.key is not None else (record.partition, record.offset)
            outputs = [
                LogRecord(
                    record.partition,
                    record.offset,
                    record.timestamp_ms,
                    record.key,
                    kind,
                    row,
                    record.meta,
                    record.decision,
                )
                for kind, row in normalizer.feed(key, record.kind, record.row)
            ]
        if self.changelog_mode is ChangelogMode.APPEND_ONLY:
            kept = []
            for output in outputs:
                if output.kind is RowKind.INSERT:
                    kept.append(output)
                else:
                    report.skipped_kinds[output.kind.value] = (
                        report.skipped_kinds.get(output.kind.value, 0) + 1
                    )
            return kept
        return outputs


def _chunk_records(messages: list[Any], chunk: DecodedChunk, types: Mapping[str, str]) -> Iterator[LogRecord]:
    """The rows of a decoded chunk as LogRecords (for callers that want Python objects)."""
    rows = chunk.rows.select(list(types)).to_pylist()
    kinds = chunk.rows.column("_kind").to_pylist()
    for i, row in enumerate(rows):
        message = messages[chunk.positions[i]]
        yield LogRecord(
            message.partition(),
            message.offset(),
            message.timestamp()[1],
            message.key(),
            RowKind(kinds[i]),
            row,
            chunk.header_sets[chunk.metas[i]],  # type: ignore[arg-type]  # kept rows have headers
            chunk.decision(i),
        )


def read_log(
    handle: LogStoreTable,
    start: StartPosition | Mapping[int, int] | str = "earliest",
    end: Mapping[int, int] | None = None,
    **options: Any,
) -> LogRead:
    limit = options.pop("limit", None)
    return LogReader(handle, **options).read(start, end, limit)


@dataclass
class HybridRead:
    file_rows: pa.Table
    log: LogRead
    snapshot_id: int | None
    positions: dict[int, int]


@dataclass(frozen=True)
class HybridPlan:
    """A hybrid read, fixed before either part is read: the snapshot whose rows the file part reads, and
    where the log part starts, exactly that snapshot's log positions, so that the two parts neither miss
    nor repeat a change; the log part also leaves out the commits the snapshot already holds
    (``held``: ``core.visibility.hybrid_keeps``). The one plan of every hybrid read: :func:`read_hybrid`,
    :func:`run_read` and the Spark read job (``read.read_job``) each read its two parts their own way.

    :param held: the snapshot and what it holds (its id None: the table has no snapshot yet).
    :param log_start: per partition, the first offset of the log part.
    """

    held: SnapshotStart
    log_start: dict[int, int]

    @property
    def snapshot_id(self) -> int | None:
        """The snapshot the file part reads (None: there is none, the file part is empty)."""
        return self.held.snapshot_id

    def positions(self) -> dict[int, int]:
        """The snapshot's log positions, as its summary records them."""
        return dict(self.held.positions)


def plan_hybrid(reader: LogReader, snapshot_id: int | None) -> HybridPlan:
    """Step 1 of a hybrid read: fix the snapshot (``snapshot_id``, else the current one of the table as
    ``reader`` loaded it) and where the log part starts."""
    held = snapshot_start(reader.table, snapshot_id)
    return HybridPlan(held, held.log_start(reader.config.partitions))


def hybrid_file_scan(reader: LogReader, plan: HybridPlan) -> DataScan:
    """Step 2: the file part, a scan of exactly the planned snapshot (of the table the plan was made of:
    with no snapshot id, its current snapshot, which is none, so the scan is empty)."""
    return reader.table.scan(snapshot_id=plan.snapshot_id)


def hybrid_log_batches(
    reader: LogReader, plan: HybridPlan, report: ReadReport, limit: int | None = None
) -> Iterator[pa.Table]:
    """Step 3: the log part, from exactly the snapshot's positions, without the changes it holds."""
    return reader.iterate_batches(plan.log_start, report=report, hybrid=plan.held, limit=limit)


def read_hybrid(handle: LogStoreTable, snapshot_id: int | None = None, **options: Any) -> HybridRead:
    """A snapshot's rows, then the log from that snapshot's positions (no gap, no overlap)."""
    reader = LogReader(handle, **options)
    plan = plan_hybrid(reader, snapshot_id)
    file_rows = hybrid_file_scan(reader, plan).to_arrow()
    log_read = reader.read(plan.log_start, hybrid=plan.held)
    log_read.report.of_hybrid(plan.held, file_rows.num_rows)
    return HybridRead(file_rows, log_read, plan.snapshot_id, plan.positions())


def run_read(
    handle: LogStoreTable,
    *,
    mode: str,
    consistency: str | None = None,
    changelog_mode: str | None = None,
    start: StartPosition | str = "earliest",
    end: Mapping[int, int] | None = None,
    snapshot_id: int | None = None,
    options: Mapping[str, Any] | None = None,
    normalize: bool = False,
    output_path: str | None = None,
    output: Any = None,
    limit: int | None = None,
    scanner: str = "auto",
) -> dict[str, Any]:
    """One read in any mode; rows go as JSON lines to ``output_path`` or the ``output`` stream.

    ``limit``: at most this many rows (0: none), in every mode (a hybrid read's file rows first).

    Rows are written as they are read, one Arrow batch at a time (a chunk of the log, a batch of the
    snapshot's files): memory does not grow with the number of rows.
    Returns a summary (counts and the read report) — what the operator pushes to XCom.

    :param end: a log read's end per partition (exclusive; default: the log's end when it starts)
    """
    sink = open(output_path, "w", encoding="utf-8") if output_path else output  # noqa: SIM115
    try:
        summary: dict[str, Any] = {"table": str(handle.name), "mode": mode}
        if mode == "file":
            rows = _file_batches(handle.load().scan(snapshot_id=snapshot_id), limit)
            summary["rows"] = _write_rows(rows, sink)
            summary["snapshot_id"] = snapshot_id or _current_snapshot_id(handle)
        elif mode in ("log", "hybrid"):
            reader = LogReader(
                handle,
                consistency=consistency,
                changelog_mode=changelog_mode,
                options=options,
                normalize=normalize,
                scanner=scanner,
            )
            report = reader.new_report()
            if mode == "log":
                summary["records"] = _write_rows(
                    reader.iterate_batches(start, end, report=report, limit=limit), sink
                )
            else:
                summary.update(_write_hybrid(reader, snapshot_id, report, sink, limit))
            summary["report"] = report.to_dict()
        else:
            raise OptionError("mode", f"'{mode}' is not file, log or hybrid")
        if output_path:
            summary["output_path"] = output_path
        return summary
    finally:
        if output_path and sink is not None:
            sink.close()


def held_back(handle: LogStoreTable, report: ReadReport) -> dict[str, int]:
    """Who wrote the records a consistent read held back (from ``report.end`` to ``report.log_end``), by
    their ``writer-id`` header: ``reconciliation``, the reconciler's reversals written after the last
    publish (a publish decides them), and ``data``, writers' records whose batch is not published or
    not committed yet. A scan of those records' headers only."""
    counts = {"reconciliation": 0, "data": 0}
    start = {int(p): o for p, o in report.end.items()}
    end = {int(p): o for p, o in report.log_end.items()}
    if not any(end[p] > start.get(p, end[p]) for p in end):
        return counts
    side = handle.log_side()
    reconciler = RECONCILER_WRITER_ID.encode()
    cons = kafka_client.consumer(side.kafka_config)
    try:
        for messages in kafka_client.scan(cons, side.topic, start, end):
            for message in messages:
                writer = dict(message.headers() or []).get(H_WRITER)
                counts["reconciliation" if writer == reconciler else "data"] += 1
    finally:
        cons.close()
    return counts


def _write_hybrid(
    reader: LogReader, snapshot_id: int | None, report: ReadReport, sink: Any, limit: int | None = None
) -> dict[str, Any]:
    """A hybrid read as JSON lines: the snapshot's rows (``_source`` file), then its log part (log); at
    most ``limit`` rows in all, the file rows first."""
    plan = plan_hybrid(reader, snapshot_id)
    files = _file_batches(hybrid_file_scan(reader, plan), limit)
    file_rows = _write_rows(files, sink, {"_kind": "+I", "_source": "file"})
    report.of_hybrid(plan.held, file_rows)
    log_part = hybrid_log_batches(reader, plan, report, None if limit is None else limit - file_rows)
    return {
        "file_rows": file_rows,
        "log_records": _write_rows(log_part, sink, {"_source": "log"}),
        "snapshot_id": plan.snapshot_id,
        "positions": {str(p): o for p, o in plan.positions().items()},
    }


def _file_batches(scan: DataScan, limit: int | None) -> Iterator[pa.Table]:
    """A scan's rows as Arrow tables, one file batch at a time (at most ``limit`` rows)."""
    import pyarrow as pa

    returned = 0
    if limit == 0:
        return
    for batch in scan.to_arrow_batch_reader():
        if limit is not None and returned + batch.num_rows >= limit:
            yield pa.Table.from_batches([batch.slice(0, limit - returned)])
            return
        returned += batch.num_rows
        yield pa.Table.from_batches([batch])


def _write_rows(tables: Iterable[pa.Table], sink: Any, extra: Mapping[str, Any] | None = None) -> int:
    """Write each table's rows as JSON lines (``extra`` columns appended to each) and count them."""
    count = 0
    for table in tables:
        count += table.num_rows
        if sink is not None and table.num_rows:
            sink.write(_json_lines(table, extra or {}))
    return count


def _json_lines(table: pa.Table, extra: Mapping[str, Any]) -> str:
    from airflow_logstore.read.jsonlines import json_lines

    return json_lines(table, extra)


def _current_snapshot_id(handle: LogStoreTable) -> int | None:
    snapshot = handle.load().current_snapshot()
    return snapshot.snapshot_id if snapshot else None
