"""What the ``logstore`` Spark data source reads, without Spark: options, offsets, slices and their rows.

``spark.read.format("logstore")``, ``spark.readStream.format("logstore")``
(:mod:`airflow_logstore.read.spark_source`) are thin: the driver plans *slices* here, and each Spark
task reads one slice here, in a Python worker, as Arrow tables. Nothing in this module decides on its own
which records a read keeps: a slice carries what the project's one rule needs (the control state, the
consistency, the snapshot a hybrid read continues, where the read started), and the task builds that
rule with :func:`~airflow_logstore.read.reader.filter_for` (a stream from a snapshot that is eventual:
the follower's :class:`~airflow_logstore.read.follow.EventualAfterSnapshot`) and decodes with the bulk
path the Python reader uses (``read.batches``).

**Batch reads** are the Python reader's reads, in slices of whole log partitions (from the read's start
to the log end; a consistent read to the visibility watermark; :func:`slice_count` of them), plus, for
``hybrid``, slices of the snapshot's data files.

**Streams.** An offset is plain JSON (:class:`StreamOffset`): per log partition the first offset not
handed out, as a follower's resume position is (a stream's offset is one: ``follow(reader,
start=<offset>)`` takes it), plus where the stream's log part started (``origin``), the snapshot it
continues and, for ``hybrid``, whether the snapshot's rows were handed out. A consistent stream's
offsets never pass the visibility watermark (each micro-batch ends at it, or before it with
``maxRecordsPerTrigger``); an eventual one's follow the log end. The driver keeps the control state
current with the follower's :class:`~airflow_logstore.read.follow.ControlFollower` and ships it with
each slice; a task reads its slice's records *after* that state was read, so every record below the
watermark is decided by it (invariant S1 in docs/PROTOCOL.md); the follower's hold rule is checked
all the same, and a record it would hold fails the task instead of being skipped.

A micro-batch replayed after a restart reads the same offsets (micro-batch 0 from its end's origin:
:func:`replayed_start`) with a state at least as new: decisions only move from undecided to decided, so
it returns the same records, and a slice hands out its partitions one after the other, so in the same
order (S2; docs/PROTOCOL.md says why the offsets pin no control state). Later copies of reconciler
records are dropped across micro-batches too: a task whose slice holds reconciler records first reads
back, from the stream's origin or the record each names (every copy comes after it), what the stream
handed out before, and feeds it to its rule (S3).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import RecordMeta, RecordType, decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import (
    READ_OPTION_KEYS,
    ChangelogMode,
    Consistency,
    parse_consistency,
    typed_read_options,
)
from airflow_logstore.core.visibility import Decision, ReadFilter
from airflow_logstore.exceptions import (
    IdentifierError,
    OptionError,
    RecordDecodeError,
    StreamReadError,
    TableNotFoundError,
    TablePropertyError,
)
from airflow_logstore.log import jvm_scan, kafka_client
from airflow_logstore.log.deadletter import DeadLetterTopic
from airflow_logstore.pause import pause_point
from airflow_logstore.read.batches import CHUNK_RECORDS, META_COLUMNS, decode_chunk, decode_columns
from airflow_logstore.read.follow import ControlFollower, EventualAfterSnapshot
from airflow_logstore.read.reader import (
    LogReader,
    ReadReport,
    RecordRule,
    SnapshotStart,
    StartPosition,
    filter_for,
    plan_hybrid,
)
from airflow_logstore.table.catalog import CatalogSpec
from airflow_logstore.table.tables import LogStoreTable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

log = logging.getLogger(__name__)

#: The options of the source (case-insensitive, as Spark passes them), besides the read hints of
#: ``core.properties.READ_OPTION_KEYS`` and the connection settings (``catalog.*``, ``kafka.*``).
OPTIONS = ("table", "path", "mode", "consistency", "changelog-mode", "startingposition",
           "maxrecordspertrigger", "minpartitions", "scanner")  # fmt: skip
#: Prefixes of the connection settings :func:`airflow_logstore.read.spark_source.logstore_options` writes.
SETTING_PREFIXES = ("catalog.", "kafka.")
MODES = ("log", "hybrid")
#: A hybrid read's file rows carry this in ``_source``; its log rows ``log``.
SOURCE_COLUMN = "_source"
#: The version of :class:`StreamOffset`'s JSON; every later version of the package reads version 1.
OFFSET_VERSION = 1
#: How often a stream whose positions stand still still hands Spark a new offset, so that the lag it
#: reports (``log_end``, ``watermark``) is current in the query's progress (each is an empty micro-batch).
LAG_REFRESH_S = 10.0


# --- options ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, checked (every problem an :class:`OptionError` naming the option).

    :param catalog: the Iceberg catalog; ``kafka_extra``: librdkafka settings (security) for the log.
    """

    table: str
    mode: str
    consistency: Consistency | None
    changelog_mode: ChangelogMode | None
    hints: dict[str, str]
    start: str | None
    max_records: int | None
    scanner: str
    catalog: CatalogSpec
    kafka_extra: dict[str, Any] = field(default_factory=dict)
    min_partitions: int | None = None

    @classmethod
    def parse(
        cls, options: Mapping[str, str], catalog: CatalogSpec, kafka_extra: Mapping[str, Any]
    ) -> SourceOptions:
        """Check ``options`` (keys lower-cased) without touching the catalog or Kafka."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        unknown = sorted(
            key
            for key in opts
            if key not in OPTIONS and key not in READ_OPTION_KEYS and not key.startswith(SETTING_PREFIXES)
        )
        if unknown:
            raise OptionError(
                unknown[0],
                "is not an option of the 'logstore' source (options: table, mode, consistency, "
                "changelog-mode, startingPosition, maxRecordsPerTrigger, minPartitions, scanner, and the "
                "read hints "
                f"{', '.join(READ_OPTION_KEYS)})",
            )
        table = opts.get("table") or opts.get("path")
        if not table:
            raise OptionError(
                "table", "missing: name the table, .option('table', 'ns.name') or .load('ns.name')"
            )
        mode = opts.get("mode", "log").strip().lower()
        if mode == "file":
            raise OptionError(
                "mode", f"file reads are plain Iceberg reads: spark.table('{catalog.name}.{table}')"
            )
        if mode not in MODES:
            raise OptionError("mode", f"'{opts['mode']}' is not log or hybrid")
        consistency = None
        if "consistency" in opts:
            consistency = parse_consistency(opts["consistency"])
        changelog = None
        if "changelog-mode" in opts:
            try:
                changelog = ChangelogMode(opts["changelog-mode"].strip().lower())
            except ValueError:
                raise OptionError(
                    "changelog-mode", f"'{opts['changelog-mode']}' is not all-kinds or append-only"
                ) from None
        start = opts.get("startingposition")
        parse_start(start, mode)  # a malformed position fails here, before anything is read
        max_records = _positive(opts, "maxRecordsPerTrigger")
        min_partitions = _positive(opts, "minPartitions")
        scanner = opts.get("scanner", "auto").strip().lower()
        try:
            jvm_scan.choose_scanner(scanner, 0)
        except OptionError as exc:
            raise OptionError("scanner", str(exc).split(": ", 1)[-1]) from None
        hints = {key: value for key, value in opts.items() if key in READ_OPTION_KEYS}
        try:
            typed_read_options(hints)  # a bad value names its hint here, not the table later
        except TablePropertyError as exc:
            raise OptionError(exc.key, str(exc).split(": ", 1)[-1]) from None
        return cls(
            table,
            mode,
            consistency,
            changelog,
            hints,
            start,
            max_records,
            scanner,
            catalog,
            dict(kafka_extra),
            min_partitions,
        )

    def handle(self) -> LogStoreTable:
        try:
            return LogStoreTable.open(self.table, self.catalog, self.kafka_extra)
        except IdentifierError as exc:
            raise OptionError("table", str(exc)) from None

    def open_reader(self) -> LogReader:
        """A reader of the table (loaded now): a table that does not exist, or has no log, names ``table``."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        handle = self.handle()
        try:
            return LogReader(
                handle,
                options=self.hints,
                consistency=self.consistency,
                changelog_mode=self.changelog_mode,
                scanner=self.scanner,
            )
        except (NoSuchTableError, NoSuchNamespaceError, TableNotFoundError):
            raise OptionError(
                "table", f"table '{handle.name}' does not exist in catalog {self.catalog.describe()}"
            ) from None

    @property
    def consistent(self) -> bool:
        return self.consistency is Consistency.CONSISTENT


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    """The option ``name`` (looked up lower-cased) as a positive whole number, None when not given."""
    if name.lower() not in opts:
        return None
    text = opts[name.lower()].strip()
    if not text.isdigit() or int(text) < 1:
        raise OptionError(name, f"'{text}' is not a positive whole number")
    return int(text)


