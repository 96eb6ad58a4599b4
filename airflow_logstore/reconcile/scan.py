"""The reconciler's log scan: partitions read with librdkafka and planned, in one or several processes.

Kept apart from :mod:`airflow_logstore.reconcile.reconciler` so that scan worker processes import
only what they need (librdkafka, the codec and the planner; no pyiceberg, no Spark). Per record the
costly part is in the client library (fetching, and building the Python header list, skipped inside
dense commit spans). On machines with spare cores a large backlog can be scanned by worker
processes, one per group of partitions (``workers``); each returns its partitions' plans (statistics
and the few records to write) and the parent produces them. Each worker has its own fetch buffers.
"""

from __future__ import annotations

import bisect
import functools
import logging
import multiprocessing
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from airflow_logstore.core import reconcile as core
from airflow_logstore.core.codec import decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.visibility import Decision
from airflow_logstore.exceptions import RecordDecodeError
from airflow_logstore.log import jvm_scan, kafka_client
from airflow_logstore.log.deadletter import DeadLetterTopic

log = logging.getLogger(__name__)

DEAD_LETTER_FLUSH_EVERY = 5000
#: below this many records in the window, scanning in this process beats starting workers
PARALLEL_MIN_RECORDS = 200_000
CONSUME_BATCH = 1000
#: Fetch size sets the scan rate (one fetch in flight per broker: ~115k records/s with librdkafka's 1 MB
#: per partition, ~350-400k/s with 4 MB on the 2-core test machine) and the consumer's buffer memory
#: (about +200 MB with 4 MB fetches; it levels off, it does not grow with the backlog).
SCAN_CONSUMER_SETTINGS: dict[str, Any] = {
    "max.partition.fetch.bytes": 4 * 1024 * 1024,
    "fetch.max.bytes": 12 * 1024 * 1024,
    "queued.max.messages.kbytes": 4096,
}


@dataclass
class ScanTask:
    """One worker's share of a run: some partitions' windows, and everything to classify them."""

    topic: str
    kafka_config: dict[str, Any]
    starts: dict[int, int]
    ends: dict[int, int]
    state: ControlState
    lookback: dict[int, tuple[int, int]]
    dead_letter_topic: str | None  # None: count only (dry run)
    replication_factor: int | None = None  # None: the broker's default


def scan_task(task: ScanTask) -> list[core.PartitionPlan]:
    """Scan and plan the task's partitions (runs in this process or in a worker)."""
    planners = _planners(task)
    dead = None
    if task.dead_letter_topic is not None:
        dead = DeadLetterTopic(task.kafka_config, task.dead_letter_topic, task.replication_factor)
    cons = kafka_client.consumer(task.kafka_config, **SCAN_CONSUMER_SETTINGS)
    try:
        # Records deleted by retention while the scan runs are skipped by the consumer's
        # ``auto.offset.reset=earliest`` (skip_reset); the planner reports them as a gap.
        for batch in kafka_client.scan(
            cons, task.topic, task.starts, task.ends, batch_size=CONSUME_BATCH, skip_reset=True
        ):
            for partition, run in _partition_runs(batch):
                _feed_partition(planners[partition], run, task.topic, dead)
    finally:
        cons.close()
    if dead is not None:
        dead.flush()
    return [planner.finish() for planner in planners.values()]


def jvm_scan_task(task: ScanTask) -> list[core.PartitionPlan]:
    """:func:`scan_task` with the records read by a JVM (:mod:`airflow_logstore.log.jvm_scan`) and fed
    to the planners as columns: only the records whose headers must be read (outside dense commit spans,
    and not of a committed or log-only attempt), and those of keys the planner follows, are fed one by
    one; the others are counted in bulk."""
    planners = _planners(task)
    dead = None
    if task.dead_letter_topic is not None:
        dead = DeadLetterTopic(task.kafka_config, task.dead_letter_topic, task.replication_factor)
    dense = {p: [(low, high) for low, high, _ in planner.dense] for p, planner in planners.items()}
    scan = jvm_scan.JvmScan(
        task.kafka_config,
        task.topic,
        task.starts,
        task.ends,
        dense=dense,
        lookback={p: [span] for p, span in task.lookback.items()},
    )
    decided: dict[tuple[int, int], _SetDecision] = {}
    generation = 0
    for chunk in scan.chunks():
        if scan.generation != generation:  # the header set ids start again
            decided.clear()
            generation = scan.generation
        feed_chunk(planners[chunk.partition], chunk, scan.header_sets, decided, task.topic, dead)
    if dead is not None:
        dead.flush()
    return [planner.finish() for planner in planners.values()]


