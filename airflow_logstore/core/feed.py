"""The committed feed: which log records a publish copies to ``<topic>.committed``, and its progress.

A table with ``log-store.committed-feed.enabled=true`` gets a second topic, ``<topic>.committed``, with the
log topic's partitions. Each publish copies, partition by partition and in log order, the records that
became visible to a consistent reader (the same rule: :class:`~airflow_logstore.core.visibility.ReadFilter`)
into the same partition of the committed topic, key, value and headers as they are. The copy and the
feed's *progress* (per log partition the first offset not yet considered) commit in one Kafka
transaction; a ``read_committed`` consumer of the committed topic then sees each committed change exactly
once, with no knowledge of the protocol.

This module is the pure part: names, the range a copy covers, which records it takes, and the progress
record's encoding (the topics' names: ``LogStoreConfig.feed_topics``). The I/O is in
:mod:`airflow_logstore.publish.feed`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core.codec import decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.visibility import ReadFilter
from airflow_logstore.exceptions import RecordDecodeError

PROGRESS_KEY = b"progress"
PROGRESS_VERSION = 1


def feed_transactional_id(log_topic: str) -> str:
    """The one Kafka transactional id of the table's feed: each publisher takes it before it reads the
    progress, which fences every earlier publisher (its open copy is aborted, its commit fails)."""
    return f"logstore-feed-{log_topic}"


def encode_progress(offsets: Mapping[int, int]) -> bytes:
    """The progress record: per log partition the first offset no copy has considered yet."""
    body = {"version": PROGRESS_VERSION, "offsets": {str(p): int(o) for p, o in sorted(offsets.items())}}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_progress(value: bytes | None) -> dict[int, int]:
    """The offsets of a progress record (:func:`encode_progress`); ValueError when it is not one."""
    if value is None:
        raise ValueError("the progress record has no value")
    body = json.loads(value)
    if not isinstance(body, dict) or body.get("version") != PROGRESS_VERSION:
        raise ValueError(f"not a committed-feed progress record of version {PROGRESS_VERSION}: {body!r}")
    return {int(p): int(o) for p, o in body["offsets"].items()}


@dataclass(frozen=True)
class CopyRange:
    """What one publish copies: per partition from ``start`` (inclusive) to ``end`` (exclusive).

    ``gaps`` are the partitions whose progress is below the log start: records retention deleted before
    any copy took them (``[progress, log start)``); the feed lost them, and says so.
    """

    start: dict[int, int]
    end: dict[int, int]
    gaps: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return all(self.end[p] <= self.start[p] for p in self.start)


def copy_range(
    progress: Mapping[int, int], watermark: Mapping[int, int], log_start: Mapping[int, int]
) -> CopyRange:
    """From the feed's progress (a partition without one: offset 0) up to and including the watermark;
    never backwards (a publish whose watermark is behind the progress copies nothing). Below the log
    start a copy cannot go: what retention deleted there is a gap (for a feed enabled on a table whose
    log retention already trimmed, its first copy names the history it never had).

    :param log_start: per log partition its first offset (retention deleted the ones below).
    """
    start, end, gaps = {}, {}, {}
    for partition, low in log_start.items():
        done = progress.get(partition, 0)
        if done < low:
            gaps[partition] = (done, low)
        start[partition] = max(done, low)
        end[partition] = max(start[partition], watermark.get(partition, -1) + 1)
    return CopyRange(start, end, gaps)


@dataclass
class FeedCopy:
    """Decides, record by record in log order per partition, what a copy takes, and keeps its progress.

    A record is taken exactly when a consistent read with ``state`` and ``watermark`` returns it:
    :class:`ReadFilter`'s rule, the one every reader uses (no failed attempt's record, no reversal or
    reassert, no log-only record). Undecodable records are left out, as consistent readers leave them
    (they dead-letter them).

    :param progress: the progress before the copy (:attr:`CopyRange.start`).
    """

    state: ControlState
    watermark: Mapping[int, int]
    progress: dict[int, int]
    counts: dict[str, int] = field(default_factory=dict)
    _filter: ReadFilter = field(init=False)

    def __post_init__(self) -> None:
        self._filter = ReadFilter(self.state, consistent=True)
        self.progress = dict(self.progress)

    def take(self, partition: int, offset: int, headers: Any) -> bool:
        """True when the record at ``partition``/``offset`` (with these Kafka headers) is copied."""
        if offset > self.watermark.get(partition, -1):
            raise ValueError(f"record {partition}:{offset} is above the watermark: a copy never reaches it")
        if offset < self.progress.get(partition, 0):
            raise ValueError(f"record {partition}:{offset} is below the progress: it was considered already")
        self.progress[partition] = offset + 1
        try:
            meta = decode_headers(headers)
        except RecordDecodeError:
            self._count("undecodable")
            return False
        keep, decision = self._filter.decide(meta, partition, offset)
        self._count("copied" if keep else (decision.value if decision is not None else "skipped"))
        return keep

    def finish(self, end: Mapping[int, int]) -> dict[int, int]:
        """The progress after a scan that reached ``end`` in every partition (an offset below it that
        held no record, such as a transaction marker's, counts as passed)."""
        for partition, stop in end.items():
            self.progress[partition] = max(self.progress.get(partition, 0), stop)
        return dict(self.progress)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