def parse_start(text: str | None, mode: str) -> StartPosition:
    """``startingPosition`` as a read takes it; a hybrid read starts at a snapshot (default: the current)."""
    try:
        start = StartPosition.parse(text)
    except OptionError as exc:
        raise OptionError("startingPosition", str(exc).split(": ", 1)[-1]) from None
    if mode == "hybrid" and text is not None and start.kind != "snapshot":
        raise OptionError(
            "startingPosition",
            f"a hybrid read starts at a snapshot: 'snapshot:<id>' (or no option), not '{text}'",
        )
    return start


# --- the rule a slice keeps records by -----------------------------------------------------------------


@dataclass(frozen=True)
class KeepRule:
    """What a task needs to build the read's rule: never a rule of its own.

    :param state: the control state (None: an eventual log read, which needs none).
    :param hybrid: the snapshot whose log part the read is (a hybrid read, or a start at a snapshot).
    :param origin: per partition where the read's log part started.
    :param follows: a stream: an eventual one from a snapshot keeps records as a follower does.
    """

    state: ControlState | None
    consistent: bool
    hybrid: SnapshotStart | None
    origin: dict[int, int]
    follows: bool = False

    def build(self) -> RecordRule:
        rule = filter_for(self.state, self.consistent, self.hybrid, self.origin)
        if self.follows and not self.consistent and self.hybrid is not None:
            return EventualAfterSnapshot(rule, dict(self.hybrid.positions))
        return rule


