"""The bulk read path (``read.batches.decode_chunk``) equals the per-record path (``LogReader._decode``).

Seeded random chunks: header sets of several writers, epochs, batches and task attempts (some broken),
values (some undecodable or typed differently), control states with commits, settled ranges, holes and
retired batches, and eventual, consistent and hybrid read filters. A planted difference (offset breaks
that forget the settled ranges) must be caught by the same comparison.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_logstore.core import visibility
from airflow_logstore.core.checkpoint import RetiredBatches
from airflow_logstore.core.codec import (
    DataFormat,
    RecordMeta,
    RecordType,
    RowKind,
    decode_value,
    decode_values_bulk,
    encode_headers,
    encode_value,
    typed_row,
)
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import ReadFilter
from airflow_logstore.exceptions import RecordDecodeError
from airflow_logstore.read.batches import decode_chunk
from airflow_logstore.read.reader import LogReader, ReadReport, _chunk_records
from logstore_dev.testing.values import exact_row, random_row

TYPES = {"id": "int", "name": "string", "amount": "long", "price": "double", "ok": "boolean"}
#: a column of every other type a table can have (values: ``testing.values``, edge values included)
TYPES |= {
    "f32": "float",
    "day": "date",
    "at": "timestamptz",
    "local_at": "timestamp",
    "raw": "binary",
    "d38_18": "decimal(38, 18)",
    "d38_0": "decimal(38, 0)",
    "d12_2": "decimal(12, 2)",
    "d38_10": "decimal(38, 10)",
    "d9_9": "decimal(9, 9)",
}
OTHER_TYPES = {name: t for name, t in list(TYPES.items())[5:]}
WRITERS = ("w0", "w1", "w2")
PARTITIONS = 3


@dataclass
class Message:
    """The part of confluent_kafka's Message a reader uses."""

    p: int
    o: int
    v: bytes | None
    h: list[tuple[str, Any]] | None
    k: bytes | None = b"[1]"

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> list[tuple[str, Any]] | None:
        return self.h

    def key(self) -> bytes | None:
        return self.k

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self.o)

    def error(self) -> None:
        return None


@dataclass
class DeadLetters:
    entries: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, topic: str, message: Any, reason: str) -> None:
        self.entries.append((message.partition(), message.offset(), reason))


