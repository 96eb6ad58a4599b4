"""What the health view reads of a table, and how: the I/O behind :mod:`airflow_logstore.health.view`.

:class:`TableProbe` is the interface (tests give a fake); :class:`LiveProbe` reads a real table through
the same code paths as ``logstore table show`` and publishing: pyiceberg for the metadata, the Kafka
offsets of the log, the control state read (the latest checkpoint plus the control records after it),
and the one topic scan of :mod:`airflow_logstore.log.kafka_client` for the bounded reads above the
watermark and of the control topic's recent records. Nothing here scans a whole log.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

from airflow_logstore.compaction.policy import FileStats, file_stats, snapshot_infos
from airflow_logstore.core import control
from airflow_logstore.core.control import ControlRecord, ControlState
from airflow_logstore.core.properties import LogStoreConfig
from airflow_logstore.health.view import TableFacts, TailRecord
from airflow_logstore.log import kafka_client
from airflow_logstore.table.catalog import CatalogSpec
from airflow_logstore.table.discovery import logstore_tables
from airflow_logstore.table.tables import LogSide, LogStoreTable

Bounds = dict[int, tuple[int, int]]


class TableProbe(Protocol):
    """The reads of one table the view makes, each on its own (the caller decides their order)."""

    name: str

    def facts(self) -> TableFacts:
        """The table's settings and snapshots, loaded now (each call loads the metadata again)."""
        ...

    def file_stats(self, facts: TableFacts) -> FileStats | None:
        """The data and delete files of the current snapshot (None: the table has no snapshot)."""
        ...

    def log_bounds(self, config: LogStoreConfig) -> Bounds:
        """Per log partition (log start offset, end offset)."""
        ...

    def control_state(self, config: LogStoreConfig) -> ControlState:
        """The control state: the latest checkpoint and the control records after it."""
        ...

    def tail(
        self, config: LogStoreConfig, start: Mapping[int, int], end: Mapping[int, int]
    ) -> list[TailRecord]:
        """The log records from ``start`` (inclusive) to ``end`` (exclusive), per partition."""
        ...

    def control_history(
        self, config: LogStoreConfig, since_ms: int, limit: int
    ) -> tuple[list[ControlRecord], bool]:
        """The control records written since ``since_ms``, at most ``limit`` of them (spread over the
        window when it holds more: :func:`history_ranges`), in offset order; and whether it held more
        (then the records read are a sample)."""
        ...


class _StatsCache:
    """File statistics by (table location, snapshot id): a snapshot's files never change, so each
    snapshot's manifests are read once per process, however often the page is loaded."""

    def __init__(self, size: int = 256) -> None:
        self._entries: OrderedDict[tuple[str, int, int], FileStats] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> FileStats | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, int, int], stats: FileStats) -> None:
        with self._lock:
            self._entries[key] = stats
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


FILE_STATS = _StatsCache()


class LiveProbe:
    """A real table's reads, through its :class:`~airflow_logstore.table.tables.LogStoreTable` handle."""

    def __init__(self, handle: LogStoreTable) -> None:
        self.handle = handle
        self.name = str(handle.name)
        self._table: Any = None
        self._side: LogSide | None = None

    def facts(self) -> TableFacts:
        table = self._table = self.handle.load()
        current = table.current_snapshot()
        return TableFacts(
            name=self.name,
            location=table.location(),
            config=self.handle.config(table),
            current_snapshot_id=current.snapshot_id if current is not None else None,
            snapshots=snapshot_infos(table),
        )

    def file_stats(self, facts: TableFacts) -> FileStats | None:
        if facts.current_snapshot_id is None:
            return None
        key = (facts.location, facts.current_snapshot_id, facts.config.compaction.small_file_size)
        stats = FILE_STATS.get(key)
        if stats is None:
            table = self._table if self._table is not None else self.handle.load()
            stats = file_stats(table, key[2], facts.current_snapshot_id)
            FILE_STATS.put(key, stats)
        return stats

    def log_side(self, config: LogStoreConfig) -> LogSide:
        """The log side of ``config`` (the settings :meth:`facts` read), gathered once for them."""
        if self._side is None or self._side.config is not config:
            self._side = self.handle.log_side_of(config)
        return self._side

    def log_bounds(self, config: LogStoreConfig) -> Bounds:
        side = self.log_side(config)
        cons = kafka_client.consumer(side.kafka_config)
        try:
            return kafka_client.partition_offsets(cons, side.topic, config.partitions)
        finally:
            cons.close()

    def control_state(self, config: LogStoreConfig) -> ControlState:
        return self.log_side(config).control.read()

    def tail(
        self, config: LogStoreConfig, start: Mapping[int, int], end: Mapping[int, int]
    ) -> list[TailRecord]:
        side = self.log_side(config)
        cons = kafka_client.consumer(side.kafka_config, **{"fetch.wait.max.ms": 5})
        try:
            return [
                TailRecord(m.partition(), m.offset(), kafka_client.message_timestamp_ms(m), m.headers())
                for batch in kafka_client.scan(cons, side.topic, start, end)
                for m in batch
            ]
        finally:
            cons.close()

    def control_history(
        self, config: LogStoreConfig, since_ms: int, limit: int
    ) -> tuple[list[ControlRecord], bool]:
        side = self.log_side(config)
        control_topic = side.control.topic
        cons = kafka_client.consumer(side.kafka_config, **{"fetch.wait.max.ms": 5})
        try:
            low, end = kafka_client.partition_offsets(cons, control_topic, 1)[0]
            first = max(kafka_client.offsets_for_time(cons, control_topic, 1, since_ms)[0], low)
            ranges = history_ranges(first, end, limit)
            records = []
            for start, stop in ranges:
                for batch in kafka_client.scan(cons, control_topic, {0: start}, {0: stop}):
                    for m in batch:
                        stamp = kafka_client.message_timestamp_ms(m)
                        record = control.decode(m.key(), m.value(), m.offset(), stamp)
                        if record is not None:
                            records.append(record)
            return records, len(ranges) > 1
        finally:
            cons.close()


#: A window with more control records than a page load reads is read in this many evenly spaced slices.
HISTORY_SLICES = 12


def history_ranges(first: int, end: int, limit: int, slices: int = HISTORY_SLICES) -> list[tuple[int, int]]:
    """The offset ranges of the control topic a lag chart reads from a window ``[first, end)``: all of
    it when it holds at most ``limit`` records, else ``slices`` evenly spaced ranges of ``limit //
    slices`` records each, the last ending at ``end`` (the chart then spans the window, sampled, not
    only its newest part). Ranges are ascending and never overlap."""
    if end - first <= limit:
        return [(first, end)] if end > first else []
    slices = max(1, min(slices, limit))
    size = max(1, limit // slices)
    if slices == 1:
        return [(end - size, end)]
    step = (end - first - size) / (slices - 1)  # > size: the window holds more than slices * size
    starts = [first + int(i * step) for i in range(slices - 1)] + [end - size]
    return [(start, start + size) for start in starts]


def catalog_probes(catalog: CatalogSpec, kafka_extra: Mapping[str, Any] | None = None) -> list[LiveProbe]:
    """A probe for every table of ``catalog`` whose log is enabled (as scheduled reconciliation finds)."""
    return [LiveProbe(LogStoreTable.open(name, catalog, kafka_extra)) for name in logstore_tables(catalog)]