#: per record sent in a chunk: counted as committed, counted as log-only, fed to ``observe`` (its headers
#: decide), or in a dense span (counted with the span) and fed to ``legit`` only if its key is followed
_COMMITTED, _LOG_ONLY, _OBSERVE, _DENSE = 0, 1, 2, 3
_CODES = {Decision.COMMITTED: _COMMITTED, Decision.LOG_ONLY: _LOG_ONLY}
#: a header set's records: (commit span or None, code inside the span, code outside it)
_SetDecision = tuple["tuple[int, int] | None", int, int]


def feed_chunk(
    planner: core.PartitionPlanner,
    chunk: Any,
    header_sets: Sequence[Any],
    decided: dict[tuple[int, int], _SetDecision],
    topic: str,
    dead: DeadLetterTopic | None,
) -> None:
    """Feed a :class:`~airflow_logstore.log.jvm_scan.Chunk` to its partition's planner: what feeding each
    of its partition's records at offsets [first, last] with :meth:`~core.PartitionPlanner.known` or
    :meth:`~core.PartitionPlanner.observe` does, with one step per header set and per dense span instead
    of per record. The records of dense spans are counted by the spans' overlap with [first, last]; the
    chunk holds only those of them whose key the planner may follow (and those in its lookback range)."""
    import numpy as np

    codes = _codes(planner, chunk, header_sets, decided)
    counts = _dense_counts(planner, chunk.first, chunk.last)
    counts[Decision.COMMITTED] += int(np.count_nonzero(codes == _COMMITTED))
    counts[Decision.LOG_ONLY] += int(np.count_nonzero(codes == _LOG_ONLY))
    planner.count_known(chunk.first, counts)
    observe = np.flatnonzero(codes == _OBSERVE)
    if not len(observe) and not planner.follows_keys:
        return
    picked = _one_by_one(planner, chunk, codes, observe)
    records = zip(
        picked.tolist(),
        chunk.offsets[picked].tolist(),
        codes[picked].tolist(),
        chunk.header_sets[picked].tolist(),
        chunk.keys.pick(picked),
        chunk.values.pick(picked),
        strict=True,
    )
    for index, offset, code, number, key, value in records:
        if code != _OBSERVE:
            planner.legit(offset, key, value)
            continue
        headers = header_sets[number]
        reason = planner.observe(offset, key, headers, value)
        if reason is not None and dead is not None:
            dead.add(topic, jvm_scan.scanned_record(chunk, index, headers), reason)
            if dead.count % DEAD_LETTER_FLUSH_EVERY == 0:
                dead.flush()


def _dense_counts(planner: core.PartitionPlanner, first: int, last: int) -> dict[Decision, int]:
    """Per decision, how many offsets of [first, last] lie in the planner's dense spans (a dense span
    holds one record per offset: its sizes add up to its commit's record count)."""
    counts = {Decision.COMMITTED: 0, Decision.LOG_ONLY: 0}
    dense = planner.dense
    for at in range(bisect.bisect_left(dense, first, key=_span_end), len(dense)):
        low, high, decision = dense[at]
        if low > last:
            break
        counts[decision] += min(high, last) - max(low, first) + 1
    return counts


