"""Tail a LogStore table's log: second-level latency for eventual reads, snapshot-gated for consistent ones.

An eventual follower yields each record as soon as Kafka delivers it. A consistent follower also tails
the control topic and holds records until the visibility watermark passes them *and* its own control
state decides them; then it yields only the committed ones (exactly once). Its buffer is bounded: a
partition whose buffer is full is paused until it drains.

**From a snapshot** (``snapshot:S``) a follower is the log part of a hybrid read of S, so that S's rows
plus what it yields are each change once. A consistent follower keeps records by the batch reader's own
rule (:func:`~airflow_logstore.read.reader.filter_for`, with S's sequence number, positions and
``logstore.log-included``), built each round from its current control state. An eventual follower
decides at once, so it only drops what can never change: the committed records of the commits S holds
(decided by the state read at its start, which already knows every commit S holds), and reversals of
records below S's positions (it never returned them; a reversal only undoes a redundant record, which
no snapshot holds). It keeps everything else, as an eventual follower from any other start does (later
copies of reconciler records dropped, as every eventual reader drops them).

**Resume positions.** Every record a follower yields carries ``resume_position``: per partition the
first offset it has not handed out (every record below was yielded or filtered out by its rule), plain
JSON, plus what S holds when it follows from a snapshot. ``follow(reader, start=<that position>)``
goes on from there. A consistent follower releases a record only once it is decided, and a decision
never changes, so the resumed follower yields each committed record the first one did not, once. An
eventual one is at-least-once, as eventual reads are (see :class:`ResumePosition`).

**Control checkpoints.** The control topic is compacted: once a checkpoint retired a ledger entry and
its tombstone follows, the cleaner removes the entry. A follower that reads past offsets compaction
removed re-bases on the latest checkpoint when it covers any of them (:class:`ControlFollower`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

from airflow_logstore.core import control
from airflow_logstore.core.changelog import Normalizer
from airflow_logstore.core.codec import RecordMeta, RecordType, decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import Consistency
from airflow_logstore.core.visibility import Decision, ReadFilter, classify, retired_unknown
from airflow_logstore.exceptions import (
    FollowerLagError,
    KafkaUnavailableError,
    RecordDecodeError,
    StreamReadError,
    first_line,
)
from airflow_logstore.log import kafka_client
from airflow_logstore.log.control_topic import latest_checkpoint
from airflow_logstore.read.reader import (
    LogReader,
    LogRecord,
    ReadReport,
    SnapshotStart,
    StartPosition,
    filter_for,
)
from airflow_logstore.table.tables import merged_state

log = logging.getLogger(__name__)

#: A tailing reader keeps one fetch open per broker; the broker holds an empty fetch this long. Against
#: the librdkafka default (500 ms) it trims the tail a little (a kept producer, 600 records in batches of
#: 10 on the local broker: p99 56 ms vs 78 ms); the price is an empty fetch per 50 ms.
TAILING_CONSUMER_SETTINGS = {"fetch.wait.max.ms": 50}
#: A control follower asks its topic's id at least this often while it polls (:class:`ControlFollower`).
TOPIC_CHECK_S = 10.0

#: A consistent follower buffers at most about this many records per partition that the watermark has
#: not passed yet; a partition at the limit is paused until its buffer drains to half.
MAX_PENDING_PER_PARTITION = 50_000


class ControlFollower:
    """Keeps a ControlState current by tailing the control topic from its latest checkpoint.

    **Re-basing.** Compaction removes control records the follower may not have read yet: older records
    of a key (epoch claims, watermark moves with the ranges they settled) and, a day after their
    tombstones, ledger entries a checkpoint retired. Every removed offset it had not read shows as a
    jump in the offsets it consumes (``next`` is the offset it folds next). On a jump it reads the latest
    checkpoint; when that checkpoint's ``through`` is at or past ``next`` (it folded records this
    follower never did), its state is merged into the follower's (``control.rebased``: the checkpoint's
    state with every ledger entry, settled range, epoch and watermark the follower knew; the live
    snapshots' commits merged in again) and the follower goes on after ``through``. Keeping what the
    follower knew matters: a checkpoint retires the entry of a batch whose records retention deleted,
    and the follower may hold such records in its buffer (the simulation found it).

    Why that is enough: a ledger entry is removed only after the checkpoint that retired it (it folded
    the entry, so its ``through`` is past it) and the tombstone written after that checkpoint. So when
    the latest checkpoint, read after the records showing a jump were fetched, ends before ``next``, no
    entry in that jump or in any later jump of the same fetch was retired: what was removed there were
    older records of keys whose newest record the fold keeps anyway (epochs and the watermark merge by
    ``max``), and the follower's state is what a fresh reader's is. A state from a checkpoint decides
    every record as the whole topic does (invariants K1, K2), so the re-based state changes no decision
    the follower has made. At most one checkpoint read per :meth:`poll`.

    **A re-created topic.** Offsets only grow in one topic, so a record below ``next`` (after the
    follower's own seeks) means the consumer was reset: the topic was deleted and re-created under the
    same name (its history, on which every decision rests, is gone). The follower then asks the topic's
    id (``topic_id``), and it asks anyway every :data:`TOPIC_CHECK_S` seconds of polling (a new topic that
    grew past ``next`` before the consumer noticed shows no lower offset); another id than at the start
    raises :class:`~airflow_logstore.exceptions.StreamReadError`: the read cannot go on exactly once.

    :param consumer: the control topic's consumer (assigned here).
    :param topic: the control topic.
    :param latest: reads the latest checkpoint: (its state, the control offset after its ``through``).
    :param merge: adds what the state lacks and the table knows (the live snapshots' commits).
    :param topic_id: asks Kafka for the control topic's id (None: the topic is missing; not given: no
        check).
    """

    def __init__(
        self,
        consumer: Any,
        topic: str,
        latest: Callable[[], tuple[ControlState, int]],
        merge: Callable[[ControlState], ControlState],
        topic_id: Callable[[], str | None] | None = None,
    ) -> None:
        self.consumer, self.topic = consumer, topic
        self._latest, self._merge = latest, merge
        self.rebased = 0  # how often the state was re-based on a checkpoint (for reports and tests)
        self._topic_id = topic_id
        try:
            # the id first: a topic re-created before the state is read is found at the next check
            self._id = topic_id() if topic_id is not None else None
            self._checked = time.monotonic()
            state, start = latest()
            self.state = merge(state)
            self.next = start
            self._assign(start)
        except BaseException:
            consumer.close()
            raise

    @property
    def started_topic_id(self) -> str | None:
        """The control topic's id when this follower started on it (None: not asked)."""
        return self._id

    @classmethod
    def of(cls, reader: LogReader) -> ControlFollower:
        """The control follower of ``reader``'s table."""
        ctl = reader.control
        return cls(
            kafka_client.consumer(reader.kafka_config, **TAILING_CONSUMER_SETTINGS),
            ctl.topic,
            lambda: latest_checkpoint(ctl),
            lambda state: merged_state(reader.table, state),
            ctl.topic_id,
        )

    def poll(self, timeout: float = 0.0) -> bool:
        """Fold newly arrived control records; True when the watermark moved."""
        before = dict(self.state.watermark)
        checked = topic_checked = False
        if time.monotonic() - self._checked >= TOPIC_CHECK_S:
            try:
                self._check_topic()
            except KafkaUnavailableError as exc:  # a broker or the controller away: asked again later
                log.warning(
                    "control follower of '%s': its topic's id could not be checked (%s); checked again in "
                    "%.0fs (a reset of its offsets is checked at once, whatever it costs)",
                    self.topic,
                    first_line(exc),
                    TOPIC_CHECK_S,
                )
        for message in self.consumer.consume(num_messages=1000, timeout=timeout):
            if message.error() is not None:
                continue
            offset = message.offset()
            if offset < self.next:
                if not topic_checked:  # a reset: raises when the topic is another one
                    topic_checked = True
                    self._check_topic()
                continue  # folded already (fetched before a re-base)
            if offset > self.next and not checked:
                checked = True
                if self._rebase():
                    break  # the rest of this fetch is read again, after the checkpoint
            record = control.decode(
                message.key(), message.value(), offset, kafka_client.message_timestamp_ms(message)
            )
            if record is not None:
                control.fold([record], self.state)
            self.next = offset + 1
        return self.state.watermark != before

    def _check_topic(self) -> None:
        """Raise :class:`StreamReadError` when the control topic is not the one this follower started on."""
        self._checked = time.monotonic()
        if self._topic_id is None:
            return
        now = self._topic_id()
        if now != self._id:
            raise StreamReadError(
                f"control topic '{self.topic}' was deleted and re-created while this read followed it "
                f"(its id was {self._id}, it is {now} now; the follower had read up to offset "
                f"{self.next - 1}): the visibility history its decisions rest on is gone, so the read "
                "cannot go on exactly once; read again from a snapshot (and a new checkpoint)"
            )

    def _rebase(self) -> bool:
        """Replace the state with the latest checkpoint's when it folded offsets at or past ``next``."""
        state, start = self._latest()
        if start <= self.next:  # its ``through`` (start - 1) is below ``next``: nothing this state lacks
            return False
        # everything either state knows is a fact of the control topic; keeping the follower's own ledger
        # entries matters for records it holds whose entries the checkpoint retired (``control.rebased``)
        rebased = self._merge(control.rebased(state, self.state))
        log.info(
            "control follower of '%s': offsets from %s were compacted away; re-based on the checkpoint "
            "through %s",
            self.topic,
            self.next,
            start - 1,
        )
        self.state, self.next = rebased, start
        self.rebased += 1
        self._assign(start)
        return True

    def _assign(self, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(self.topic, 0, offset)])

    def close(self) -> None:
        self.consumer.close()


