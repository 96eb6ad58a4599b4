"""The Python engine's scan (``reconcile.scan.scan_task``) over a scripted consumer: it must plan what
``core.reconcile.plan_partitions`` plans from the same records (no Kafka)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from airflow_logstore.core import reconcile as R
from airflow_logstore.log import kafka_client
from airflow_logstore.reconcile import scan as reconcile_scan
from tests.unit.core.test_reconcile import _comparable, _copy_state, _random_history
from tests.unit.log.test_topic_scan import _Consumer


class _Record:
    """A consumed message: what the scan and the planner read of it."""

    def __init__(self, record: R.LogRecordIn) -> None:
        self.record = record

    def partition(self) -> int:
        return self.record.partition

    def offset(self) -> int:
        return self.record.offset

    def key(self) -> bytes | None:
        return self.record.key

    def value(self) -> bytes | None:
        return self.record.value

    def headers(self) -> Any:
        return None if self.record.headers is None else list(self.record.headers)

    def error(self) -> None:
        return None


def _polls(records: list[R.LogRecordIn], rng: random.Random) -> list[list[_Record]]:
    """The records as ``consume`` results of random sizes, partitions interleaved, each in order."""
    queues = {p: [r for r in records if r.partition == p] for p in {r.partition for r in records}}
    polls = []
    while any(queues.values()):
        poll: list[_Record] = []
        for _ in range(rng.choice([1, 3, 9, 40])):
            if not poll or rng.random() < 0.2:  # mostly runs of one partition, as librdkafka hands them
                partition = rng.choice([p for p, queue in queues.items() if queue])
            elif not queues[partition]:
                break
            poll.append(_Record(queues[partition].pop(0)))
            if not any(queues.values()):
                break
        polls.append(poll)
    return polls


def _scan_window(seed: int) -> tuple[Any, dict[int, int], dict[int, int], Any, list[Any], Any]:
    """A random history with a dead attempt at the end: its window and what the planner plans from it."""
    world = _random_history(seed)
    world.write("w", world.state.epochs["w"], 999, [{"id": 1, "v": "x", "op": "update"}], die=True)
    world.claim()
    bounds = {p: (0, len(records)) for p, records in world.log.items()}
    starts, _, _ = R.start_positions({} if seed % 2 else world.state.reconcile_positions, bounds)
    ends = {p: high for p, (_, high) in bounds.items()}
    lookback = R.lookback_ranges(world.state.reconcile_progress, starts)
    window = [r for p in sorted(world.log) for r in world.log[p][starts[p] : ends[p]]]
    expected, _ = R.plan_partitions(window, _copy_state(world.state), starts, ends, lookback)
    return world, starts, ends, lookback, window, expected


@pytest.mark.parametrize("seed", range(30))
def test_the_scan_plans_what_the_planner_plans_from_the_same_records(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    world, starts, ends, lookback, window, expected = _scan_window(seed)

    cons = _Consumer(_polls(window, rng))
    monkeypatch.setattr(kafka_client, "consumer", lambda config, **settings: cons)
    cons.close = lambda: None  # type: ignore[attr-defined]
    task = reconcile_scan.ScanTask("t", {}, starts, ends, _copy_state(world.state), lookback, None)
    plans = reconcile_scan.scan_task(task)
    assert [p.outputs for p in plans] == [p.outputs for p in expected]
    assert [_comparable(p.stats) for p in plans] == [_comparable(p.stats) for p in expected]


def _chunks(
    records: list[R.LogRecordIn],
    rng: random.Random,
    state: Any,
    lookback: dict[int, tuple[int, int]],
    *,
    filtered: bool = True,
    max_sets: int = 4096,
) -> tuple[list[tuple[int, Any]], list[list[Any]]]:
    """The records as ``LogScan.java`` hands them: chunks of one partition, each distinct header set
    once; records of dense spans without headers (-1) and, when ``filtered``, only if their key is
    followed (a key of a record sent with headers before) or they are in the lookback range. Before a
    chunk, with ``max_sets`` header sets known the ids start again (a new generation). Returns the
    chunks with their generation, and each generation's header sets."""
    import numpy as np

    from airflow_logstore.log.jvm_scan import Chunk, Column

    sets: list[Any] = []
    generations = [sets]
    numbers: dict[tuple[Any, ...], int] = {}
    chunks = []
    queues = {p: [r for r in records if r.partition == p] for p in sorted({r.partition for r in records})}
    followed: dict[int, set[bytes]] = {p: set() for p in queues}
    while any(queues.values()):
        partition = rng.choice([p for p, queue in queues.items() if queue])
        size = rng.choice([1, 2, 7, 30, 200])
        taken, queues[partition] = queues[partition][:size], queues[partition][size:]
        if len(sets) >= max_sets:
            sets, numbers = [], {}
            generations.append(sets)
        dense = R.dense_spans(state, partition)
        low, high = lookback.get(partition, (-1, -2))
        sent, ids = [], []
        for record in taken:
            if any(first <= record.offset <= last for first, last, _ in dense):
                follow = record.key in followed[partition] or low <= record.offset <= high
                if filtered and not follow:
                    continue
                ids.append(-1)
            else:
                headers = tuple(record.headers or ())
                if headers not in numbers:
                    numbers[headers] = len(sets)
                    sets.append(list(headers))
                ids.append(numbers[headers])
                if record.key is not None and any(first > record.offset for first, _, _ in dense):
                    followed[partition].add(record.key)  # as the JVM: only while dense spans lie ahead
            sent.append(record)

        chunks.append(
            (
                len(generations) - 1,
                Chunk(
                    partition,
                    taken[0].offset,
                    taken[-1].offset,
                    np.array([r.offset for r in sent], dtype=np.int64),
                    np.array(ids, dtype=np.int32),
                    Column.of_values([r.key for r in sent]),
                    Column.of_values([r.value for r in sent]),
                ),
            )
        )
    return chunks, generations