class _OneByOne:
    """``decide_many`` for a rule that only decides one record at a time (the follower's), calling its
    ``decide`` for every record in order: what ``read.batches`` needs of a rule."""

    def __init__(self, rule: RecordRule) -> None:
        self.rule = rule

    def decide_many(
        self, metas: Sequence[RecordMeta], codes: np.ndarray, partitions: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[Decision | None]]:
        import numpy as np

        keep = np.zeros(len(codes), dtype=bool)
        index = np.zeros(len(codes), dtype=np.int64)
        decisions: list[Decision | None] = []
        seen: dict[Decision | None, int] = {}
        for i, (code, partition, offset) in enumerate(
            zip(codes.tolist(), partitions.tolist(), offsets.tolist(), strict=True)
        ):
            kept, decision = self.rule.decide(metas[code], partition, offset)
            keep[i] = kept
            if decision not in seen:
                seen[decision] = len(decisions)
                decisions.append(decision)
            index[i] = seen[decision]
        return keep, index, decisions


# --- slices: what one Spark task reads ------------------------------------------------------------------

#: A slice of the log holds at least this many records (unless the read holds fewer): a task's fixed cost
#: (a Python worker's turn, the JVM scan's start, about 1 s) is then at most about half of its time. A
#: read of 1M records on 2 cores: one slice 3.2-4.9 s, three slices (one per partition) 3.9-7.9 s
#: (BENCHMARKS.md). ``minPartitions`` asks for more tasks.
SLICE_RECORDS = 1_000_000


@dataclass(frozen=True)
class LogSlice:
    """The records ``[first, last)`` of some log partitions, kept by ``rule``.

    :param ranges: (partition, first, last) of each partition the slice reads.
    :param lookback: a stream's slice: read back as far as the slice's reconciler records need, from the
        stream's origin on (their earlier copies were handed out already, S3).
    :param source_column: add ``_source`` = ``log`` (the log part of a hybrid read).
    """

    topic: str
    kafka_config: dict[str, Any]
    ranges: tuple[tuple[int, int, int], ...]
    field_types: dict[str, str]
    rule: KeepRule
    changelog_mode: ChangelogMode
    replication_factor: int | None = None
    scanner: str = "auto"
    lookback: bool = False
    source_column: bool = False

    @property
    def records(self) -> int:
        return sum(last - first for _, first, last in self.ranges)


@dataclass(frozen=True)
class FileSlice:
    """Some data files of a snapshot (a hybrid read's rows), read with pyiceberg."""

    catalog: CatalogSpec
    table: str
    snapshot_id: int
    files: tuple[str, ...]
    field_types: dict[str, str]


Slice = LogSlice | FileSlice


def output_columns(field_types: Mapping[str, str], hybrid: bool) -> list[str]:
    """The columns every slice's tables have, in order: the table's, :data:`META_COLUMNS`, ``_source``."""
    return [*field_types, *META_COLUMNS, *([SOURCE_COLUMN] if hybrid else [])]


def read_slice(piece: Slice) -> Iterator[pa.Table]:
    """The rows of one slice as Arrow tables (the columns of :func:`output_columns`)."""
    if isinstance(piece, FileSlice):
        yield from _read_files(piece)
    else:
        yield from _read_log(piece)


def _read_log(piece: LogSlice) -> Iterator[pa.Table]:
    import pyarrow as pa

    rule = piece.rule.build()
    bulk: Any = rule if isinstance(rule, ReadFilter) else _OneByOne(rule)
    dead = DeadLetterTopic.for_log(piece.kafka_config, piece.topic, piece.replication_factor)
    cons = kafka_client.consumer(piece.kafka_config, **{"auto.offset.reset": "error"})
    lookback = _Lookback(piece, rule) if piece.lookback else None
    try:
        _check_ranges(cons, piece)
        report = ReadReport(piece.topic, "log", "", piece.changelog_mode.value)
        paused = False
        for chunk in _chunks(cons, piece, bulk, lookback):
            if piece.rule.consistent:
                _check_decided(chunk.by_decision, piece)
            for message, reason in chunk.dead:
                dead.add(piece.topic, message, reason)
            rows = chunk.rows
            if piece.changelog_mode is ChangelogMode.APPEND_ONLY:
                rows = LogReader._append_only(rows, report)
            if piece.source_column:
                rows = rows.append_column(SOURCE_COLUMN, pa.array(["log"] * rows.num_rows, pa.string()))
            if not paused:
                pause_point("source:slice-read")  # a task holds records it has not handed to Spark yet
                paused = True
            if rows.num_rows:
                yield rows
    finally:
        cons.close()
        if lookback is not None:
            lookback.close()
        dead.flush()


def _chunks(cons: Any, piece: LogSlice, bulk: Any, lookback: _Lookback | None) -> Iterator[Any]:
    """The slice's records decoded a chunk at a time (the JVM scan for large slices, as the reader does),
    handed out one partition after the other (:class:`_PartitionOrder`): a slice's rows come in
    (partition, offset) order, so a replayed micro-batch hands Spark the same rows in the same order (S2)."""
    first = {p: low for p, low, _ in piece.ranges}
    last = {p: high for p, _, high in piece.ranges}
    order = _PartitionOrder(piece.ranges)
    if lookback is None and jvm_scan.choose_scanner(piece.scanner, piece.records) == "jvm":
        scan = jvm_scan.JvmScan(piece.kafka_config, piece.topic, first, last, frame_records=CHUNK_RECORDS)
        for columns in scan.chunks():  # decoded at once: a chunk's header set ids hold in its generation
            chunk = decode_columns(columns, scan.header_sets, bulk, piece.field_types)
            reached = int(columns.offsets[-1]) if len(columns.offsets) else -1
            yield from order.add(columns.partition, reached, chunk)
        yield from order.rest()
        return

    def decoded(messages: list[Any]) -> Any:
        if lookback is not None:
            lookback.cover(messages)
        return decode_chunk(messages, bulk, piece.field_types)

    for messages in kafka_client.scan(cons, piece.topic, first, last, batch_size=CHUNK_RECORDS):
        for partition, reached, part in _by_partition(messages):
            yield from map(decoded, order.add(partition, reached, part))
    yield from map(decoded, order.rest())