def _codes(
    planner: core.PartitionPlanner,
    chunk: Any,
    header_sets: Sequence[Any],
    decided: dict[tuple[int, int], _SetDecision],
) -> Any:
    """Per record sent: ``_DENSE`` (header set -1), else by its header set ``_COMMITTED`` or ``_LOG_ONLY``
    (counted) or ``_OBSERVE``. One step per distinct header set, the rest vectorized (a chunk may hold
    thousands of sets: each reversal has its own)."""
    import numpy as np

    offsets, sets = chunk.offsets, chunk.header_sets
    codes = np.full(len(offsets), _DENSE, dtype=np.int8)
    read = np.flatnonzero(sets >= 0)
    if not len(read):
        return codes
    numbers, which = np.unique(sets[read], return_inverse=True)
    inside = np.empty(len(numbers), dtype=np.int8)
    outside = np.empty(len(numbers), dtype=np.int8)
    lows = np.zeros(len(numbers), dtype=np.int64)
    highs = np.full(len(numbers), -1, dtype=np.int64)
    for at, number in enumerate(numbers.tolist()):
        span, inside[at], outside[at] = _set_decision(planner, header_sets, number, decided)
        if span is not None:
            lows[at], highs[at] = span
    at_offsets = offsets[read]
    within = (at_offsets >= lows[which]) & (at_offsets <= highs[which])
    codes[read] = np.where(within, inside[which], outside[which])
    return codes


def _span_end(span: tuple[int, int, Decision]) -> int:
    return span[1]


def _set_decision(
    planner: core.PartitionPlanner,
    header_sets: Sequence[Any],
    number: int,
    decided: dict[tuple[int, int], _SetDecision],
) -> _SetDecision:
    """How the records of one header set are fed in the planner's partition (once per scan)."""
    found = decided.get((number, planner.partition))
    if found is not None:
        return found
    try:
        meta = decode_headers(header_sets[number])
    except RecordDecodeError:
        result: _SetDecision = (None, _OBSERVE, _OBSERVE)  # observe dead-letters each record
    else:
        _, span, inside, outside = planner.classify.entry(meta, planner.partition)
        if inside is None or outside is None:  # decided per offset (settled ranges)
            result = (None, _OBSERVE, _OBSERVE)
        else:
            result = (span, _CODES.get(inside, _OBSERVE), _CODES.get(outside, _OBSERVE))
    decided[(number, planner.partition)] = result
    return result