@pytest.mark.parametrize("seed", range(30))
def test_the_jvm_scan_plans_what_the_planner_plans_from_the_same_records(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fed as columns (a step per header set and per dense span, keys followed with a set lookup), the
    records give the plans and statistics of feeding them one by one."""
    from airflow_logstore.log import jvm_scan

    rng = random.Random(seed)
    world, starts, ends, lookback, window, expected = _scan_window(seed)

    chunks, generations = _chunks(
        window, rng, world.state, lookback, filtered=bool(seed % 3), max_sets=rng.choice([1, 3, 4096])
    )
    monkeypatch.setattr(jvm_scan, "JvmScan", _fake_scan(chunks, generations))
    task = reconcile_scan.ScanTask("t", {}, starts, ends, _copy_state(world.state), lookback, None)
    plans = reconcile_scan.scan(task, scanner="jvm")
    assert [p.outputs for p in plans] == [p.outputs for p in expected]
    assert [_comparable(p.stats) for p in plans] == [_comparable(p.stats) for p in expected]


def _fake_scan(chunks: list[tuple[int, Any]], generations: list[list[Any]]) -> type:
    """A ``JvmScan`` that hands out the given chunks, switching header sets between generations."""

    class _Scan:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.header_sets: list[Any] = []
            self.generation = 0

        def chunks(self) -> Any:
            for generation, chunk in chunks:
                self.generation, self.header_sets = generation, generations[generation]
                yield chunk

    return _Scan


def _plan_from_chunks(
    records: list[R.LogRecordIn],
    state: Any,
    starts: dict[int, int],
    ends: dict[int, int],
    lookback: dict[int, tuple[int, int]],
    rng: random.Random,
) -> tuple[list[R.PartitionPlan], list[tuple[int, int, str]]]:
    """The plans (and dead letters) of ``jvm_scan_task`` fed the window's records as random chunks."""
    from unittest import mock

    window = [r for r in records if starts[r.partition] <= r.offset < ends[r.partition]]
    chunks, generations = _chunks(
        window, rng, state, lookback, filtered=rng.random() < 0.7, max_sets=rng.choice([1, 2, 4096])
    )
    dead: list[tuple[int, int, str]] = []

    class _Dead:
        def __init__(self, *args: Any) -> None:
            self.count = 0

        def add(self, topic: str, message: Any, reason: str) -> None:
            dead.append((message.partition(), message.offset(), reason))
            self.count += 1

        def flush(self) -> None:
            pass

    task = reconcile_scan.ScanTask("t", {}, starts, ends, state, lookback, "t.dlq")
    with (
        mock.patch("airflow_logstore.log.jvm_scan.JvmScan", _fake_scan(chunks, generations)),
        mock.patch.object(reconcile_scan, "DeadLetterTopic", _Dead),
    ):
        return reconcile_scan.jvm_scan_task(task), dead


@pytest.mark.parametrize("seed", range(120))
def test_every_run_of_random_histories_plans_the_same_fed_as_columns(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reconciliation of a random history (failovers, crashes, writes racing a run: the lookback)
    is planned again from the same records fed as columns, and must agree."""
    rng = random.Random(seed)
    original = R.plan_partitions
    runs = []

    def both(
        records: Any, state: Any, starts: Any, ends: Any, lookback: Any = None, *, dense: bool = True
    ) -> Any:
        records = list(records)
        plans, dead = original(records, _copy_state(state), starts, ends, lookback, dense=dense)
        if dense:
            columns, dead_columns = _plan_from_chunks(
                records, _copy_state(state), starts, ends, lookback or {}, rng
            )
            assert [p.outputs for p in columns] == [p.outputs for p in plans]
            assert [_comparable(p.stats) for p in columns] == [_comparable(p.stats) for p in plans]
            assert dead_columns == [(r.partition, r.offset, reason) for r, reason in dead]
            runs.append(bool(lookback))
        return plans, dead

    monkeypatch.setattr(R, "plan_partitions", both)
    _random_history(seed)
    assert runs  # the history reconciled at least once


def _both_ways(world: Any, rng: random.Random) -> tuple[Any, Any]:
    records = world.log[0]
    ends = {0: len(records)}
    expected, dead = R.plan_partitions(records, copy.deepcopy(world.state), {0: 0}, ends)
    columns, dead_columns = _plan_from_chunks(records, copy.deepcopy(world.state), {0: 0}, ends, {}, rng)
    assert [p.outputs for p in columns] == [p.outputs for p in expected]
    assert [_comparable(p.stats) for p in columns] == [_comparable(p.stats) for p in expected]
    assert dead_columns == [(r.partition, r.offset, reason) for r, reason in dead]
    return expected[0].stats, dead


@pytest.mark.parametrize("seed", range(5))
def test_undecodable_records_fed_as_columns_are_dead_lettered(seed: int) -> None:
    from airflow_logstore.core.codec import RecordMeta, encode_headers
    from tests.unit.core.test_reconcile import World, ins

    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.append(0, b"[2]", None, b"not ours")
    world.append(0, b"[3]", [("logstore.writer", b"w"), ("logstore.epoch", b"x")], b"{}")
    world.append(0, b"[4]", encode_headers(RecordMeta("w", e1, 7)), b'{"kind":"+I","row"')  # truncated
    e2 = world.claim()
    world.write("w", e2, 7, ins(4))
    stats, dead = _both_ways(world, random.Random(seed))
    assert stats.dead_lettered == 3 and len(dead) == 3


@pytest.mark.parametrize("seed", range(5))
def test_records_of_retired_batches_are_decided_by_settled_ranges_when_fed_as_columns(seed: int) -> None:
    """Without its ledger entry a batch's records are decided per offset by the ranges a publish scan
    settled: its dead attempt's copy is a redundant hole, its committed copy is not."""
    from tests.unit.core.test_reconcile import World, ins

    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2, 3), die=True)
    dead_attempt = len(world.log[0])
    e2 = world.claim()
    world.write("w", e2, 1, ins(1, 2, 3))
    del world.state.commits[("w", 1)]  # retired
    world.state.settled[0] = [[0, len(world.log[0]) - 1]]
    world.state.holes[0] = {"redundant": [[0, dead_attempt - 1]]}
    stats, _ = _both_ways(world, random.Random(seed))
    assert stats.redundant == dead_attempt == 3