class _PartitionOrder:
    """Hands out the pieces of a scan of several partitions one partition after the other (ascending),
    each partition's pieces in the order they came.

    One scan of all a slice's partitions reads them at once (a scan per partition waits for the broker's
    long poll of the one before: about 0.5 s each), but it interleaves them as the broker's fetches
    deliver, differently each time. A partition's pieces are held until every lower partition reached its
    end (a piece at its last offset) or the scan ended; the consumer fetches partitions in turn, so what
    is held stays about as large as what the lower partitions still had to read.
    """

    def __init__(self, ranges: Sequence[tuple[int, int, int]]) -> None:
        self.order = sorted(p for p, _, _ in ranges)
        self.last = {p: high for p, _, high in ranges}
        self.held: dict[int, list[Any]] = {p: [] for p in self.order}
        self.done: set[int] = set()
        self.at = 0  # index in ``order`` of the partition handed out now

    def add(self, partition: int, reached: int, piece: Any) -> list[Any]:
        """Take ``piece`` of ``partition`` (its last offset ``reached``); return the pieces due now."""
        self.held[partition].append(piece)
        if reached >= self.last[partition] - 1:
            self.done.add(partition)
        return self._due()

    def rest(self) -> list[Any]:
        """The scan ended: every partition reached its end (what is left below it is gone)."""
        self.done.update(self.order)
        return self._due()

    def _due(self) -> list[Any]:
        due: list[Any] = []
        while self.at < len(self.order):
            partition = self.order[self.at]
            due.extend(self.held[partition])
            self.held[partition] = []
            if partition not in self.done:
                break
            self.at += 1
        return due


def _by_partition(messages: list[Any]) -> list[tuple[int, int, list[Any]]]:
    """(partition, last offset, its messages) for each partition of a scan's batch, in offset order."""
    import numpy as np

    kind = type(messages[0])
    partitions = np.fromiter(map(kind.partition, messages), np.int64, len(messages))
    if (partitions == partitions[0]).all():
        return [(int(partitions[0]), messages[-1].offset(), messages)]
    parts = []
    for partition in np.unique(partitions).tolist():
        part = [messages[i] for i in np.flatnonzero(partitions == partition).tolist()]
        parts.append((partition, part[-1].offset(), part))
    return parts


def _check_ranges(cons: Any, piece: LogSlice) -> None:
    """A slice whose records retention deleted, or past a recreated topic's end, cannot be read exactly."""
    bounds = kafka_client.partition_offsets(cons, piece.topic, max(p for p, _, _ in piece.ranges) + 1)
    for partition, first, last in piece.ranges:
        low, high = bounds[partition]
        if first < low:
            raise StreamReadError(
                f"records {first}..{low - 1} of partition {partition} of '{piece.topic}' were deleted by "
                "retention before this read returned them; read again from a snapshot (mode 'hybrid') or "
                "'earliest', with a new checkpoint"
            )
        if last > high:
            raise StreamReadError(
                f"partition {partition} of '{piece.topic}' ends at {high}, before the offset {last} this "
                "read planned: the log topic was recreated; start again with a new checkpoint"
            )


def _check_decided(by_decision: Mapping[str, int], piece: LogSlice) -> None:
    """The follower's hold rule: a consistent read never passes a record its state finds undecided. A
    slice ends at the watermark of a state read before its records (S1), so none is; if one were, the
    task fails: the slice's end is in the checkpoint already, and a record held back would be skipped."""
    undecided = {d: n for d, n in by_decision.items() if Decision(d).undecided}
    if undecided:
        ranges = ", ".join(f"partition {p} offsets {first}..{last - 1}" for p, first, last in piece.ranges)
        raise StreamReadError(
            f"the control state finds records of '{piece.topic}' ({ranges}, below the visibility watermark) "
            f"undecided {undecided}; the read stops rather than skip or return them"
        )


