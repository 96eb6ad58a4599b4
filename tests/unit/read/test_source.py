"""The ``logstore`` Spark source without Spark (``read.source``): options, offsets, slices and their rows.

Scripted records and states over a scripted Kafka (no broker): options fail naming themselves; offsets
are plain JSON that round-trips exactly, that a follower takes as a resume position, and that this
version reads as version 1 wrote it; micro-batches are bounded; a slice keeps records by the project's
rule (the reader's, the follower's from a snapshot); a consistent slice never passes a record its
state finds undecided; a stream's slice drops a later copy of a reconciler record handed out in an
earlier micro-batch. Then the property streams exist for, over random histories: micro-batches planned
by the real planner, the query killed after any micro-batch's planning and restarted (the batch
replayed with a newer state), yield each committed record exactly once, and a replay the same records.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from airflow_logstore.core.codec import RecordMeta, RecordType, RowKind, decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import ChangelogMode, Consistency
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision, ReadFilter, classify
from airflow_logstore.exceptions import KafkaUnavailableError, OptionError, StreamReadError
from airflow_logstore.read import follow, source
from airflow_logstore.read.reader import LogReader, SnapshotStart, StartPosition, filter_for
from airflow_logstore.read.source import (
    KeepRule,
    LogSlice,
    SourceOptions,
    StreamOffset,
    StreamPlanner,
    bounded,
)
from airflow_logstore.table.catalog import CatalogSpec
from tests.unit.read.test_follow_snapshot import LOG, TASK, ZOMBIE_TASK, S, _Record, _reversal

CATALOG = CatalogSpec(uri="sqlite:////tmp/none.db", warehouse="file:///tmp/none")
TYPES = {"id": "int"}


def _parse(**options: str) -> SourceOptions:
    return SourceOptions.parse({"table": "ns.t", **options}, CATALOG, {})


# -- options ----------------------------------------------------------------------------------------------


def test_options_default_to_the_tables_settings() -> None:
    opts = _parse()
    assert (opts.table, opts.mode, opts.consistency, opts.changelog_mode) == ("ns.t", "log", None, None)
    assert opts.start is None and opts.max_records is None and opts.scanner == "auto"
    assert opts.min_partitions is None and _parse(minPartitions="4").min_partitions == 4
    assert SourceOptions.parse({"path": "ns.t"}, CATALOG, {}).table == "ns.t"  # .load("ns.t")
    named = _parse(consistency="consistent", **{"changelog-mode": "append-only", "MaxRecordsPerTrigger": "5"})
    assert named.consistency is Consistency.CONSISTENT and named.consistent
    assert named.changelog_mode is ChangelogMode.APPEND_ONLY and named.max_records == 5
    assert _parse(consistency="transactional").consistency is Consistency.CONSISTENT
    assert _parse(**{"log.consistency": "eventual"}).hints == {"log.consistency": "eventual"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "stream"}, "option 'mode': 'stream' is not log or hybrid"),
        (
            {"mode": "file"},
            r"option 'mode': file reads are plain Iceberg reads: spark.table\('logstore.ns.t'\)",
        ),
        (
            {"consistency": "strong"},
            "option 'consistency': 'strong' is not one of consistent, eventual or transactional",
        ),
        ({"changelog-mode": "upsert"}, "option 'changelog-mode': 'upsert' is not all-kinds or append-only"),
        ({"startingPosition": "yesterday"}, "option 'startingPosition': 'yesterday' is not earliest"),
        ({"startingPosition": "timestamp:noon"}, "option 'startingPosition': 'noon' is neither epoch"),
        ({"startingPosition": "positions:{"}, "option 'startingPosition': .* is not JSON"),
        (
            {"mode": "hybrid", "startingPosition": "earliest"},
            "option 'startingPosition': a hybrid read starts",
        ),
        ({"maxRecordsPerTrigger": "0"}, "option 'maxRecordsPerTrigger': '0' is not a positive whole number"),
        ({"maxRecordsPerTrigger": "many"}, "option 'maxRecordsPerTrigger'"),
        ({"minPartitions": "-2"}, "option 'minPartitions': '-2' is not a positive whole number"),
        ({"scanner": "fast"}, "option 'scanner': 'fast' is not one of"),
        (
            {"startingOffsets": "earliest"},
            "option 'startingoffsets': is not an option of the 'logstore' source",
        ),
        # a read hint's value is checked as its table property is, naming the hint (not the table)
        ({"log.consistency": "strict"}, "option 'log.consistency': 'strict' is not one of consistent"),
        (
            {"log.consumer.changelog.modes": "upsert"},
            "option 'log.consumer.changelog.modes': 'upsert' is not",
        ),
        (
            {"log-store.consistency-guarantee.enabled": "yes"},
            "option 'log-store.consistency-guarantee.enabled'",
        ),
    ],
)
def test_a_bad_option_fails_naming_it(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        _parse(**options)


def test_a_read_without_a_table_names_the_option() -> None:
    with pytest.raises(OptionError, match="option 'table': missing"):
        SourceOptions.parse({"mode": "log"}, CATALOG, {})


def test_a_table_name_that_is_not_an_identifier_names_the_option() -> None:
    with pytest.raises(OptionError, match=r"option 'table': table name 'a\.b\.c'"):
        SourceOptions.parse({"table": "a.b.c"}, CATALOG, {}).handle()


# -- offsets ------------------------------------------------------------------------------------------------

#: An offset exactly as version 1 of the source writes it into a checkpoint (``offsets/<batch>``): every
#: later version reads it. Do not change it; add a new one for a new version.
OFFSET_V1 = (
    '{"version": 1, "mode": "hybrid", "consistency": "transactional", "positions": {"0": 12, "1": 7}, '
    '"origin": {"0": 3, "1": 0}, "snapshot": {"id": 77, "sequence": 5, "included": ["w/1"], '
    '"positions": {"0": 3, "1": 0}}, "files": "read", "log_end": {"0": 15, "1": 7}, '
    '"watermark": {"0": 11, "1": 6}}'
)


def test_an_offset_of_version_1_reads_back_to_the_same_json() -> None:
    offset = StreamOffset.from_json(json.loads(OFFSET_V1))
    assert offset.positions == {0: 12, 1: 7} and offset.origin == {0: 3, 1: 0}
    assert offset.snapshot == SnapshotStart(5, frozenset({"w/1"}), 77, ((0, 3), (1, 0)))
    assert (offset.mode, offset.consistency, offset.files) == ("hybrid", "transactional", "read")
    assert offset.lag == {"log_end": {"0": 15, "1": 7}, "watermark": {"0": 11, "1": 6}}
    # the same text again: Spark compares offsets by their JSON, so an unchanged stream starts no batch
    assert json.dumps(offset.to_json()) == OFFSET_V1


def test_a_streams_offset_is_a_followers_resume_position() -> None:
    start = StartPosition.of(json.loads(OFFSET_V1))
    assert isinstance(start, StartPosition) and start.kind == "positions"
    assert start.offsets == ((0, 12), (1, 7))
    assert start.hybrid == SnapshotStart(5, frozenset({"w/1"}), 77, ((0, 3), (1, 0)))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**json.loads(OFFSET_V1), "version": 2}, "version 2 of the 'logstore' source; this package reads"),
        ({"positions": {"0": 1}}, "not an offset of the 'logstore' source"),
        ({**json.loads(OFFSET_V1), "positions": {"0": "x"}}, "not an offset of the 'logstore' source"),
        ({**json.loads(OFFSET_V1), "positions": []}, "not an offset of the 'logstore' source"),
    ],
)
def test_an_offset_this_package_cannot_read_is_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(StreamReadError, match=message):
        StreamOffset.from_json(data)


def test_a_micro_batch_is_bounded_by_max_records_shared_by_what_each_partition_has() -> None:
    start = {0: 10, 1: 0, 2: 5}
    available = {0: 110, 1: 30, 2: 5}
    assert bounded(start, available, None) == available
    assert bounded(start, available, 1000) == available
    cut = bounded(start, available, 13)
    assert cut == {0: 10 + 10, 1: 0 + 3, 2: 5} and sum(cut[p] - start[p] for p in cut) == 13
    assert bounded(start, available, 1) == {0: 11, 1: 0, 2: 5}  # never stuck: the remainder goes first
    for seed in range(200):
        rng = random.Random(seed)
        begin = {p: rng.randint(0, 50) for p in range(3)}
        ends = {p: begin[p] + rng.randint(0, 50) for p in range(3)}
        limit = rng.randint(1, 120)
        got = bounded(begin, ends, limit)
        assert all(begin[p] <= got[p] <= ends[p] for p in got)
        assert sum(got[p] - begin[p] for p in got) == min(limit, sum(ends[p] - begin[p] for p in got))


# -- a slice's rows ------------------------------------------------------------------------------------------


class _Kafka:
    """What a slice read asks of ``kafka_client``, over scripted records (chunks of ``chunk`` records)."""

    def __init__(self, log: list[_Record], low: Mapping[int, int] | None = None, chunk: int = 2) -> None:
        self.log, self.low, self.chunk = log, dict(low or {}), chunk
        self.scans: list[tuple[dict[int, int], dict[int, int]]] = []
        #: set: a scan of several partitions interleaves them in a random order, as a broker's fetches
        #: may (``kafka_client.scan`` promises offset order per partition only)
        self.interleave: random.Random | None = None

    def consumer(self, config: Any, **overrides: Any) -> Any:
        return self

    def request_timeout(self, timeout: float | None) -> float:
        return 1.0

    def close(self) -> None:
        pass

    def partition_offsets(self, cons: Any, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        if topic == "control":
            return {0: (0, 0)}  # what the scripted control follower has folded: all of it
        ends = {
            p: 1 + max((r.offset() for r in self.log if r.partition() == p), default=-1)
            for p in range(partitions)
        }
        return {p: (self.low.get(p, 0), ends[p]) for p in range(partitions)}

    def scan(
        self, cons: Any, topic: str, start: Mapping[int, int], end: Mapping[int, int], **_: Any
    ) -> Iterator[list[Any]]:
        self.scans.append((dict(start), dict(end)))
        for p, first in start.items():  # a consumer that resets with ``error``, as the slices' do
            if first < min(self.low.get(p, 0), end.get(p, 0)):
                raise KafkaUnavailableError(f"partition {p}: records from {first} were deleted (retention)")
        found = [r for r in self.log if start.get(r.partition(), 0) <= r.offset() < end.get(r.partition(), 0)]
        found.sort(key=lambda r: (r.offset(), r.partition()))
        if self.interleave is not None:
            found = _interleaved(found, self.interleave)
        for i in range(0, len(found), self.chunk):
            yield found[i : i + self.chunk]


def _interleaved(records: list[_Record], rng: random.Random) -> list[_Record]:
    """``records`` (in offset order per partition) with the partitions merged in a random order."""
    queues: dict[int, list[_Record]] = {}
    for record in records:
        queues.setdefault(record.partition(), []).append(record)
    merged: list[_Record] = []
    while queues:
        partition = rng.choice(sorted(queues))
        merged.append(queues[partition].pop(0))
        if not queues[partition]:
            del queues[partition]
    return merged


class _DeadLetters:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.entries: list[tuple[int, int, str]] = []

    @classmethod
    def for_log(cls, *args: Any) -> _DeadLetters:
        return cls()

    def add(self, topic: str, message: Any, reason: str) -> None:
        self.entries.append((message.partition(), message.offset(), reason))

    def flush(self) -> None:
        pass


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Installs a scripted Kafka; ``kafka(log, low=...)`` sets what it holds."""
    holder: dict[str, _Kafka] = {}

    def install(log: list[_Record], low: Mapping[int, int] | None = None) -> _Kafka:
        holder["kafka"] = _Kafka(log, low)
        monkeypatch.setattr(source, "kafka_client", holder["kafka"])
        return holder["kafka"]

    monkeypatch.setattr(source, "DeadLetterTopic", _DeadLetters)
    yield install