class ResumePosition:
    """Per partition the first offset a follower has not handed out: every record below it was yielded
    or filtered out by the follower's rule; a record still held (consistent) or not yet read is at or
    above it. Handed out as plain JSON with each record (``LogRecord.resume_position``).

    An eventual follower's position is at-least-once: a record it yields as two changes (normalize's
    ``-U``, ``+U``) counts as handed out only with the second (stopped between them, it yields both
    again), and what a follower remembers is not in the position (normalize's rows per key, the
    reconciler records it let through): resumed, it is an eventual read from those offsets, which may
    return a change again or a copy of a reconciler record whose first copy came before them.
    """

    def __init__(self, offsets: Mapping[int, int], hybrid: SnapshotStart | None) -> None:
        self.offsets = dict(offsets)
        self.hybrid = hybrid

    def token(self) -> dict[str, Any]:
        """The position as ``follow(reader, start=...)`` takes it back (a ``positions`` start)."""
        offsets = tuple(sorted(self.offsets.items()))
        return StartPosition("positions", None, offsets, self.hybrid).resume_token()


class EventualAfterSnapshot:
    """An eventual follower's rule from snapshot S: drop what can never change, keep the rest.

    :param rule: the hybrid read's rule for S (:func:`~airflow_logstore.read.reader.filter_for`) with
        the control state read at the follower's start; only its answer for committed records is used.
    :param floor: S's log positions (reversals of records below them are dropped).
    """

    def __init__(self, rule: ReadFilter, floor: Mapping[int, int]) -> None:
        self.rule, self.floor = rule, dict(floor)
        self.copies = ReadFilter(None, consistent=False)  # drops later copies of reconciler records kept

    def decide(self, meta: RecordMeta, partition: int, offset: int) -> tuple[bool, Decision | None]:
        decision: Decision | None = Decision.REVERSAL
        if meta.record_type is RecordType.REVERSAL and meta.reverses is not None:
            original_partition, original_offset = meta.reverses
            if original_offset < self.floor.get(original_partition, 0):
                return False, decision
        else:
            kept, decision = self.rule.rule(meta, partition, offset)
            if decision is Decision.COMMITTED and not kept:
                return False, decision  # S holds it: final (the start state knows S's commits)
        keep, copy = self.copies.decide(meta, partition, offset)
        return keep, decision if keep else copy