class _Lookback:
    """Feeds a stream slice's rule the reconciler records the stream handed out before the slice (S3).

    Every copy of a reconciler record comes after the record it names, in the same partition
    (``visibility.output_identity``): so for the reconciler records of a chunk, reading back from the
    earliest record they name (not before the stream's origin) to the slice's start finds every earlier
    copy. Only reconciler records are fed (data records never touch the copies).
    """

    def __init__(self, piece: LogSlice, rule: RecordRule) -> None:
        self.piece, self.rule = piece, rule
        self.origin = {p: piece.rule.origin.get(p, 0) for p, _, _ in piece.ranges}
        self.read_from = {p: first for p, first, _ in piece.ranges}  # [read_from, first) is fed already
        self._consumer: Any = None
        self._log_start: dict[int, int] = {}

    def cover(self, messages: Sequence[Any]) -> None:
        """Feed what the reconciler records of ``messages`` (the next chunk) need, before they are decided."""
        needed: dict[int, int] = {}
        for partition, meta in _reconciler_metas(messages):
            named = _named_offset(meta, partition)
            if named is not None:
                needed[partition] = min(needed.get(partition, named), named)
        for partition, named in needed.items():
            lowest = max(self.origin[partition], named + 1)
            if lowest < self.read_from[partition]:
                # copies that retention deleted cannot be fed (nor handed out again): from the log start
                lowest = max(lowest, self.log_start(partition))
            if lowest < self.read_from[partition]:
                self._feed(partition, lowest, self.read_from[partition])
                self.read_from[partition] = lowest

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = kafka_client.consumer(self.piece.kafka_config, **{"auto.offset.reset": "error"})
        return self._consumer

    def log_start(self, partition: int) -> int:
        """The partition's first offset (asked once per slice)."""
        if partition not in self._log_start:
            bounds = kafka_client.partition_offsets(self._client(), self.piece.topic, partition + 1)
            self._log_start.update({p: low for p, (low, _) in bounds.items()})
        return self._log_start[partition]

    def _feed(self, partition: int, start: int, end: int) -> None:
        for messages in kafka_client.scan(
            self._client(), self.piece.topic, {partition: start}, {partition: end}
        ):
            for message in messages:
                meta = _meta(message)
                if meta is not None and meta.record_type is not RecordType.DATA:
                    self.rule.decide(meta, partition, message.offset())

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


def _meta(message: Any) -> RecordMeta | None:
    try:
        return decode_headers(message.headers())
    except RecordDecodeError:
        return None


def _reconciler_metas(messages: Sequence[Any]) -> Iterator[tuple[int, RecordMeta]]:
    """(partition, headers) of the reconciler records of ``messages``, each header set once per partition."""
    seen: set[tuple[int, Any]] = set()
    for message in messages:
        headers = message.headers()
        key = (message.partition(), tuple(headers or ()))
        if key in seen:
            continue
        seen.add(key)
        meta = _meta(message)
        if meta is not None and meta.record_type is not RecordType.DATA:
            yield message.partition(), meta


def _named_offset(meta: RecordMeta, partition: int) -> int | None:
    """The offset of the record a reconciler record names in its own partition (its copies come after it)."""
    if meta.reverses is not None and meta.reverses[0] == partition:
        return meta.reverses[1]
    if meta.reasserts is not None and meta.reasserts[0] == partition:
        return meta.reasserts[1]
    return None


def _read_files(piece: FileSlice) -> Iterator[pa.Table]:
    import pyarrow as pa
    from pyiceberg.io.pyarrow import ArrowScan

    table = LogStoreTable.open(piece.table, piece.catalog).load()
    scan = table.scan(snapshot_id=piece.snapshot_id)
    wanted = set(piece.files)
    tasks = [task for task in scan.plan_files() if task.file.file_path in wanted]
    batches = ArrowScan(
        table.metadata, table.io, scan.projection(), scan.row_filter, scan.case_sensitive
    ).to_record_batches(tasks)
    for batch in batches:
        if not batch.num_rows:
            continue
        rows = pa.Table.from_batches([batch]).select(list(piece.field_types))
        count = rows.num_rows
        extra = {
            "_kind": pa.array(["+I"] * count, pa.string()),
            "_partition": pa.nulls(count, pa.int64()),
            "_offset": pa.nulls(count, pa.int64()),
            "_writer_id": pa.nulls(count, pa.string()),
            "_epoch": pa.nulls(count, pa.int64()),
            "_batch_id": pa.nulls(count, pa.int64()),
            "_record_type": pa.nulls(count, pa.string()),
            SOURCE_COLUMN: pa.array(["file"] * count, pa.string()),
        }
        for name, column in extra.items():
            rows = rows.append_column(name, column)
        yield rows


def file_slices(
    handle: LogStoreTable, snapshot_id: int | None, field_types: Mapping[str, str], tasks: int
) -> list[FileSlice]:
    """A snapshot's data files in at most ``tasks`` slices (none for a table without a snapshot)."""
    if snapshot_id is None:
        return []
    files = sorted({task.file.file_path for task in handle.load().scan(snapshot_id=snapshot_id).plan_files()})
    groups = [files[i::tasks] for i in range(min(tasks, len(files)))]
    return [
        FileSlice(handle.catalog, str(handle.name), snapshot_id, tuple(g), dict(field_types)) for g in groups
    ]


# --- batch reads ---------------------------------------------------------------------------------------


@dataclass
class BatchPlan:
    """A batch read's slices and what it was planned from (for reports and tests)."""

    slices: list[Slice]
    start: dict[int, int]
    end: dict[int, int]
    snapshot_id: int | None = None