def _slice(rule: KeepRule, ranges: list[tuple[int, int, int]], **kwargs: Any) -> LogSlice:
    return LogSlice(
        "log", {}, tuple(ranges), TYPES, rule, ChangelogMode.ALL_KINDS, scanner="librdkafka", **kwargs
    )


def _read(piece: source.Slice) -> list[tuple[int, int]]:
    rows: list[tuple[int, int]] = []
    for table in source.read_slice(piece):
        rows.extend(
            zip(table.column("_partition").to_pylist(), table.column("_offset").to_pylist(), strict=True)
        )
    return rows


def _state(watermark: int) -> ControlState:
    commits = [
        CommitInfo("w", 1, 1, offsets={0: (0, 1)}, tasks=frozenset({TASK}), sequence_number=5),
        CommitInfo("w", 2, 1, offsets={0: (2, 3)}, tasks=frozenset({TASK}), sequence_number=6),
    ]
    return ControlState(epochs={"w": 1}, commits={c.key: c for c in commits}, watermark={0: watermark})


def _by_rule(rule: Any, log: list[_Record], start: int, end: int) -> list[tuple[int, int]]:
    """The reference: the rule asked record by record, in log order."""
    kept = []
    for record in log:
        if start <= record.offset() < end:
            keep, _ = rule.decide(decode_headers(record.headers()), record.partition(), record.offset())
            if keep:
                kept.append((record.partition(), record.offset()))
    return kept