@pytest.mark.parametrize("seed", range(5))
def test_committed_records_outside_dense_spans_of_followed_keys_fed_as_columns(seed: int) -> None:
    """A failed Spark task attempt's records interleaved inside the committed span: the commit is not
    dense, its records are decided by their header set, and those of keys with redundant records are
    followed (the key's last legitimate image decides its reassert)."""
    from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers, encode_value
    from airflow_logstore.core.summary import CommitInfo
    from tests.unit.core.test_reconcile import World

    world = World(partitions=1)
    e1 = world.claim()
    ok, failed = encode_headers(RecordMeta("w", e1, 1, "0.1")), encode_headers(RecordMeta("w", e1, 1, "0.0"))
    world.append(0, b"[1]", ok, encode_value(RowKind.INSERT, {"id": 1, "v": "a"}))
    world.append(0, b"[1]", failed, encode_value(RowKind.INSERT, {"id": 1, "v": "zombie"}))
    world.append(0, b"[2]", ok, encode_value(RowKind.INSERT, {"id": 2, "v": "a"}))
    world.append(0, b"[1]", ok, encode_value(RowKind.UPDATE_AFTER, {"id": 1, "v": "b"}))
    world.state.commits[("w", 1)] = CommitInfo(
        "w", 1, e1, offsets={0: (0, 3)}, tasks=frozenset({"0.1"}), record_count=3
    )
    stats, _ = _both_ways(world, random.Random(seed))
    assert (stats.redundant, stats.reasserted, stats.by_decision["committed"]) == (1, 1, 3)


@pytest.mark.parametrize("seed", range(5))
def test_records_of_the_committed_attempt_outside_its_span_fed_as_columns(seed: int) -> None:
    """One header set, two decisions: inside the commit's span committed, outside it redundant."""
    from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers, encode_value
    from airflow_logstore.core.summary import CommitInfo
    from tests.unit.core.test_reconcile import World

    world = World(partitions=1)
    e1 = world.claim()
    ok = encode_headers(RecordMeta("w", e1, 1, "0.1"))
    for n in range(4):
        world.append(0, f"[{n}]".encode(), ok, encode_value(RowKind.INSERT, {"id": n}))
    world.state.commits[("w", 1)] = CommitInfo(
        "w", 1, e1, offsets={0: (1, 2)}, tasks=frozenset({"0.1"}), record_count=3
    )
    stats, _ = _both_ways(world, random.Random(seed))
    assert (stats.redundant, stats.by_decision["committed"]) == (2, 2)
