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
import multiprocessing
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from airflow_logstore.core import reconcile as core
from airflow_logstore.core.control import ControlState
from airflow_logstore.log import kafka_client
from airflow_logstore.log.deadletter import DeadLetterTopic

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
    task: ScanTask, *, workers: int | None = None, parallel_min_records: int = PARALLEL_MIN_RECORDS
) -> list[core.PartitionPlan]:
    """Scan every partition of ``task``, in worker processes when the window is large."""
    sizes = {p: max(0, task.ends[p] - task.starts[p]) for p in task.ends}
    busy = [p for p, size in sizes.items() if size]
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