def test_a_consistent_slice_keeps_what_the_readers_rule_keeps(kafka: Any) -> None:
    kafka(LOG)
    rule = KeepRule(_state(6), True, None, {0: 0})
    got = _read(_slice(rule, [(0, 0, 7)]))
    assert got == [(0, 0), (0, 1), (0, 2), (0, 3)]  # the zombie's copy and reversals are not committed
    assert got == _by_rule(filter_for(_state(6), True, None, {0: 0}), LOG, 0, 7)


def test_a_hybrid_slice_keeps_what_a_hybrid_read_of_the_snapshot_keeps(kafka: Any) -> None:
    kafka(LOG)
    consistent = KeepRule(_state(6), True, S, {0: 0})
    assert _read(_slice(consistent, [(0, 0, 7)])) == [(0, 2), (0, 3)]  # S holds batch 1
    eventual = KeepRule(_state(6), False, S, {0: 0})  # a batch read: hybrid_keeps (no reversals)
    assert _read(_slice(eventual, [(0, 0, 8)])) == [(0, 2), (0, 3), (0, 7)]


def test_an_eventual_stream_from_a_snapshot_keeps_what_the_follower_keeps(kafka: Any) -> None:
    kafka(LOG)
    rule = KeepRule(_state(6), False, S, {0: 0, 1: 3}, follows=True)
    assert isinstance(rule.build(), follow.EventualAfterSnapshot)
    follower = follow.EventualAfterSnapshot(filter_for(_state(6), False, S, {0: 0, 1: 3}), dict(S.positions))
    expected = _by_rule(follower, LOG, 0, 8)
    assert _read(_slice(rule, [(0, 0, 8)])) == expected == [(0, 2), (0, 3), (0, 4), (0, 5), (0, 7)]


def test_a_consistent_slice_fails_on_a_record_its_state_finds_undecided(kafka: Any) -> None:
    """The hold rule: a watermark past batch 3 (in flight) is a state no publish writes (S1); the task
    fails instead of skipping the record (the micro-batch's end is in the checkpoint already)."""
    kafka(LOG)
    rule = KeepRule(_state(7), True, None, {0: 0})
    with pytest.raises(StreamReadError, match=r"offsets 0..7, below the visibility watermark\) undecided"):
        _read(_slice(rule, [(0, 0, 8)]))