def plan_batch(opts: SourceOptions, file_tasks: int = 4) -> BatchPlan:
    """The slices of ``spark.read.format("logstore")``: the Python reader's read in slices of whole log
    partitions (a log read from its start; ``hybrid``: a snapshot's files, then its log part)."""
    reader = opts.open_reader()
    consistent = reader.consistency is Consistency.CONSISTENT
    cons = kafka_client.consumer(reader.kafka_config)
    try:
        bounds = kafka_client.partition_offsets(cons, reader.topic, reader.config.partitions)
        start = parse_start(opts.start, opts.mode)
        slices: list[Slice] = []
        chosen = None
        if opts.mode == "hybrid":
            plan = plan_hybrid(reader, start.value)
            chosen = plan.snapshot_id
            hybrid: SnapshotStart | None = plan.held
            first = reader.start_offsets(plan.log_start, cons, bounds)
            slices.extend(file_slices(reader.handle, chosen, reader.field_types, file_tasks))
        else:
            first = reader.start_offsets(start, cons, bounds)
            hybrid = reader.snapshot_start(start)
    finally:
        cons.close()
    read_filter = reader.read_filter(consistent, hybrid, first)
    end = {p: high for p, (_, high) in bounds.items()}
    if consistent and read_filter.state is not None:
        end = {p: max(first[p], min(end[p], read_filter.state.watermark.get(p, -1) + 1)) for p in end}
    rule = KeepRule(read_filter.state, consistent, hybrid, dict(first))
    slices.extend(_log_slices(reader, rule, first, end, opts, source_column=opts.mode == "hybrid"))
    return BatchPlan(slices, first, end, chosen)


def _log_slices(
    reader: LogReader,
    rule: KeepRule,
    start: Mapping[int, int],
    end: Mapping[int, int],
    opts: SourceOptions,
    *,
    source_column: bool,
    lookback: bool = False,
) -> list[LogSlice]:
    """The log's ``[start, end)`` as :func:`slice_count` slices of consecutive whole partitions (a
    filter's copies are per partition), balanced by records: a slice ends where the records read so far
    reach its share, or where each slice still to come needs one of the partitions left."""
    ranges = [(p, start[p], end[p]) for p in sorted(end) if start[p] < end[p]]
    total = sum(high - low for _, low, high in ranges)
    count = slice_count(total, len(ranges), opts.min_partitions)
    groups: list[list[tuple[int, int, int]]] = [[]]
    read = 0
    for index, (p, low, high) in enumerate(ranges):
        groups[-1].append((p, low, high))
        read += high - low
        to_come = count - len(groups)
        if to_come and (read * count >= total * len(groups) or len(ranges) - index - 1 == to_come):
            groups.append([])
    return [
        LogSlice(
            reader.topic,
            dict(reader.kafka_config),
            tuple(group),
            dict(reader.field_types),
            rule,
            reader.changelog_mode,
            reader.config.replication_factor,
            opts.scanner,
            lookback and any(low > rule.origin.get(p, 0) for p, low, _ in group),
            source_column,
        )
        for group in groups
        if group
    ]