def follow(
    reader: LogReader,
    start: StartPosition | Mapping[Any, Any] | str = "latest",
    *,
    stop: Any = None,
    poll_timeout: float = 0.05,
) -> Generator[LogRecord, None, None]:
    """Yield records as they arrive (eventual) or as the watermark passes them (consistent).

    :param start: earliest, latest, timestamp:..., snapshot:<id>, or a record's ``resume_position``
        (the mapping itself, or ``positions:<its JSON>``).
    :param stop: an object with ``is_set()`` (e.g. ``threading.Event``) that ends the loop.
    """
    from confluent_kafka import TopicPartition

    start = StartPosition.of(start)
    report = ReadReport(
        str(reader.handle.name), "follow", reader.consistency.value, reader.changelog_mode.value
    )
    cons = kafka_client.consumer(reader.kafka_config, **TAILING_CONSUMER_SETTINGS)
    gated: ControlFollower | None = None
    pending: dict[int, list[Any]] = {}
    paused: set[int] = set()
    normalizer = Normalizer() if reader.normalize else None
    try:
        bounds = kafka_client.partition_offsets(cons, reader.topic, reader.config.partitions)
        first = reader.start_offsets(start, cons, bounds)
        hybrid = reader.snapshot_start(start)
        position = ResumePosition(first, hybrid)
        if reader.consistency is Consistency.CONSISTENT:
            gated = ControlFollower.of(reader)
        # one per read: it remembers the reconciler records it let through, and drops their later copies
        eventual: ReadFilter | EventualAfterSnapshot = ReadFilter(None, consistent=False)
        if gated is None and hybrid is not None:
            eventual = EventualAfterSnapshot(reader.read_filter(False, hybrid, first), dict(hybrid.positions))
        cons.assign([TopicPartition(reader.topic, p, o) for p, o in first.items()])
        while stop is None or not stop.is_set():
            if gated is not None:
                gated.poll(0)
            for message in cons.consume(num_messages=10000, timeout=poll_timeout):
                if message.error() is not None:
                    continue
                if gated is None:
                    yield from _hand_out(reader, message, eventual, report, normalizer, position)
                else:
                    pending.setdefault(message.partition(), []).append(message)
            if gated is not None:
                if gated.rebased:
                    _check_decidable(cons, reader.topic, pending, gated.state)
                rule = filter_for(gated.state, True, hybrid, first)
                yield from _release(reader, gated.state, rule, pending, report, position, normalizer)
                _flow_control(cons, reader.topic, pending, paused)
            reader.dead_letter.flush()  # a follower runs for long: its dead letters go out as they come
    finally:
        cons.close()
        reader.dead_letter.flush()
        if gated is not None:
            gated.close()