def test_a_slice_whose_records_retention_deleted_fails_naming_them(kafka: Any) -> None:
    kafka(LOG, low={0: 3})
    with pytest.raises(
        StreamReadError, match=r"records 1..2 of partition 0 of 'log' were deleted by retention"
    ):
        _read(_slice(KeepRule(None, False, None, {0: 0}), [(0, 1, 8)]))


def test_append_only_and_the_source_column(kafka: Any) -> None:
    update = _Record(0, 2, RecordMeta("w", 1, 2, TASK), RowKind.UPDATE_AFTER)
    kafka([LOG[0], LOG[1], update])
    rule = KeepRule(None, False, None, {0: 0})
    piece = LogSlice("log", {}, ((0, 0, 3),), TYPES, rule, ChangelogMode.APPEND_ONLY, scanner="librdkafka",
                     source_column=True)  # fmt: skip
    tables = list(source.read_slice(piece))
    assert sum(t.num_rows for t in tables) == 2
    assert set(tables[0].column("_source").to_pylist()) == {"log"}


# -- later copies of reconciler records, across micro-batches (S3) -------------------------------------------


def _copies_log() -> list[_Record]:
    """Batch 1 (0-1), a zombie's copy (2), its reversal (3), data (4, 5), the reversal's copy (6): a
    reconcile task retried after its flush."""
    return [
        _Record(0, 0, RecordMeta("w", 1, 1, TASK)),
        _Record(0, 1, RecordMeta("w", 1, 1, TASK)),
        _Record(0, 2, RecordMeta("w", 1, 1, ZOMBIE_TASK)),
        _reversal(3, (0, 2)),
        _Record(0, 4, RecordMeta("w", 1, 2, TASK)),
        _Record(0, 5, RecordMeta("w", 1, 2, TASK)),
        _reversal(6, (0, 2)),
    ]


@pytest.mark.parametrize("chunk", [1, 2, 10])
def test_an_eventual_stream_drops_a_later_copy_handed_out_in_an_earlier_micro_batch(
    kafka: Any, chunk: int
) -> None:
    installed = kafka(_copies_log())
    installed.chunk = chunk
    rule = KeepRule(None, False, None, {0: 0}, follows=True)
    first = _read(_slice(rule, [(0, 0, 5)], lookback=True))
    second = _read(_slice(rule, [(0, 5, 7)], lookback=True))
    assert first + second == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]  # one reversal, not two
    assert ({0: 3}, {0: 5}) in installed.scans  # read back from the record the copy names, + 1
    # the planted bug: without the look-back the micro-batch returns the copy, and a retract fold of the
    # stream reverses the zombie's record twice
    assert _read(_slice(rule, [(0, 5, 7)], lookback=False)) == [(0, 5), (0, 6)]


def test_a_stream_that_started_after_the_first_copy_keeps_the_later_one(kafka: Any) -> None:
    """From its origin a stream never saw the first copy: the later one is its first (as a follower
    resumed there: at-least-once for eventual reads)."""
    installed = kafka(_copies_log())
    rule = KeepRule(None, False, None, {0: 4}, follows=True)
    assert _read(_slice(rule, [(0, 5, 7)], lookback=True)) == [(0, 5), (0, 6)]
    assert ({0: 4}, {0: 5}) in installed.scans  # not before the origin


def test_an_eventual_streams_look_back_starts_at_the_log_start_when_retention_passed_it(kafka: Any) -> None:
    """The copy at 6 names the zombie's record at 2: the look-back would read from 3, which retention
    deleted (the log starts at 4). It reads from the log start instead, and the copy is returned (its
    first copy is gone: at-least-once, as for a stream that started after it). Before, the look-back's
    read failed, and so did every retry and restart of the query, with a message saying a retry helps."""
    installed = kafka(_copies_log(), low={0: 4})
    rule = KeepRule(None, False, None, {0: 0}, follows=True)
    assert _read(_slice(rule, [(0, 5, 7)], lookback=True)) == [(0, 5), (0, 6)]
    assert ({0: 4}, {0: 5}) in installed.scans and ({0: 3}, {0: 5}) not in installed.scans


# -- micro-batches planned by the planner, a restart after any of them: exactly once (S1, S2) --------------


def _commit(batch: int, spans: dict[int, tuple[int, int]]) -> CommitInfo:
    return CommitInfo("w", batch, 1, offsets=spans, tasks=frozenset({TASK}))


@dataclass
class _History:
    """One writer's batches in two partitions (some with a zombie's copy, some never committed), and
    per step the control state a publish leaves: its watermark passes only decided records (V1)."""

    records: list[_Record] = field(default_factory=list)
    arrive: list[int] = field(default_factory=list)
    states: list[ControlState] = field(default_factory=list)


