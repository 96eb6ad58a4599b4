"""Decoding log records in bulk: a chunk of Kafka messages becomes one Arrow table of the kept records.

Per chunk, not per record:

- headers: records of one writer task carry the same headers, so the chunk's records are grouped by
  their header bytes and each distinct header set is decoded once (``codec.decode_headers``);
- decisions: ``ReadFilter.decide_many`` calls the one rule (``visibility.classify``) once per header set,
  partition and offset segment, and gives every record of the group that answer;
- values: the kept records' values are parsed together by Arrow against the table schema
  (``codec.decode_values_bulk``), exactly as ``decode_value`` + ``typed_row`` would one by one.

Records that cannot be decoded (headers or value) come back with their reasons, for the dead-letter
topic: never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import RecordMeta, decode_headers, decode_values_bulk
from airflow_logstore.core.visibility import Decision, ReadFilter
from airflow_logstore.exceptions import RecordDecodeError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

#: The columns a log read adds after the table's columns, in this order.
META_COLUMNS = ("_kind", "_partition", "_offset", "_writer_id", "_epoch", "_batch_id", "_record_type")
#: How many records a bulk reader asks Kafka for at once (one decoded chunk).
CHUNK_RECORDS = 50_000


@dataclass
class DecodedChunk:
    """The kept records of a chunk of messages, decoded.

    :param rows: the table's columns, then :data:`META_COLUMNS`; one row per kept, decodable record.
    :param positions: per row, the index of its message in the chunk.
    :param metas: per row, the index of its header set in ``header_sets``.
    :param header_sets: the chunk's distinct decoded header sets (None: undecodable).
    :param decision_codes: per row the index of its decision in ``decision_of`` (None when the read
        needed no control state).
    :param decision_of: the chunk's distinct decisions.
    :param by_decision: how many records of the chunk got each decision (kept or not).
    :param dead: (message, reason) of each record that could not be decoded.
    """

    rows: pa.Table
    positions: np.ndarray
    metas: np.ndarray
    header_sets: list[RecordMeta | None]
    decision_codes: np.ndarray | None
    decision_of: list[Decision | None]
    by_decision: dict[str, int] = field(default_factory=dict)
    dead: list[tuple[Any, str]] = field(default_factory=list)

    def decision(self, row: int) -> Decision | None:
        """Row ``row``'s decision (None when the read needed no control state)."""
        if self.decision_codes is None:
            return None
        return self.decision_of[int(self.decision_codes[row])]


