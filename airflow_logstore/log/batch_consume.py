"""A bounded topic scan for bulk readers: whole consumed batches, no Python step per message.

``kafka_client.scan`` looks at every message in Python to cut each partition at its end offset. A bulk
reader (``read.batches``) decodes a chunk of tens of thousands of records in a few vectorized steps, and
that per-message loop became a large share of its time. :func:`scan_chunks` yields the same messages in
the same batches, but finds errors, the messages past an end and the progress per partition with one
C-level pass per field (``map`` over the message methods, then numpy).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import KafkaUnavailableError

if TYPE_CHECKING:
    from confluent_kafka import Consumer


def scan_chunks(
    cons: Consumer,
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    *,
    chunk: int = 50_000,
    poll_timeout: float = 0.05,
    idle_timeout: float | None = None,
) -> Iterator[list[Any]]:
    """Yield batches of messages of ``topic`` from ``start`` (inclusive) to ``end`` (exclusive), as
    ``kafka_client.scan`` does (the same messages, the same errors, the same end after idling)."""
    import numpy as np
    from confluent_kafka import KafkaError, TopicPartition

    from airflow_logstore.log.kafka_client import request_timeout

    idle_timeout = request_timeout(idle_timeout)
    pending = {p: end[p] for p in end if start.get(p, 0) < end[p]}
    if not pending:
        return
    cons.assign([TopicPartition(topic, p, start.get(p, 0)) for p in pending])
    following = {p: start.get(p, 0) for p in pending}
    last_progress = time.monotonic()
    try:
        while pending:
            left = sum(pending[p] - following[p] for p in pending)
            messages = cons.consume(num_messages=max(1, min(chunk, left)), timeout=poll_timeout)
            if messages:
                kind = type(messages[0])
                if any(map(kind.error, messages)):
                    messages = _without_errors(messages, topic, KafkaError._PARTITION_EOF)
            batch: list[Any] = []
            if messages:
                kind = type(messages[0])
                partitions = np.fromiter(map(kind.partition, messages), np.int64, len(messages))
                offsets = np.fromiter(map(kind.offset, messages), np.int64, len(messages))
                stops = np.full(int(partitions.max(initial=0)) + 1, -1, dtype=np.int64)
                for partition, stop in pending.items():
                    if partition < len(stops):
                        stops[partition] = stop
                inside = offsets < stops[partitions]
                batch = messages if inside.all() else [messages[i] for i in np.flatnonzero(inside).tolist()]
                for partition in np.unique(partitions[inside]).tolist():
                    following[partition] = int(offsets[inside & (partitions == partition)].max()) + 1
                    if following[partition] >= pending[partition]:
                        del pending[partition]
            if batch:
                last_progress = time.monotonic()
                yield batch
            elif time.monotonic() - last_progress > idle_timeout:
                positions = {
                    tp.partition: tp.offset
                    for tp in cons.position([TopicPartition(topic, p) for p in pending])
                }
                # Offsets below the end may be gone (transaction markers, compaction): treat as reached.
                for partition, position in positions.items():
                    if position >= pending.get(partition, 0) or position < 0:
                        pending.pop(partition, None)
                if pending:
                    raise KafkaUnavailableError(
                        f"no progress reading '{topic}' for {idle_timeout:.0f}s (positions {positions}, "
                        f"targets {pending})"
                    )
    finally:
        cons.unassign()


def _without_errors(messages: list[Any], topic: str, partition_eof: int) -> list[Any]:
    """The messages that are records; end-of-partition events dropped, any other error raised."""
    kept = []
    for message in messages:
        error = message.error()
        if error is None:
            kept.append(message)
        elif error.code() != partition_eof:
            raise KafkaUnavailableError(f"reading '{topic}' failed: {error.str()}")
    return kept