def _history(rng: random.Random, batches: int = 8) -> _History:
    history = _History()
    ends = {0: 0, 1: 0}
    commits: list[tuple[int, CommitInfo]] = []
    step = 0
    for batch in range(1, batches + 1):
        spans: dict[int, tuple[int, int]] = {}
        for partition in rng.sample([0, 1], rng.randint(1, 2)):
            count = rng.randint(1, 3)
            task = TASK if rng.random() < 0.8 else ZOMBIE_TASK
            for _ in range(count):
                history.records.append(_Record(partition, ends[partition], RecordMeta("w", 1, batch, task)))
                history.arrive.append(step)
                ends[partition] += 1
            if task == TASK:
                spans[partition] = (ends[partition] - count, ends[partition] - 1)
        step += rng.randint(0, 2)
        commits.append((step + rng.randint(0, 3), _commit(batch, spans) if spans else
                        CommitInfo("w", batch, 2, offsets={}, tasks=frozenset({TASK}))))  # fmt: skip
    last = max(step, *(known for known, _ in commits)) + 2
    for now in range(last + 1):
        state = ControlState(epochs={"w": 1}, commits={c.key: c for at, c in commits if at <= now})
        watermark = {}
        for partition in (0, 1):
            previous = history.states[-1].watermark.get(partition, -1) if history.states else -1
            decided = previous
            for record, at in zip(history.records, history.arrive, strict=True):
                if record.partition() != partition or record.offset() <= decided:
                    continue
                meta = decode_headers(record.headers())
                if at > now or classify(meta, partition, record.offset(), state).undecided:
                    break
                decided = record.offset()
            watermark[partition] = decided if now == last else rng.randint(previous, decided)
        state.watermark = watermark
        history.states.append(state)
    return history


class _Clock:
    """What the scripted log holds and what the control follower knows, at the current step."""

    def __init__(self, history: _History) -> None:
        self.history, self.now = history, 0
        self.consumer, self.topic, self.next = None, "control", 0

    def log(self) -> list[_Record]:
        return [r for r, at in zip(self.history.records, self.history.arrive, strict=True) if at <= self.now]

    def poll(self, timeout: float = 0) -> bool:
        return False

    @property
    def state(self) -> ControlState:
        return self.history.states[self.now]

    def close(self) -> None:
        pass


def _planner(clock: _Clock, max_records: int | None, start: str | None = None) -> StreamPlanner:
    reader = LogReader.__new__(LogReader)
    reader.topic, reader.kafka_config, reader.field_types = "log", {}, dict(TYPES)
    reader.consistency, reader.changelog_mode = Consistency.CONSISTENT, ChangelogMode.ALL_KINDS

    class _Config:
        partitions, replication_factor = 2, None

    reader.config = _Config()  # type: ignore[assignment]
    opts = SourceOptions(
        "ns.t", "log", Consistency.CONSISTENT, None, {}, start, max_records, "librdkafka", CATALOG
    )
    planner = StreamPlanner(opts)
    planner._reader, planner._control = reader, clock  # type: ignore[assignment]
    return planner


def _committed(history: _History) -> list[tuple[int, int]]:
    final = history.states[-1]
    return sorted(
        (r.partition(), r.offset())
        for r in history.records
        if classify(decode_headers(r.headers()), r.partition(), r.offset(), final) is Decision.COMMITTED
    )


def _stream(history: _History, rng: random.Random, kafka: Any) -> tuple[list[tuple[int, int]], int]:
    """Run a consistent stream over ``history`` as Spark does (an offset log, a commit log), killing the
    query at random after a micro-batch was planned and before it was committed; the sink keeps the rows
    of each micro-batch by its id (idempotent). Returns (the sink's rows, the restarts)."""
    clock = _Clock(history)
    max_records = rng.choice([None, 1, 2, 3])
    planner = _planner(clock, max_records)
    kafka(clock.log())
    offsets = [planner.initial_offset()]  # offsets[i]: the start of micro-batch i
    sink: dict[int, list[tuple[int, int]]] = {}
    committed, restarts = 0, 0
    final = len(history.states) - 1
    while True:
        kafka(clock.log())
        if committed == len(offsets) - 1:  # no batch in flight: ask for the next one
            latest = planner.latest_offset()
            after, before = (
                StreamOffset.from_json(latest).positions,
                StreamOffset.from_json(offsets[-1]).positions,
            )
            # maxRecordsPerTrigger bounds each micro-batch (offsets, not kept records)
            assert max_records is None or sum(o - before.get(p, o) for p, o in after.items()) <= max_records
            if StreamOffset.from_json(latest).moved(StreamOffset.from_json(offsets[-1])):
                offsets.append(latest)
            elif clock.now == final:
                break  # caught up with the end of the history
        if committed < len(offsets) - 1:  # the planned batch runs
            batch = committed
            rows = [
                row
                for piece in planner.partitions(offsets[batch], offsets[batch + 1])
                for row in _read(piece)
            ]
            if rng.random() < 0.3:  # killed before its commit: a new driver replays it, a step later
                restarts += 1
                clock.now = min(clock.now + 1, final)
                kafka(clock.log())
                planner = _planner(clock, max_records)
                planner.partitions(offsets[-1], offsets[-1])  # Spark's setLatestSeenOffset
                replayed = [
                    r
                    for piece in planner.partitions(offsets[batch], offsets[batch + 1])
                    for r in _read(piece)
                ]
                assert replayed == rows  # S2: the same records, whatever state the replay has
            sink[batch] = rows
            committed += 1
        clock.now = min(clock.now + 1, final)
    return [row for batch in sorted(sink) for row in sink[batch]], restarts


def test_a_consistent_stream_restarted_anywhere_yields_each_committed_record_once(kafka: Any) -> None:
    restarts = 0
    for seed in range(150):
        rng = random.Random(seed)
        history = _history(rng)
        rows, killed = _stream(history, rng, kafka)
        restarts += killed
        assert sorted(rows) == _committed(history), seed
        assert len(rows) == len(set(rows)), seed
    assert restarts > 100