def group_headers(messages: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """(per message the index of its header set, the first message's headers of each set).

    Records of one task arrive in runs, so a message is first compared with the one before it.
    """
    index: dict[Any, int] = {}
    firsts: list[Any] = []
    codes = []
    previous: Any = object()
    code = -1
    for headers in map(type(messages[0]).headers, messages) if messages else ():
        if headers != previous:
            key = tuple(headers) if headers else ()
            found = index.get(key)
            if found is None:
                found = index[key] = len(firsts)
                firsts.append(headers)
            code, previous = found, headers
        codes.append(code)
    return codes, firsts


def _decode_header_sets(firsts: Sequence[Any]) -> tuple[list[RecordMeta | None], list[str | None]]:
    metas: list[RecordMeta | None] = []
    reasons: list[str | None] = []
    for headers in firsts:
        try:
            metas.append(decode_headers(headers))
            reasons.append(None)
        except RecordDecodeError as exc:
            metas.append(None)
            reasons.append(str(exc))
    return metas, reasons


def decode_chunk(
    messages: Sequence[Any], read_filter: ReadFilter, field_types: Mapping[str, str]
) -> DecodedChunk:
    """Decode and classify a chunk of Kafka messages (``partition()``, ``offset()``, ``headers()``,
    ``value()``); equal, record by record, to ``LogReader._decode`` (tested)."""
    import numpy as np

    codes_list, firsts = group_headers(messages)
    kind = type(messages[0]) if messages else None
    partitions = np.fromiter(map(kind.partition, messages), np.int64, len(messages)) if kind else _none()
    offsets = np.fromiter(map(kind.offset, messages), np.int64, len(messages)) if kind else _none()

    def values(kept: np.ndarray) -> list[bytes | None]:
        if len(kept) == len(messages):
            return list(map(kind.value, messages)) if kind else []
        return [messages[i].value() for i in kept.tolist()]

    return _decode(
        np.asarray(codes_list, dtype=np.int64),
        firsts,
        partitions,
        offsets,
        values,
        messages.__getitem__,
        read_filter,
        field_types,
    )


def decode_columns(
    chunk: Any, header_sets: Sequence[Any], read_filter: ReadFilter, field_types: Mapping[str, str]
) -> DecodedChunk:
    """:func:`decode_chunk` for the records of a JVM scan's chunk
    (:class:`~airflow_logstore.log.jvm_scan.Chunk`, every record sent: a read passes no dense spans), whose
    header set ids index ``header_sets``; dead letters are
    :func:`~airflow_logstore.log.jvm_scan.scanned_record`."""
    import numpy as np

    from airflow_logstore.log.jvm_scan import scanned_record

    numbers, codes = np.unique(chunk.header_sets, return_inverse=True)
    if len(numbers) and numbers[0] < 0:
        raise ValueError("a read's JVM scan must send every record with its headers")
    firsts = [header_sets[number] for number in numbers.tolist()]

    def values(kept: np.ndarray) -> ColumnValues:
        return ColumnValues(chunk.values, kept)

    def record(index: int) -> Any:
        return scanned_record(chunk, index, header_sets[chunk.header_sets[index]])

    return _decode(
        codes.astype(np.int64),
        firsts,
        np.full(len(chunk.offsets), chunk.partition, dtype=np.int64),
        chunk.offsets.astype(np.int64),
        values,
        record,
        read_filter,
        field_types,
    )


def _decode(
    codes: np.ndarray,
    firsts: Sequence[Any],
    partitions: np.ndarray,
    offsets: np.ndarray,
    values_of: Callable[[np.ndarray], Sequence[bytes | None]],
    record_at: Callable[[int], Any],
    read_filter: ReadFilter,
    field_types: Mapping[str, str],
) -> DecodedChunk:
    """The one bulk decoding: ``codes`` index the distinct header sets ``firsts``; ``values_of`` gives the
    values at some record indexes, ``record_at`` a record (for dead letters)."""
    import numpy as np
    import pyarrow as pa

    metas, reasons = _decode_header_sets(firsts)
    dead: list[tuple[Any, str]] = []
    bad_codes = [code for code, reason in enumerate(reasons) if reason is not None]
    good = np.ones(len(codes), dtype=bool)
    if bad_codes:
        bad = np.isin(codes, bad_codes)
        good = ~bad
        dead.extend((record_at(int(i)), str(reasons[codes[i]])) for i in np.flatnonzero(bad))
    candidates = np.flatnonzero(good)
    keep, decision_index, decision_of = read_filter.decide_many(
        metas,  # type: ignore[arg-type]  # only indexed at good codes
        codes[candidates],
        partitions[candidates],
        offsets[candidates],
    )
    by_decision: dict[str, int] = {}
    if decision_of != [None]:
        for group, count in enumerate(np.bincount(decision_index, minlength=len(decision_of))):
            decision = decision_of[group]
            if count and decision is not None:
                by_decision[decision.value] = by_decision.get(decision.value, 0) + int(count)
    kept = candidates[keep]
    kept_decisions = decision_index[keep]
    decoded = decode_values_bulk(values_of(kept), field_types)
    if decoded.failed:
        dead.extend((record_at(int(kept[position])), reason) for position, reason in decoded.failed)
    chosen = np.asarray(decoded.kept, dtype=np.int64)
    positions = kept[chosen] if len(chosen) else np.zeros(0, dtype=np.int64)
    meta_codes = codes[positions]
    rows = decoded.rows
    columns = {name: rows.column(name) for name in rows.column_names}
    columns.update(_meta_columns(metas, meta_codes, partitions[positions], offsets[positions]))
    table = pa.table({name: columns[name] for name in [*field_types, *META_COLUMNS]})
    decision_codes = kept_decisions[chosen] if decision_of != [None] else None
    dead.sort(key=lambda item: (item[0].partition(), item[0].offset()))
    return DecodedChunk(table, positions, meta_codes, metas, decision_codes, decision_of, by_decision, dead)


class ColumnValues(Sequence[bytes | None]):
    """Some values of a JVM scan's column (``indexes``, ascending) as the sequence
    :func:`~airflow_logstore.core.codec.decode_values_bulk` reads, joined in bulk by :meth:`joined`
    instead of one ``bytes`` object per value."""

    def __init__(self, column: Any, indexes: np.ndarray) -> None:
        self.column = column
        self.indexes = indexes

    def __len__(self) -> int:
        return len(self.indexes)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return ColumnValues(self.column, self.indexes[index])
        return self.column[int(self.indexes[index])]

    def __iter__(self) -> Iterator[bytes | None]:
        column = self.column
        return (column[i] for i in self.indexes.tolist())

    def __contains__(self, value: object) -> bool:
        lengths = self.column.lengths[self.indexes]
        if value is None:
            return bool((lengths < 0).any())
        if value == b"":
            return bool((lengths == 0).any())
        return any(item == value for item in self)

    def joined(self) -> bytes:
        """The values joined by newlines (none may be null), by Arrow: a take of the kept values from the
        column's zero-copy array, then one join."""
        import pyarrow as pa
        import pyarrow.compute as pc

        values = self.column.arrow()
        if len(self.indexes) != len(values):
            values = values.take(pa.array(self.indexes, type=pa.int64()))
        one_list = pa.LargeListArray.from_arrays(pa.array([0, len(values)], type=pa.int64()), values)
        joined = pc.binary_join(one_list, pa.scalar(b"\n", type=pa.large_binary()))
        return joined[0].as_py()  # type: ignore[no-any-return]


def _none() -> np.ndarray:
    import numpy as np

    return np.zeros(0, dtype=np.int64)


def _meta_columns(
    metas: Sequence[RecordMeta | None], codes: np.ndarray, partitions: np.ndarray, offsets: np.ndarray
) -> dict[str, pa.Array]:
    """The writer columns of the kept rows, taken from the per-header-set values (no loop per record)."""
    import pyarrow as pa

    def per_set(value: Any, arrow_type: pa.DataType) -> pa.Array:
        values = [None if meta is None else value(meta) for meta in metas]
        return pa.array(values, type=arrow_type).take(pa.array(codes, type=pa.int64()))

    return {
        "_partition": pa.array(partitions, type=pa.int64()),
        "_offset": pa.array(offsets, type=pa.int64()),
        "_writer_id": per_set(lambda m: m.writer_id, pa.string()),
        "_epoch": per_set(lambda m: m.epoch, pa.int64()),
        "_batch_id": per_set(lambda m: m.batch_id, pa.int64()),
        "_record_type": per_set(lambda m: m.record_type.value, pa.string()),
    }