def slice_count(records: int, partitions: int, min_partitions: int | None) -> int:
    """How many slices read ``records`` of ``partitions`` log partitions: one per :data:`SLICE_RECORDS`
    (at least one), or ``min_partitions``, whichever is more; at most one per partition."""
    wanted = max(1, records // SLICE_RECORDS, min_partitions or 1)
    return max(1, min(wanted, partitions))


# --- streams ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamOffset:
    """A stream's offset, as Spark keeps it in the checkpoint (plain JSON, :meth:`to_json`).

    :param positions: per partition the first offset not handed out (a follower's resume position).
    :param origin: per partition where the stream's log part started.
    :param snapshot: the snapshot the stream's log part continues (hybrid, or a start at a snapshot).
    :param files: hybrid only: ``pending`` until the snapshot's rows were handed out, then ``read``.
    :param lag: what the offset reports and nothing reads back: ``log_end`` and ``watermark``.
    :param consistency: as the checkpoint holds it (older ones say ``transactional``; read it with
        :func:`~airflow_logstore.core.properties.parse_consistency`), kept so the JSON stays the same.
    :param control_topic_id: the id of the control topic whose state decided the offset (a stream that
        reads the control state; absent in offsets of older versions): a restart on a control topic of
        another id (the table dropped and created again) fails instead of deciding on another history.
    """

    mode: str
    consistency: str
    positions: dict[int, int]
    origin: dict[int, int]
    snapshot: SnapshotStart | None = None
    files: str | None = None
    lag: dict[str, dict[str, int]] = field(default_factory=dict, compare=False)
    control_topic_id: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": OFFSET_VERSION,
            "mode": self.mode,
            "consistency": self.consistency,
            "positions": _text_keys(self.positions),
            "origin": _text_keys(self.origin),
        }
        if self.snapshot is not None:
            data["snapshot"] = self.snapshot.to_json()
        if self.files is not None:
            data["files"] = self.files
        if self.control_topic_id is not None:
            data["control_topic_id"] = self.control_topic_id
        data.update(self.lag)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamOffset:
        """:raises StreamReadError: not an offset of this source, or of a version this package cannot read."""
        try:
            version = int(data["version"])
            if version > OFFSET_VERSION:
                raise StreamReadError(
                    f"the checkpoint holds an offset of version {version} of the 'logstore' source; this "
                    f"package reads version {OFFSET_VERSION}: upgrade the package"
                )
            snapshot = data.get("snapshot")
            return cls(
                str(data["mode"]),
                str(data["consistency"]),
                _int_keys(data["positions"]),
                _int_keys(data["origin"]),
                None if snapshot is None else SnapshotStart.from_json(snapshot),
                None if data.get("files") is None else str(data["files"]),
                {key: dict(data[key]) for key in ("log_end", "watermark") if key in data},
                None if data.get("control_topic_id") is None else str(data["control_topic_id"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OptionError) as exc:
            raise StreamReadError(
                f"not an offset of the 'logstore' source: {json.dumps(data)[:300]} ({exc})"
            ) from None

    def moved(self, other: StreamOffset) -> bool:
        """True when ``other`` hands out something this offset did not (its positions or its files)."""
        return other.positions != self.positions or other.files != self.files


def replayed_start(start: StreamOffset, end: StreamOffset) -> StreamOffset:
    """The start of the micro-batch that ends at ``end``, as the stream first planned it.

    Spark keeps each micro-batch's end in the offset log, but not the first one's start: it asks the
    source's ``initialOffset`` again when it replays micro-batch 0 after a restart, and a start
    evaluated again (``latest``, a timestamp, ``earliest`` after retention, a hybrid stream's current
    snapshot) may lie elsewhere than the one the micro-batch was planned from. Every offset of a stream
    carries where it started (``origin``, ``snapshot``): a start that names another origin or snapshot
    than ``end`` is such a start evaluated again, and the stream's first offset is rebuilt from ``end``
    (positions at the origin; a hybrid stream's files not handed out yet). Any other start is the end of
    the micro-batch before, from the offset log, and is returned as it is.
    """
    if (start.origin, start.snapshot) == (end.origin, end.snapshot):
        return start
    files = None if end.files is None else "pending"
    return StreamOffset(
        end.mode,
        end.consistency,
        dict(end.origin),
        dict(end.origin),
        end.snapshot,
        files,
        control_topic_id=end.control_topic_id,
    )


def _check_not_behind(log_end: Mapping[int, int], positions: Mapping[int, int], topic: str) -> None:
    """A log that ends before the stream's positions was recreated (or truncated): its offsets name other
    records now. Fail rather than wait, silently, until it grows past them and then skip or misread."""
    behind = {p: (positions[p], end) for p, end in log_end.items() if end < positions.get(p, 0)}
    if behind:
        raise StreamReadError(
            f"the log '{topic}' ends before the stream's positions (partition: (position, end) {behind}): "
            "the topic was recreated since the checkpoint was written; start again with a new checkpoint"
        )


def _text_keys(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(offsets.items())}


def _int_keys(offsets: Mapping[Any, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.items()}


def bounded(start: Mapping[int, int], available: Mapping[int, int], limit: int | None) -> dict[int, int]:
    """``available`` cut so that at most ``limit`` records lie between ``start`` and it: each partition
    gets its share of the limit by what it has, the rest goes to the lowest partitions first."""
    ahead = {p: max(0, available[p] - start.get(p, available[p])) for p in available}
    total = sum(ahead.values())
    if limit is None or total <= limit:
        return {p: start.get(p, 0) + ahead[p] for p in available}
    share = {p: limit * n // total for p, n in ahead.items()}
    left = limit - sum(share.values())
    for p in sorted(ahead):
        extra = min(left, ahead[p] - share[p])
        share[p] += extra
        left -= extra
    return {p: start.get(p, 0) + share[p] for p in available}


def catch_up(control: ControlFollower, timeout: float | None = None) -> None:
    """Poll ``control`` until it has folded the control topic up to the end it has now: a follower's
    poll folds what its consumer has fetched so far, and a stream's micro-batch must see the watermark
    of the last publish before it (a first poll of a new consumer has fetched nothing yet).

    :raises KafkaUnavailableError: the control topic's records did not come in ``timeout``.
    """
    import time

    from confluent_kafka import TopicPartition

    from airflow_logstore.exceptions import KafkaUnavailableError

    end = kafka_client.partition_offsets(control.consumer, control.topic, 1)[0][1]
    deadline = time.monotonic() + kafka_client.request_timeout(timeout)
    control.poll(0)
    while control.next < end:
        (position,) = control.consumer.position([TopicPartition(control.topic, 0)])
        if position.offset >= end:  # the records before the end are compacted away: nothing to fold
            return
        if time.monotonic() > deadline:
            raise KafkaUnavailableError(
                f"the control topic '{control.topic}' did not deliver its records up to {end} "
                f"(at {control.next})"
            )
        control.poll(0.05)


class StreamPlanner:
    """The driver's side of a ``logstore`` stream: offsets and the slices of each micro-batch.

    It lives in the source's Python process for the whole query (Spark calls ``initialOffset``,
    ``latestOffset``, ``partitions`` and ``commit`` on one reader) and opens its table, its Kafka consumer
    and, for a consistent or snapshot-based stream, a :class:`ControlFollower` on first use.
    """

    def __init__(self, opts: SourceOptions, *, file_tasks: int = 4) -> None:
        self.opts = opts
        self.file_tasks = file_tasks
        self._reader: LogReader | None = None
        self._consumer: Any = None
        self._control: ControlFollower | None = None
        self._previous: StreamOffset | None = None
        self._lag_at = 0.0

    # -- lazily opened -----------------------------------------------------------------------------------

    @property
    def reader(self) -> LogReader:
        if self._reader is None:
            self._reader = self.opts.open_reader()
        return self._reader

    @property
    def consistent(self) -> bool:
        return self.reader.consistency is Consistency.CONSISTENT

    def _bounds(self) -> dict[int, tuple[int, int]]:
        if self._consumer is None:
            self._consumer = kafka_client.consumer(self.reader.kafka_config)
        return kafka_client.partition_offsets(
            self._consumer, self.reader.topic, self.reader.config.partitions
        )

    def _state(self, offset: StreamOffset) -> ControlState | None:
        """The control state with every control record appended before this call folded (None for an
        eventual stream that does not continue a snapshot)."""
        if not self.consistent and offset.snapshot is None:
            return None
        if self._control is None:
            self._control = ControlFollower.of(self.reader)
        known, now = offset.control_topic_id, self._control_topic_id()
        if known is not None and now is not None and known != now:
            raise StreamReadError(
                f"the control topic of '{self.opts.table}' is another one than the checkpoint's offsets were "
                f"decided on (id {now}, was {known}): the table was dropped and created again, and the "
                "history the stream's positions rest on is gone; start again with a new checkpoint"
            )
        catch_up(self._control)
        return self._control.state

    def _control_topic_id(self) -> str | None:
        """The id of the control topic the follower started on (None: no follower, or not asked)."""
        return getattr(self._control, "started_topic_id", None) if self._control is not None else None

    # -- Spark's calls -----------------------------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        reader, bounds = self.reader, self._bounds()
        start = parse_start(self.opts.start, self.opts.mode)
        files = None
        if self.opts.mode == "hybrid":
            plan = plan_hybrid(reader, start.value)
            hybrid: SnapshotStart | None = plan.held
            first = reader.start_offsets(plan.log_start, self._consumer, bounds)
            files = "pending"
        else:
            first = reader.start_offsets(start, self._consumer, bounds)
            hybrid = reader.snapshot_start(start)
        offset = StreamOffset(self.opts.mode, reader.consistency.value, first, dict(first), hybrid, files)
        self._previous = offset
        return offset.to_json()

    def latest_offset(self) -> dict[str, Any]:
        import time

        previous = self._previous
        if previous is None:  # Spark names the start of each batch before it asks (setLatestSeenOffset)
            self.initial_offset()
            previous = self._previous
            assert previous is not None
        bounds = self._bounds()
        log_end = {p: high for p, (_, high) in bounds.items()}
        _check_not_behind(log_end, previous.positions, self.reader.topic)
        state = self._state(previous)
        available = dict(log_end)
        lag: dict[str, dict[str, int]] = {"log_end": _text_keys(log_end)}
        if state is not None:
            watermark = {p: state.watermark.get(p, -1) for p in log_end}
            lag["watermark"] = _text_keys(watermark)
            if self.consistent:
                available = {p: min(log_end[p], watermark[p] + 1) for p in log_end}
        available = {p: max(o, previous.positions.get(p, o)) for p, o in available.items()}
        positions = bounded(previous.positions, available, self.opts.max_records)
        files = "read" if previous.files is not None else None
        offset = StreamOffset(
            previous.mode,
            previous.consistency,
            positions,
            previous.origin,
            previous.snapshot,
            files,
            lag,
            self._control_topic_id() or previous.control_topic_id,
        )
        now = time.monotonic()
        if not previous.moved(offset):
            if offset.lag == previous.lag or now - self._lag_at < LAG_REFRESH_S:
                return previous.to_json()  # nothing new: no micro-batch
        else:
            pause_point("source:offsets-chosen")  # the driver chose the next micro-batch's end
        self._lag_at = now
        return offset.to_json()

    def partitions(self, start_json: Mapping[str, Any], end_json: Mapping[str, Any]) -> list[Slice]:
        start, end = StreamOffset.from_json(start_json), StreamOffset.from_json(end_json)
        self._check_options(end)
        start = replayed_start(start, end)
        behind = {
            p: (o, end.positions.get(p, o)) for p, o in start.positions.items() if end.positions.get(p, o) < o
        }
        if behind:  # a micro-batch never goes back: its records would be handed out again
            raise StreamReadError(
                f"a micro-batch of '{self.reader.topic}' would end before it starts (partition: (start, end) "
                f"{behind}); the stream's offsets went backwards: start again with a new checkpoint"
            )
        self._previous = end
        if not start.moved(end):
            return []
        reader = self.reader
        slices: list[Slice] = []
        if start.files == "pending" and end.files == "read" and start.snapshot is not None:
            slices.extend(
                file_slices(reader.handle, start.snapshot.snapshot_id, reader.field_types, self.file_tasks)
            )
        state = self._state(end)
        rule = KeepRule(state, self.consistent, start.snapshot, dict(start.origin), follows=True)
        slices.extend(
            _log_slices(
                reader,
                rule,
                start.positions,
                end.positions,
                self.opts,
                source_column=self.opts.mode == "hybrid",
                lookback=not self.consistent,
            )
        )
        return slices

    def _check_options(self, offset: StreamOffset) -> None:
        """A checkpoint of another kind of stream is not continued: its positions mean something else."""
        if offset.mode != self.opts.mode:
            raise OptionError(
                "mode",
                f"the checkpoint is of a '{offset.mode}' stream, not '{self.opts.mode}': use a new one",
            )
        # kept as written (Spark compares offsets by their JSON): older checkpoints say "transactional"
        stream = parse_consistency(offset.consistency)
        if stream is not self.reader.consistency:
            raise OptionError(
                "consistency",
                f"the checkpoint is of a {stream.value} stream, not {self.reader.consistency.value}: "
                "use a new checkpoint",
            )

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._control is not None:
            self._control.close()
            self._control = None