def _one_batch_clock(watermark: int) -> _Clock:
    """A log of batch 1's four records (partition 0, offsets 0-3), committed, visible up to ``watermark``."""
    clock = _Clock(_History())
    clock.history.records = [_Record(0, o, RecordMeta("w", 1, 1, TASK)) for o in range(4)]
    clock.history.arrive = [0] * 4
    commits = {("w", 1): _commit(1, {0: (0, 3)})}
    clock.history.states = [ControlState(epochs={"w": 1}, commits=commits, watermark={0: watermark})]
    return clock


def test_the_stream_reads_only_below_the_watermark_of_its_state(kafka: Any) -> None:
    clock = _one_batch_clock(watermark=1)
    kafka(clock.log())
    planner = _planner(clock, None)
    start = planner.initial_offset()
    latest = planner.latest_offset()
    assert latest["positions"] == {"0": 2, "1": 0}  # the watermark + 1, never the log end
    assert latest["log_end"] == {"0": 4, "1": 0} and latest["watermark"] == {"0": 1, "1": -1}
    assert [row for piece in planner.partitions(start, latest) for row in _read(piece)] == [(0, 0), (0, 1)]
    assert planner.latest_offset() == latest  # nothing new: the same offset, no micro-batch
    with pytest.raises(OptionError, match="option 'consistency': the checkpoint is of a eventual stream"):
        planner.partitions(latest, {**latest, "consistency": "eventual"})


def test_a_recreated_log_or_offsets_that_went_back_fail_the_stream_instead_of_skipping(kafka: Any) -> None:
    """A log that ends before the stream's positions (the topic was recreated since the checkpoint) fails
    the next planning: before, the stream waited in silence until the new topic grew past its positions,
    then skipped its first records. A micro-batch that would end before it starts fails too (its records
    would be handed out again)."""
    clock = _one_batch_clock(watermark=3)
    log = kafka(clock.log())
    planner = _planner(clock, None)
    start = planner.initial_offset()
    latest = planner.latest_offset()
    assert latest["positions"] == {"0": 4, "1": 0}
    assert len([row for piece in planner.partitions(start, latest) for row in _read(piece)]) == 4
    with pytest.raises(
        StreamReadError, match=r"would end before it starts \(partition: \(start, end\) \{0: \(4, 0\)\}"
    ):
        planner.partitions(latest, start)
    log.log = log.log[:2]  # recreated: it ends at 2 now
    with pytest.raises(
        StreamReadError,
        match=r"ends before the stream's positions \(partition: \(position, end\) \{0: \(4, 2\)\}",
    ):
        planner.latest_offset()


def test_a_restart_on_a_control_topic_created_again_fails_instead_of_deciding_on_another_history(
    kafka: Any,
) -> None:
    """The offsets name the control topic whose state decided them. A restart whose follower starts on a
    control topic of another id (the table dropped and created again under its name) fails: the replayed
    micro-batch's records would be decided against a history without their epochs (foreign, dropped).
    Offsets of older versions name none and are not checked."""
    clock = _one_batch_clock(watermark=3)
    kafka(clock.log())
    clock.started_topic_id = "control-1"  # type: ignore[attr-defined]
    planner = _planner(clock, None)
    start = planner.initial_offset()
    latest = planner.latest_offset()
    assert latest["control_topic_id"] == "control-1"
    assert StreamOffset.from_json(latest).to_json() == latest
    clock.started_topic_id = "control-2"  # type: ignore[attr-defined]
    restarted = _planner(clock, None)
    with pytest.raises(StreamReadError, match=r"id control-2, was control-1\): the table was dropped"):
        restarted.partitions(start, latest)
    older = {key: value for key, value in latest.items() if key != "control_topic_id"}
    assert len([row for piece in restarted.partitions(start, older) for row in _read(piece)]) == 4


def test_a_quiet_stream_hands_spark_an_empty_micro_batch_only_when_its_lag_changed_and_not_too_often(
    kafka: Any,
) -> None:
    """The lag refresh: a consistent stream whose positions stand still (the watermark did not move) but
    whose log end moved offers Spark a new offset, with the same positions and the new lag (an empty
    micro-batch: its progress shows the lag), at most every ``LAG_REFRESH_S``; with nothing changed it
    offers the same JSON (no micro-batch at all)."""
    clock = _one_batch_clock(watermark=1)
    log = kafka(clock.log())
    planner = _planner(clock, None)
    start = planner.initial_offset()
    latest = planner.latest_offset()
    assert [row for piece in planner.partitions(start, latest) for row in _read(piece)] == [(0, 0), (0, 1)]
    assert planner.latest_offset() == latest  # nothing changed: the same JSON
    log.log.append(_Record(0, 4, RecordMeta("w", 2, 1, TASK)))  # the log end moves, the watermark not
    assert planner.latest_offset() == latest  # within LAG_REFRESH_S of the last: not yet
    planner._lag_at -= source.LAG_REFRESH_S  # the refresh interval has passed
    refreshed = planner.latest_offset()
    assert refreshed != latest and refreshed["positions"] == latest["positions"]
    assert refreshed["log_end"] == {"0": 5, "1": 0} and latest["log_end"] == {"0": 4, "1": 0}
    assert planner.partitions(latest, refreshed) == []  # an empty micro-batch: nothing to read
    planner._lag_at -= source.LAG_REFRESH_S
    assert planner.latest_offset() == refreshed  # the lag did not change again: no micro-batch