def _hand_out(
    reader: LogReader,
    message: Any,
    rule: ReadFilter | EventualAfterSnapshot,
    report: ReadReport,
    normalizer: Normalizer | None,
    position: ResumePosition,
) -> Iterator[LogRecord]:
    """Decode one record by ``rule`` and yield what it gives, each with the resume position after it."""
    partition, offset = message.partition(), message.offset()
    record = reader._decode(message, rule, report)
    outputs = reader._emit(record, normalizer, report) if record is not None else []
    for index, output in enumerate(outputs):
        position.offsets[partition] = offset + 1 if index == len(outputs) - 1 else offset
        output.resume_position = position.token()
        yield output
    position.offsets[partition] = offset + 1


def _release(
    reader: LogReader,
    state: ControlState,
    rule: ReadFilter,
    pending: dict[int, list[Any]],
    report: ReadReport,
    position: ResumePosition,
    normalizer: Normalizer | None = None,
) -> Iterator[LogRecord]:
    """Emit the buffered records the watermark has passed, in offset order per partition.

    A record the follower's own control state still finds undecided stays buffered, with everything
    after it in its partition, until the state decides it: holding is always safe, dropping is not.

    :param rule: the follower's read rule for ``state`` (see :func:`follow`).
    """
    for partition, messages in pending.items():
        mark = state.watermark.get(partition, -1)
        ready = 0
        while ready < len(messages) and messages[ready].offset() <= mark and _decided(messages[ready], state):
            ready += 1
        for message in messages[:ready]:
            yield from _hand_out(reader, message, rule, report, normalizer, position)
        del messages[:ready]


def _check_decidable(cons: Any, topic: str, pending: Mapping[int, list[Any]], state: ControlState) -> None:
    """Raise :class:`FollowerLagError` when a held record can no longer be decided (see
    :func:`~airflow_logstore.core.visibility.retired_unknown`): only after a re-base, and the log start is
    asked only for a record of a retired batch its state has no entry for."""
    starts: dict[int, int] = {}
    for partition, messages in pending.items():
        for message in messages:
            try:
                meta = decode_headers(message.headers())
            except RecordDecodeError:
                continue
            retired = state.retired.get(meta.writer_id)
            known = (meta.writer_id, meta.batch_id) in state.commits
            if retired is None or not retired.contains(meta.batch_id) or known:
                continue
            if partition not in starts:
                starts[partition] = kafka_client.partition_offsets(cons, topic, partition + 1)[partition][0]
            if retired_unknown(meta, partition, message.offset(), state, starts[partition]):
                raise FollowerLagError(
                    f"the follower held the record at partition {partition} offset {message.offset()} "
                    f"(writer '{meta.writer_id}', batch {meta.batch_id}), which retention has deleted "
                    "since, and lagged so far behind the control topic that compaction removed its batch's "
                    "ledger entry: whether it is committed cannot be told any more; follow again from a "
                    "snapshot (start='snapshot:<id>')"
                )


def _decided(message: Any, state: ControlState) -> bool:
    try:
        meta = decode_headers(message.headers())
    except RecordDecodeError:
        return True  # dead-lettered when released
    return not classify(meta, message.partition(), message.offset(), state).undecided


def _flow_control(cons: Any, topic: str, pending: Mapping[int, list[Any]], paused: set[int]) -> None:
    """Pause a partition whose buffer is full and resume it once it drained (bounded memory)."""
    from confluent_kafka import TopicPartition

    full = {p for p, messages in pending.items() if len(messages) >= MAX_PENDING_PER_PARTITION}
    if full - paused:
        cons.pause([TopicPartition(topic, p) for p in full - paused])
    drained = {p for p in paused if len(pending.get(p, ())) < MAX_PENDING_PER_PARTITION // 2}
    if drained:
        cons.resume([TopicPartition(topic, p) for p in drained])
    paused.symmetric_difference_update((full - paused) | drained)