def _one_by_one(planner: core.PartitionPlanner, chunk: Any, codes: Any, observe: Any) -> Any:
    """Indexes of the records to feed one by one, in offset order: those whose headers decide
    (``observe``), those sent from dense spans (the JVM sends them only when their key is followed, a
    superset of the keys the planner tracks, or in the lookback range), and the counted records of keys
    the planner follows (tracked, or that a record read here may make tracked) or in its lookback range.
    A record fed whose key the planner does not track is only looked at."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = chunk.offsets
    follow = codes >= _OBSERVE
    counted = np.flatnonzero(~follow)
    if len(counted):
        keys = {*planner.tracked_keys(), *(k for k in chunk.keys.pick(observe) if k is not None)}
        if keys:
            wanted = pa.array(list(keys), type=pa.large_binary())
            counted_keys = chunk.keys.arrow().take(pa.array(counted))
            follow[counted] = pc.is_in(counted_keys, value_set=wanted).to_numpy(zero_copy_only=False)
    if planner.lookback is not None:
        low, high = planner.lookback
        follow |= (offsets >= low) & (offsets <= high)
    return np.flatnonzero(follow)


def _partition_runs(messages: list[Any]) -> Iterator[tuple[int, list[Any]]]:
    """The messages as runs of consecutive messages of one partition (librdkafka hands out a
    partition's fetched messages together: a batch is usually one run)."""
    start, current = 0, messages[0].partition()
    for at in range(1, len(messages)):
        partition = messages[at].partition()
        if partition != current:
            yield current, messages[start:at]
            start, current = at, partition
    yield current, messages[start:]


def _feed_partition(
    planner: core.PartitionPlanner, messages: list[Any], topic: str, dead: DeadLetterTopic | None
) -> None:
    """Feed consecutive messages of one partition to its planner: each run inside a dense commit span
    at once (no headers), every other message on its own (its headers decide)."""
    at, count = 0, len(messages)
    while at < count:
        message = messages[at]
        offset = message.offset()
        dense_end = planner.dense_end(offset)
        if dense_end is not None:  # committed, no headers needed: up to the span's end at once
            stop = bisect.bisect_right(messages, dense_end, lo=at, key=_offset)
            run = messages[at:stop]
            planner.known_many(offset, len(run), functools.partial(_records, run))
            at = stop
            continue
        reason = planner.observe(offset, message.key(), message.headers(), message.value())
        if reason is not None and dead is not None:
            dead.add(topic, message, reason)
            if dead.count % DEAD_LETTER_FLUSH_EVERY == 0:
                dead.flush()  # bounded memory on a topic full of foreign records
        at += 1


def _records(messages: list[Any]) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    return ((m.offset(), m.key(), m.value()) for m in messages)


def _offset(message: Any) -> int:
    return int(message.offset())


def _planners(task: ScanTask) -> dict[int, core.PartitionPlanner]:
    """One planner per partition of the task, sharing one classifier (one cache of decisions)."""
    classifier = core.Classifier(task.state)
    return {
        p: core.PartitionPlanner(
            p, task.starts[p], task.ends[p], classifier, task.lookback.get(p), core.dense_spans(task.state, p)
        )
        for p in sorted(task.ends)
    }


def split(sizes: Mapping[int, int], workers: int) -> list[list[int]]:
    """Partitions in ``workers`` groups of about equal record counts (largest first, to the lightest)."""
    groups: list[list[int]] = [[] for _ in range(max(1, workers))]
    loads = [0] * len(groups)
    for partition in sorted(sizes, key=lambda p: (-sizes[p], p)):
        lightest = loads.index(min(loads))
        groups[lightest].append(partition)
        loads[lightest] += sizes[partition]
    return [sorted(group) for group in groups if group]


def scan(
    task: ScanTask,
    *,
    workers: int | None = None,
    parallel_min_records: int = PARALLEL_MIN_RECORDS,
    scanner: str = "auto",
) -> list[core.PartitionPlan]:
    """Scan every partition of ``task``: in a JVM (:func:`jvm_scan_task`), or with librdkafka in this
    process or, when the window is large, in ``workers`` worker processes."""
    sizes = {p: max(0, task.ends[p] - task.starts[p]) for p in task.ends}
    busy = [p for p, size in sizes.items() if size]
    chosen = jvm_scan.choose_scanner(scanner, sum(sizes.values()))
    log.info("scanning %d records of %d partitions with %s", sum(sizes.values()), len(busy), chosen)
    if chosen == "jvm":
        return jvm_scan_task(task)
    if workers is None:
        workers = 1
    if workers <= 1 or len(busy) <= 1 or sum(sizes.values()) < parallel_min_records:
        return scan_task(task)
    groups = split({p: sizes[p] for p in busy}, workers)
    idle = [p for p in task.ends if p not in busy]
    tasks = [_subtask(task, group) for group in groups]
    if idle:
        tasks[0] = _subtask(task, [*groups[0], *idle])
    plans: list[core.PartitionPlan] = []
    context = multiprocessing.get_context("spawn")  # never fork a process with client threads
    with ProcessPoolExecutor(max_workers=len(tasks), mp_context=context) as pool:
        for result in pool.map(scan_task, tasks):
            plans.extend(result)
    return sorted(plans, key=lambda plan: plan.stats.partition)


def _subtask(task: ScanTask, partitions: Sequence[int]) -> ScanTask:
    return ScanTask(
        task.topic,
        {k: v for k, v in task.kafka_config.items() if not callable(v)},
        {p: task.starts[p] for p in partitions},
        {p: task.ends[p] for p in partitions},
        task.state,
        {p: span for p, span in task.lookback.items() if p in partitions},
        task.dead_letter_topic,
        task.replication_factor,
    )