def test_a_stream_whose_checkpoint_says_transactional_continues(kafka: Any) -> None:
    """A checkpoint of an older version names the consistency ``transactional`` (the old name of
    consistent): a restarted consistent stream takes it, goes on from its positions, and keeps the name in
    its later offsets (Spark compares offsets by their JSON: a rewritten name would look like progress)."""
    clock = _one_batch_clock(watermark=1)
    kafka(clock.log())
    old = {"version": 1, "mode": "log", "consistency": "transactional", "positions": {"0": 0, "1": 0},
           "origin": {"0": 0, "1": 0}}  # fmt: skip
    planner = _planner(clock, None)
    assert planner.partitions(old, old) == []  # Spark's setLatestSeenOffset: the checkpoint is accepted
    latest = planner.latest_offset()
    assert latest["consistency"] == "transactional" and latest["positions"] == {"0": 2, "1": 0}
    assert [row for piece in planner.partitions(old, latest) for row in _read(piece)] == [(0, 0), (0, 1)]
    assert planner.latest_offset() == latest  # nothing new: the same JSON, no micro-batch
    assert planner.initial_offset()["consistency"] == "consistent"  # a new stream says ours


def test_a_slice_hands_out_its_rows_in_partition_then_offset_order_however_the_broker_interleaves_them(
    kafka: Any,
) -> None:
    """S2 row for row: a micro-batch read again (a replay) hands Spark the same rows in the same order,
    although a broker's fetches may interleave a scan's partitions differently each time (a replayed
    micro-batch 0 of the SIGKILL test's consistent stream reached its sink with its rows in another
    order). Planted: one scan over all of the slice's partitions, as before: the reads differ."""
    log = [_Record(p, o, RecordMeta("w", 1, 1, TASK)) for p in range(3) for o in range(4)]
    commit = CommitInfo("w", 1, 1, offsets={p: (0, 3) for p in range(3)}, tasks=frozenset({TASK}))
    state = ControlState(epochs={"w": 1}, commits={commit.key: commit}, watermark=dict.fromkeys(range(3), 3))
    installed = kafka(log)
    for rule in (KeepRule(state, True, None, dict.fromkeys(range(3), 0)),  # consistent
                 KeepRule(None, False, None, dict.fromkeys(range(3), 0), follows=True)):  # fmt: skip
        piece = _slice(rule, [(0, 0, 4), (1, 0, 4), (2, 0, 4)], lookback=not rule.consistent)
        reads = []
        for seed in range(10):
            installed.interleave = random.Random(seed)
            reads.append(_read(piece))
        assert reads[0] == [(p, o) for p in range(3) for o in range(4)]
        assert all(rows == reads[0] for rows in reads)


def test_a_partition_is_handed_out_once_every_lower_one_reached_its_end_or_the_scan_ended() -> None:
    """``_PartitionOrder``: a higher partition's pieces wait for the lower ones; one whose last offsets
    never come (a transaction marker ends it) is done when the scan ends."""
    order = source._PartitionOrder([(0, 0, 4), (1, 0, 2), (2, 0, 3)])
    assert order.add(1, 1, "1a") == []  # partition 1 at its end, but 0 is not
    assert order.add(0, 1, "0a") == ["0a"]
    assert order.add(2, 1, "2a") == []
    assert order.add(0, 3, "0b") == ["0b", "1a", "2a"]  # 0 done, 1 done: 2 from now on
    assert order.add(2, 1, "2b") == ["2b"]  # 2 never reaches 2 (a marker)
    assert order.rest() == []
    order = source._PartitionOrder([(0, 0, 4), (1, 0, 2)])
    assert order.add(1, 1, "1a") == []
    assert order.add(0, 2, "0a") == ["0a"]  # offset 3 of partition 0 is a marker: no piece reaches it
    assert order.rest() == ["1a"]


def test_a_replayed_first_micro_batch_starts_where_it_was_planned_not_at_its_start_evaluated_again(
    kafka: Any,
) -> None:
    """Spark replays micro-batch 0 from ``initialOffset`` asked again (its start is not in the offset
    log). From ``latest`` that start has moved past the micro-batch's end by then: the replay still
    reads the records the first run read (the end's origin), not nothing. Planted: the start as Spark
    passes it (the replay returns no row)."""
    clock = _Clock(_History())
    clock.history.records = [_Record(0, o, RecordMeta("w", 1, 1, TASK)) for o in range(6)]
    clock.history.arrive = [0, 0, 1, 1, 2, 2]
    commit = _commit(1, {0: (0, 5)})
    clock.history.states = [
        ControlState(epochs={"w": 1}, commits={commit.key: commit}, watermark={0: mark}) for mark in (1, 3, 5)
    ]
    kafka(clock.log())
    planner = _planner(clock, None, start="latest")
    start = planner.initial_offset()
    assert start["positions"] == {"0": 2, "1": 0}
    clock.now = 1
    kafka(clock.log())
    end = planner.latest_offset()
    rows = [row for piece in planner.partitions(start, end) for row in _read(piece)]
    assert rows == [(0, 2), (0, 3)]
    # killed before the commit; the new driver's initialOffset is the log end now, past the end
    clock.now = 2
    kafka(clock.log())
    planner = _planner(clock, None, start="latest")
    again = planner.initial_offset()
    assert again["positions"] == {"0": 6, "1": 0}
    assert [row for piece in planner.partitions(again, end) for row in _read(piece)] == rows
    assert planner.latest_offset()["positions"] == {"0": 6, "1": 0}  # and it goes on from the end