def random_state(rng: random.Random, end: int) -> ControlState:
    state = ControlState(epochs={w: rng.randint(3, 9) for w in WRITERS if rng.random() < 0.9})
    for writer in WRITERS:
        for batch in range(1, 6):
            if rng.random() < 0.5:
                offsets = {}
                for partition in range(PARTITIONS):
                    if rng.random() < 0.7:
                        first = rng.randint(0, end)
                        offsets[partition] = (first, min(end, first + rng.randint(0, end // 3)))
                tasks = (
                    frozenset(f"{p}.{rng.randint(0, 3)}" for p in range(PARTITIONS))
                    if rng.random() < 0.8
                    else None
                )
                commit = CommitInfo(
                    writer,
                    batch,
                    rng.randint(1, 9),
                    sequence_number=rng.randint(1, 9),
                    offsets=offsets,
                    tasks=tasks,
                )
                state.commits[commit.key] = commit
    for partition in range(PARTITIONS):
        if rng.random() < 0.6:
            low = rng.randint(0, end // 2)
            high = rng.randint(low, end)
            state.settled[partition] = [[low, high]]
            kinds: dict[str, list[list[int]]] = {}
            for kind in ("redundant", "foreign"):
                if rng.random() < 0.7:
                    a = rng.randint(low, high)
                    kinds[kind] = [[a, min(high, a + rng.randint(0, 20))]]
            state.holes[partition] = kinds
    if rng.random() < 0.5:
        state.retired["w1"] = RetiredBatches([[6, 8]], [[4, 8]])
    return state


def random_meta(rng: random.Random) -> RecordMeta:
    roll = rng.random()
    lease = rng.randint(1, 2)  # copies of one reconciler record from two leases (two reconcilers)
    if roll < 0.05:
        return RecordMeta("logstore-reconciler", lease, 1, "0.0", RecordType.REVERSAL, (0, rng.randint(0, 5)))
    if roll < 0.08:
        half = rng.choice([0, 1, 2])
        pair = (0, rng.randint(0, 3), 1) if half and rng.random() < 0.7 else None
        return RecordMeta(
            "logstore-reconciler", lease, 1, "0.0", RecordType.REASSERT, pair_half=half, reasserts=pair
        )
    return RecordMeta(
        rng.choice([*WRITERS, "stranger"]),
        rng.randint(1, 10),
        rng.randint(1, 8),
        f"{rng.randint(0, 2)}.{rng.randint(0, 3)}",
        log_only=rng.random() < 0.05,
    )


BROKEN_HEADERS: list[list[tuple[str, Any]] | None] = [
    None,
    [],
    [("format-version", b"1"), ("writer-id", b"w0"), ("epoch", b"one"), ("batch-id", b"1")],
    [("format-version", b"2"), ("writer-id", b"w0"), ("epoch", b"1"), ("batch-id", b"1")],
    [("format-version", b"1"), ("writer-id", b"w0"), ("epoch", b"1")],
]

BROKEN_VALUES: list[bytes | None] = [
    None,
    b"",
    b"not json",
    b'{"kind":"+X","row":{}}',
    b'{"kind":"+I"}',
    b'{"kind":"+I","row":null}',
    b'{"kind":"+I","row":{"id":1.5}}',
    b'{"kind":"+I","row":{"ok":1}}',
    b'{"kind":"+I","row":{"id":"7"}}',  # typed_row accepts it; Arrow does not: decoded one by one
    b'{"kind":"+I",\n"row":{"id":8}}',  # valid JSON across lines
    b'{"kind":"+I","row":{"name":12}}',
    b'{"kind":"+I","row":{"price":"2.5"}}',
    b'{"kind":"+U","row":{"id":1,"id":2}}',
    # values of the other types that do not fit (Arrow reads some of them: the bulk path must not)
    b'{"kind":"+I","row":{"d38_18":99999999999999999999999999999999999999}}',  # decimal(38, 18)
    b'{"kind":"+I","row":{"d12_2":1.555}}',  # decimal(12, 2)
    b'{"kind":"+I","row":{"d12_2":12345678901.5}}',
    b'{"kind":"+I","row":{"d9_9":1.0}}',  # decimal(9, 9)
    b'{"kind":"+I","row":{"d38_0":1E+38}}',  # decimal(38, 0)
    b'{"kind":"+I","row":{"d12_2":"NaN"}}',
    b'{"kind":"+I","row":{"d12_2":" 1.5"}}',  # Decimal() reads it, Arrow does not
    b'{"kind":"+I","row":{"day":"2024-13-01"}}',  # date
    b'{"kind":"+I","row":{"at":"2024-01-01T00:00:00.1234567Z"}}',  # timestamptz
    b'{"kind":"+I","row":{"raw":"not base64"}}',  # binary
    b'{"kind":"+I","row":{"f32":1E+39}}',  # float: beyond the largest float, an infinity
    b'{"kind":"+I","row":{"price":NaN}}',  # not JSON, but Python's json reads it
    # debezium-json envelopes the bulk path must read as decode_value does (or leave to it)
    b'{"before":null,"after":{"id":1},"op":"u","source":{"row_kind":"+U"}}',  # 'u': two changes
    b'{"before":null,"after":{"id":1},"op":"x"}',
    b'{"before":null,"after":null,"op":"c","source":{"row_kind":"+I"}}',
    b'{"before":{"id":1},"after":null,"op":"c","source":{"row_kind":"+I"}}',
    b'{"before":{"id":1},"after":null,"op":"d","source":{"row_kind":"+U"}}',  # kind contradicts op
    b'{"before":{"id":1},"after":null,"op":"d","source":{"row_kind":"?"}}',
    b'{"before":{"id":1},"after":{"id":2},"op":"d","source":{"row_kind":"+U"}}',
    b'{"before":null,"after":{"id":2},"op":"c"}',  # no source: an insert
    b'{"before":null,"after":{"id":3},"op":"r","source":{"row_kind":"+I"}}',  # a read: an insert
    b'{"before":{"id":4},"after":null,"op":"d","source":{}}',  # no row kind: a delete
    b'{"kind":"+I","row":{"id":5},"op":"d"}',  # both envelopes: ours
    b'{"before":null,"after":{"id":"x"},"op":"c","source":{"row_kind":"+I"}}',
]


def random_value(rng: random.Random, data_format: DataFormat = DataFormat.JSON) -> bytes | None:
    """A value in ``data_format`` (now and then in the other one, or broken)."""
    if rng.random() < 0.03:
        return rng.choice(BROKEN_VALUES)
    row: dict[str, Any] = {
        "id": rng.randint(-5, 10**6),
        "name": rng.choice(["a", 'é\n"q"', "", None, "x" * rng.randint(0, 30)]),
        "amount": rng.choice([rng.randint(-(2**62), 2**62), None]),
        "price": rng.choice([rng.random() * 100, 3, None]),
        "ok": rng.choice([True, False, None]),
    }
    row |= random_row(rng, OTHER_TYPES, null_share=0.2)
    for name in list(row):
        if rng.random() < 0.1:
            del row[name]
    if rng.random() < 0.05:
        row["extra"] = {"nested": [1, 2]}
    if rng.random() < 0.02:
        data_format = rng.choice(list(DataFormat))
    return encode_value(rng.choice(list(RowKind)), row, data_format)


def random_chunk(rng: random.Random, count: int) -> list[Message]:
    metas = [random_meta(rng) for _ in range(rng.randint(1, 12))]
    headers = [encode_headers(m) for m in metas]
    following = dict.fromkeys(range(PARTITIONS), rng.randint(0, 5))
    data_format = rng.choice(list(DataFormat))
    messages = []
    for _ in range(count):
        partition = rng.randrange(PARTITIONS)
        offset = following[partition]
        following[partition] += 1
        record_headers = rng.choice(BROKEN_HEADERS) if rng.random() < 0.02 else rng.choice(headers)
        messages.append(Message(partition, offset, random_value(rng, data_format), record_headers))
    return messages


def random_filter(rng: random.Random, state: ControlState) -> ReadFilter:
    kind = rng.choice(["eventual", "consistent", "eventual-with-state", "hybrid"])
    if kind == "eventual":
        return ReadFilter(None, consistent=False)
    if kind == "consistent":
        return ReadFilter(state, consistent=True)
    if kind == "eventual-with-state":
        return ReadFilter(state, consistent=False)
    start = {p: rng.randint(0, 60) for p in range(PARTITIONS)}
    included = frozenset(f"{w}/{b}" for w in WRITERS for b in range(1, 6) if rng.random() < 0.3)
    return ReadFilter(
        state, rng.random() < 0.5, rng.randint(0, 9), start, included if rng.random() < 0.7 else None
    )


def reader_for(dead: DeadLetters) -> LogReader:
    reader = LogReader.__new__(LogReader)
    reader.topic = "log"
    reader.field_types = dict(TYPES)
    reader.dead_letter = dead  # type: ignore[assignment]
    return reader


Result = tuple[list[Any], list[Any], dict[str, int]]


def per_record(messages: list[Message], read_filter: ReadFilter) -> Result:
    dead = DeadLetters()
    reader = reader_for(dead)
    report = ReadReport("t", "log", "c", "all-kinds")
    records = [r for m in messages if (r := reader._decode(m, read_filter, report)) is not None]
    return [view(r) for r in records], sorted(dead.entries), report.by_decision


def bulk(messages: list[Message], read_filter: ReadFilter) -> Result:
    chunk = decode_chunk(messages, read_filter, TYPES)
    records = list(_chunk_records(messages, chunk, TYPES))  # type: ignore[arg-type]
    dead = sorted((m.partition(), m.offset(), reason) for m, reason in chunk.dead)
    return [view(r) for r in records], dead, chunk.by_decision


def view(record: Any) -> tuple[Any, ...]:
    return (
        record.partition,
        record.offset,
        record.timestamp_ms,
        record.key,
        record.kind,
        exact_row(record.row),  # a decimal's scale, a zero's sign, NaN: exactly equal
        record.meta,
        record.decision,
    )


def compare(seed: int) -> list[str]:
    """The differences between both paths on the chunk and filter of ``seed`` (empty: equal)."""
    rng = random.Random(seed)
    messages = random_chunk(rng, rng.randint(1, 400))
    state, filter_seed = random_state(rng, 80), rng.random()
    # a filter belongs to one read (it remembers the reconciler records it returned): one for each path
    expected = per_record(messages, random_filter(random.Random(filter_seed), state))
    found = bulk(messages, random_filter(random.Random(filter_seed), state))
    problems = []
    for name, want, got in zip(("records", "dead letters", "decision counts"), expected, found, strict=True):
        if want != got:
            problems.append(f"seed {seed}: {name} differ")
    return problems


def test_bulk_path_equals_the_per_record_path_on_random_chunks() -> None:
    problems = [problem for seed in range(150) for problem in compare(seed)]
    assert problems == []


def test_planted_difference_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offset breaks that forget the settled ranges (a known-wrong cache) must make the check fail."""
    real = visibility.offset_breaks

    def forgets_settled(state: ControlState, partition: int) -> list[int]:
        return real(ControlState(commits=state.commits), partition)

    monkeypatch.setattr(visibility, "offset_breaks", forgets_settled)
    # the same 150 seeds as the check itself; the first that shows a difference is enough (seed 0 does)
    caught = next((seed for seed in range(150) if compare(seed)), None)
    assert caught is not None, "the comparison did not catch offset breaks without the settled ranges"


@pytest.mark.parametrize("data_format", list(DataFormat))
@pytest.mark.parametrize("seed", range(5))
def test_bulk_values_equal_decode_value_and_typed_row(seed: int, data_format: DataFormat) -> None:
    rng = random.Random(seed)
    values = [random_value(rng, data_format) for _ in range(2000)] + list(BROKEN_VALUES)
    rng.shuffle(values)
    decoded = decode_values_bulk(values, TYPES)
    want_rows, want_failed = [], []
    for index, value in enumerate(values):
        try:
            kind, raw = decode_value(value)
            want_rows.append({**typed_row(raw, TYPES), "_kind": kind.value})
        except RecordDecodeError as exc:
            want_failed.append((index, str(exc)))
    assert decoded.failed == want_failed
    assert [exact_row(r) for r in decoded.rows.to_pylist()] == [exact_row(r) for r in want_rows]
    assert decoded.kept == [i for i in range(len(values)) if i not in dict(want_failed)]


def test_chunk_boundaries_do_not_change_what_is_read() -> None:
    """Decoding a stream in chunks of any size gives the records of one big chunk, in order."""
    rng = random.Random(7)
    messages = random_chunk(rng, 900)
    read_filter = random_filter(random.Random(3), random_state(random.Random(3), 80))
    whole = bulk(messages, read_filter)
    for size in (1, 7, 128, 899):
        parts = [bulk(messages[i : i + size], read_filter) for i in range(0, len(messages), size)]
        records = [r for part in parts for r in part[0]]
        dead = sorted(d for part in parts for d in part[1])
        counts: dict[str, int] = {}
        for part in parts:
            for decision, count in part[2].items():
                counts[decision] = counts.get(decision, 0) + count
        assert (records, dead, counts) == whole, size


def _as_columns(messages: list[Message], scan_sets: list[Any]) -> list[Any]:
    """The messages as the JVM scan hands them: per partition, chunks of columns; header set ids index
    ``scan_sets`` (shared by all chunks, as in one scan)."""
    import numpy as np

    from airflow_logstore.log.jvm_scan import Chunk, Column

    numbers: dict[tuple[Any, ...], int] = {}
    chunks = []
    for partition in sorted({m.p for m in messages}):
        mine = [m for m in messages if m.p == partition]
        ids = []
        for m in mine:
            key = tuple(m.h or ())
            if key not in numbers:
                numbers[key] = len(scan_sets)
                scan_sets.append(list(m.h or []))
            ids.append(numbers[key])

        chunks.append(
            Chunk(
                partition,
                mine[0].o,
                mine[-1].o,
                np.array([m.o for m in mine], dtype=np.int64),
                np.array(ids, dtype=np.int32),
                Column.of_values([m.k for m in mine]),
                Column.of_values([m.v for m in mine]),
            )
        )
    return chunks


@pytest.mark.parametrize("seed", range(60))
def test_decoding_columns_equals_decoding_messages(seed: int) -> None:
    """``decode_columns`` (the JVM scan's chunks) gives the rows, decisions and dead letters that
    ``decode_chunk`` gives for the same records, partition by partition."""
    from airflow_logstore.read.batches import decode_columns

    rng = random.Random(seed)
    messages = random_chunk(rng, rng.randint(1, 400))
    state, filter_seed = random_state(rng, 80), rng.random()
    read_filters = [random_filter(random.Random(filter_seed), state) for _ in range(2)]  # one per path
    scan_sets: list[Any] = [[("unused", b"set")]]  # ids need not start at 0
    for chunk in _as_columns(messages, scan_sets):
        mine = [m for m in messages if m.p == chunk.partition]
        want = decode_chunk(mine, read_filters[0], TYPES)
        got = decode_columns(chunk, scan_sets, read_filters[1], TYPES)
        assert [exact_row(r) for r in got.rows.to_pylist()] == [exact_row(r) for r in want.rows.to_pylist()]
        assert got.by_decision == want.by_decision
        rows = range(got.rows.num_rows)
        assert [got.decision(i) for i in rows] == [want.decision(i) for i in rows]
        assert [(m.partition(), m.offset(), m.value(), r) for m, r in got.dead] == [
            (m.partition(), m.offset(), m.value(), r) for m, r in want.dead
        ]


@pytest.mark.parametrize("seed", range(6))
def test_column_values_join_the_kept_values_as_python_would(seed: int) -> None:
    """``ColumnValues.joined`` (Arrow's take and join over the JVM chunk's buffers) equals
    ``b"\\n".join`` of the same values, for every kept subset: all, some, one, empty values too."""
    import numpy as np

    from airflow_logstore.log.jvm_scan import Column
    from airflow_logstore.read.batches import ColumnValues

    rng = random.Random(seed)
    values = [bytes(rng.choice(b'{}":,ab\xc3\xa9 09') for _ in range(rng.randint(0, 40))) for _ in range(300)]
    column = Column.of_values(values)
    for kept in (list(range(300)), sorted(rng.sample(range(300), rng.randint(1, 299))), [rng.randrange(300)]):
        joined = ColumnValues(column, np.array(kept, dtype=np.int64)).joined()
        assert joined == b"\n".join(values[i] for i in kept)


@pytest.mark.parametrize("value", [v for v in BROKEN_VALUES if v is not None and v.startswith(b'{"before"')])
def test_each_debezium_value_among_clean_ones_reads_as_decode_value_reads_it(value: bytes) -> None:
    """One odd envelope in a chunk of clean debezium-json values: the bulk path reads the chunk as the
    per-record path does (a piece that holds it is read in bulk only when that is the same)."""
    rng = random.Random(0)
    values = [random_value(rng, DataFormat.DEBEZIUM_JSON) for _ in range(40)]
    values = [v for v in values if v not in BROKEN_VALUES] + [value]
    decoded = decode_values_bulk(values, TYPES)
    want_rows, want_failed = [], []
    for index, one in enumerate(values):
        try:
            kind, raw = decode_value(one)
            want_rows.append({**typed_row(raw, TYPES), "_kind": kind.value})
        except RecordDecodeError as exc:
            want_failed.append((index, str(exc)))
    assert decoded.failed == want_failed
    assert [exact_row(r) for r in decoded.rows.to_pylist()] == [exact_row(r) for r in want_rows]