def test_a_start_evaluated_again_is_the_streams_first_offset_rebuilt_from_the_end() -> None:
    """A hybrid stream from the current snapshot: asked again after a new commit, ``initialOffset`` names
    another snapshot; micro-batch 0 is replayed from the end's snapshot, its files not handed out yet.
    The end of the micro-batch before (same origin and snapshot) is taken as it is."""
    old = SnapshotStart(5, frozenset({"w/1"}), 11, ((0, 4),))
    new = SnapshotStart(6, frozenset({"w/2"}), 12, ((0, 9),))
    end = StreamOffset("hybrid", "transactional", {0: 7}, {0: 4}, old, "read")
    again = StreamOffset("hybrid", "transactional", {0: 9}, {0: 9}, new, "pending")
    assert source.replayed_start(again, end) == StreamOffset(
        "hybrid", "transactional", {0: 4}, {0: 4}, old, "pending"
    )
    before = StreamOffset("hybrid", "transactional", {0: 4}, {0: 4}, old, "read")
    assert source.replayed_start(before, end) is before


def test_slices_take_whole_partitions_balanced_by_records(
    kafka: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    planner = _planner(_Clock(_History(states=[ControlState()])), None)
    rule = KeepRule(None, True, None, {0: 0, 1: 0, 2: 0, 3: 0})
    monkeypatch.setattr(source, "SLICE_RECORDS", 10)

    def ranges(start: dict[int, int], end: dict[int, int], min_partitions: int | None = None) -> list[Any]:
        opts = replace(planner.opts, min_partitions=min_partitions)
        slices = source._log_slices(planner.reader, rule, start, end, opts, source_column=False)
        return [piece.ranges for piece in slices]

    # 37 records: three slices of at least 10; a partition with nothing to read is in none
    assert ranges({0: 0, 1: 0, 2: 5, 3: 9}, {0: 4, 1: 8, 2: 30, 3: 9}) == [
        ((0, 0, 4),), ((1, 0, 8),), ((2, 5, 30),)]  # fmt: skip
    # 24 records in 4 partitions: two slices, balanced (not 20 + 4)
    assert ranges({0: 0, 1: 0, 2: 0, 3: 0}, {0: 6, 1: 6, 2: 6, 3: 6}) == [
        ((0, 0, 6), (1, 0, 6)), ((2, 0, 6), (3, 0, 6))]  # fmt: skip
    # fewer records than a slice's: one slice, unless minPartitions asks for more (one per partition at most)
    small = ({0: 0, 1: 0, 2: 0}, {0: 1, 1: 2, 2: 5})
    assert ranges(*small) == [((0, 0, 1), (1, 0, 2), (2, 0, 5))]
    assert ranges(*small, min_partitions=2) == [((0, 0, 1), (1, 0, 2)), ((2, 0, 5),)]
    assert ranges(*small, min_partitions=3) == [((0, 0, 1),), ((1, 0, 2),), ((2, 0, 5),)]
    assert ranges(*small, min_partitions=8) == ranges(*small, min_partitions=3)
    # one large partition first: each later slice still gets a partition
    assert ranges({0: 0, 1: 0, 2: 0}, {0: 100, 1: 1, 2: 1}, min_partitions=3) == [
        ((0, 0, 100),), ((1, 0, 1),), ((2, 0, 1),)]  # fmt: skip
    assert source._log_slices(planner.reader, rule, {0: 3}, {0: 3}, planner.opts, source_column=False) == []


@pytest.mark.parametrize(
    ("records", "partitions", "min_partitions", "expected"),
    [(0, 0, None, 1), (999_999, 3, None, 1), (1_050_000, 3, None, 1), (2_500_000, 3, None, 2),
     (9_000_000, 3, None, 3), (1_000, 3, 2, 2), (1_000, 3, 5, 3), (5_000_000, 12, 2, 5)],
)  # fmt: skip
def test_a_slice_holds_a_million_records_unless_more_tasks_are_asked_for(
    records: int, partitions: int, min_partitions: int | None, expected: int
) -> None:
    assert source.slice_count(records, partitions, min_partitions) == expected


def test_the_one_by_one_rule_decides_as_the_bulk_rule(kafka: Any) -> None:
    """``_OneByOne`` (for the follower's rule) gives, record by record, what ``decide_many`` gives."""
    import numpy as np

    metas = [decode_headers(r.headers()) for r in LOG]
    codes = np.arange(len(LOG), dtype=np.int64)
    partitions = np.zeros(len(LOG), dtype=np.int64)
    offsets = np.asarray([r.offset() for r in LOG], dtype=np.int64)
    bulk = filter_for(_state(6), False, S, {0: 0}).decide_many(metas, codes, partitions, offsets)
    one = source._OneByOne(filter_for(_state(6), False, S, {0: 0})).decide_many(
        metas, codes, partitions, offsets
    )
    assert bulk[0].tolist() == one[0].tolist()
    assert [bulk[2][i] for i in bulk[1]] == [one[2][i] for i in one[1]]
    assert isinstance(KeepRule(None, False, None, {}).build(), ReadFilter)
    assert RecordType.REVERSAL is decode_headers(LOG[5].headers()).record_type
