"""Reconciliation planning (pure logic): what to reverse, what to reassert, and the log-equals-table property.

A small in-memory world plays writers, failovers and reconciler runs on a simulated partitioned log;
after each scenario the whole log (originals + reversals + reasserts), applied in order, must give the
table's state key by key under both retract and upsert semantics, and no record is reversed twice.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_logstore.core import reconcile as R
from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.core.changelog import apply_retract, apply_upsert
from airflow_logstore.core.codec import (
    RECONCILER_WRITER_ID,
    RecordMeta,
    RecordType,
    RowKind,
    decode_headers,
    decode_value,
    encode_headers,
    encode_key,
    encode_value,
    partition_for_key,
)
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision, ReadFilter, WatermarkScan, classify
from airflow_logstore.exceptions import RecordDecodeError

PK = ["id"]


# --- the simulated world -------------------------------------------------------------------------


@dataclass
class World:
    partitions: int = 2
    keyed: bool = True
    log: dict[int, list[R.LogRecordIn]] = field(default_factory=dict)
    state: ControlState = field(default_factory=ControlState)
    table: dict[Any, dict[str, Any]] = field(default_factory=dict)
    epoch_counter: int = 0
    runs: list[list[R.PartitionPlan]] = field(default_factory=list)
    pending: dict[tuple[str, int, int], tuple[dict[int, tuple[int, int]], Any, str]] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        self.log = {p: [] for p in range(self.partitions)}

    # writers --------------------------------------------------------------------------------------

    def claim(self, writer: str = "w") -> int:
        self.epoch_counter += 1
        self.state.epochs[writer] = self.epoch_counter
        return self.epoch_counter

    def append(self, partition: int, key: bytes | None, headers: Any, value: bytes | None) -> int:
        offset = len(self.log[partition])
        self.log[partition].append(R.LogRecordIn(partition, offset, key, headers, value))
        return offset

    def produce(
        self,
        writer: str,
        epoch: int,
        batch: int,
        records: list[tuple[RowKind, dict[str, Any]]],
        task: str = "0.0",
        limit: int | None = None,
    ) -> dict[int, tuple[int, int]]:
        headers = encode_headers(RecordMeta(writer, epoch, batch, task))
        spans: dict[int, tuple[int, int]] = {}
        for n, (kind, row) in enumerate(records):
            if limit is not None and n >= limit:
                break
            key = encode_key(row, PK) if self.keyed else None
            partition = partition_for_key(key, self.partitions) if key else n % self.partitions
            offset = self.append(partition, key, headers, encode_value(kind, row))
            first, _ = spans.get(partition, (offset, offset))
            spans[partition] = (first, offset)
        return spans

    def plan(self, rows: list[dict[str, Any]]) -> Any:
        return plan_batch(rows, PK if self.keyed else [], self.table)

    def write(
        self,
        writer: str,
        epoch: int,
        batch: int,
        rows: list[dict[str, Any]],
        *,
        die: bool = False,
        limit: int | None = None,
        failed_task_first: bool = False,
    ) -> None:
        """One attempt of a batch: produce its records, then commit (unless it dies)."""
        plan = self.plan(rows)
        if failed_task_first:  # a Spark task attempt that produced, then failed and was retried
            self.produce(writer, epoch, batch, plan.records, task="0.0")
        task = "0.1" if failed_task_first else "0.0"
        spans = self.produce(writer, epoch, batch, plan.records, task=task, limit=limit if die else None)
        if die:
            return
        self.commit(writer, epoch, batch, spans, plan, task, len(plan.records))

    def produce_in_flight(self, writer: str, epoch: int, batch: int, rows: list[dict[str, Any]]) -> None:
        plan = self.plan(rows)
        spans = self.produce(writer, epoch, batch, plan.records)
        self.pending[(writer, epoch, batch)] = (spans, plan, "0.0")

    def commit_pending(self, writer: str, epoch: int, batch: int) -> None:
        spans, plan, task = self.pending.pop((writer, epoch, batch))
        self.commit(writer, epoch, batch, spans, plan, task, len(plan.records))

    def commit(
        self, writer: str, epoch: int, batch: int, spans: Any, plan: Any, task: str, count: int = 0
    ) -> None:
        self.state.commits[(writer, batch)] = CommitInfo(
            writer, batch, epoch, offsets=dict(spans), tasks=frozenset({task}), record_count=count
        )
        if self.keyed:
            self.table = apply_final(self.table, plan.final)
        else:
            for _kind, row in plan.records:
                self.table[_row_key(row)] = row

    # the reconciler -------------------------------------------------------------------------------

    def reconcile(
        self,
        *,
        crash: bool = False,
        deliver: int | None = None,
        during: Callable[[], None] | None = None,
        resend_after: int | None = None,
    ) -> list[R.Output]:
        """One run: plan the window, let ``during`` write, append the outputs, record progress.

        ``crash`` stops before the progress record; ``deliver`` keeps only that many outputs per
        partition (a crash in the middle of producing: each partition's delivered prefix);
        ``resend_after`` delivers that many outputs per partition, then all of them again (a Spark
        reconcile task retried after a partial flush: the retry resends its partition's records).
        """
        bounds = {p: (0, len(records)) for p, records in self.log.items()}
        starts, gaps, _, carried = R.window_starts(self.state, bounds)
        assert not gaps
        ends = {p: hi for p, (_, hi) in bounds.items()}
        lookback = R.lookback_ranges(self.state.reconcile_progress, starts)
        records = [r for p in sorted(self.log) for r in self.log[p][starts[p] : ends[p]]]
        plans, _ = R.plan_partitions(records, _copy_state(self.state), starts, ends, lookback)
        slow, _ = R.plan_partitions(records, _copy_state(self.state), starts, ends, lookback, dense=False)
        assert [p.outputs for p in plans] == [p.outputs for p in slow]  # dense spans change nothing
        assert [_comparable(p.stats) for p in plans] == [_comparable(p.stats) for p in slow]
        self.runs.append(plans)
        run = R.run_number(self.state.reconcile_progress)  # the run's number is fixed when it plans
        if during is not None:
            during()
        lease = 1000 + len(self.runs)
        written: list[R.Output] = []
        output: dict[int, tuple[int, int]] = {}
        for plan in plans:
            outputs = plan.outputs if deliver is None else plan.outputs[:deliver]
            if resend_after is not None:
                outputs = [*outputs[:resend_after], *outputs]
            for out in outputs:
                offset = self.append(out.partition, out.key, out.headers(lease, run), out.value)
                first, _ = output.get(out.partition, (offset, offset))
                output[out.partition] = (first, offset)
                written.append(out)
        if crash or deliver is not None:
            return written
        positions = {plan.stats.partition: plan.stats.next_position for plan in plans}
        summary = R.summarize(plan.stats for plan in plans)
        value = R.progress_value(
            positions=positions,
            safe_point=ends,
            output=output,
            pending=R.pending_attempts(carried, (plan.stats for plan in plans)),
            lease_id=lease,
            run=run,
            owner="test",
            summary=summary,
            now_ms=0,
        )
        self.state.reconcile_positions = positions
        self.state.reconcile_progress = value
        return written

    # checks ---------------------------------------------------------------------------------------

    def changes(self, copies: bool = False) -> list[tuple[Any, RowKind, dict[str, Any]]]:
        """The log as an eventual reader returns it: every record, but only the first copy of a
        reconciler record (``ReadFilter``); ``copies`` returns every record as it is in the log."""
        result = []
        for partition in sorted(self.log):
            read = ReadFilter(None, consistent=False)
            for record in self.log[partition]:
                if (
                    not copies
                    and not read.decide(decode_headers(record.headers), partition, record.offset)[0]
                ):
                    continue
                kind, row = decode_value(record.value)
                result.append((_row_key(row) if not self.keyed else row["id"], kind, row))
        return result

    def table_by_key(self) -> dict[Any, dict[str, Any]]:
        if self.keyed:
            return {key[0]: row for key, row in self.table.items()}
        return dict(self.table)

    def assert_log_equals_table(self, upsert: bool = True) -> None:
        changes = self.changes()
        retract = apply_retract(changes)
        assert not retract.anomalies, dict(list(retract.anomalies.items())[:3])
        assert retract.state == self.table_by_key()
        if upsert:
            assert apply_upsert(changes) == self.table_by_key()
        self.assert_reversed_once()

    def assert_reversed_once(self) -> None:
        reverses: Counter[tuple[int, int]] = Counter()
        redundant = set()
        for partition, records in self.log.items():
            read = ReadFilter(None, consistent=False)  # copies of a reversal count once, as for readers
            for record in records:
                meta = decode_headers(record.headers)
                if meta.record_type is RecordType.REVERSAL and read.decide(meta, partition, record.offset)[0]:
                    assert meta.reverses is not None and meta.reverses[0] == partition
                    original = self.log[partition][meta.reverses[1]]
                    assert decode_value(record.value)[0] == decode_value(original.value)[0].reversed()
                    assert record.key == original.key
                    reverses[meta.reverses] += 1
                elif classify(meta, partition, record.offset, self.state) is Decision.REDUNDANT:
                    redundant.add((partition, record.offset))
        assert all(count == 1 for count in reverses.values()), reverses.most_common(3)
        assert set(reverses) == redundant

    def outputs_of_type(self, record_type: RecordType) -> list[R.LogRecordIn]:
        return [
            r
            for records in self.log.values()
            for r in records
            if decode_headers(r.headers).record_type is record_type
        ]


def _comparable(stats: R.PartitionStats) -> dict[str, Any]:
    return {k: v for k, v in stats.to_dict().items() if k != "by_decision"} | {
        "by_decision": {k: v for k, v in stats.by_decision.items() if v}
    }


def _copy_state(state: ControlState) -> ControlState:
    return ControlState(
        epochs=dict(state.epochs),
        commits=dict(state.commits),
        reconcile_positions=dict(state.reconcile_positions),
        reconcile_progress=state.reconcile_progress,
    )


def _row_key(row: dict[str, Any]) -> Any:
    return tuple(sorted(row.items()))


def ins(*ids: int, v: str = "a") -> list[dict[str, Any]]:
    return [{"id": i, "v": f"{v}{i}"} for i in ids]


def upd(*ids: int, v: str) -> list[dict[str, Any]]:
    return [{"id": i, "v": f"{v}{i}", "op": "update"} for i in ids]


def dele(*ids: int) -> list[dict[str, Any]]:
    return [{"id": i, "op": "delete"} for i in ids]


def total(world: World, name: str) -> int:
    return sum(getattr(plan.stats, name) for plan in world.runs[-1])


# --- values and kinds ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "reversed_kind"),
    [
        (RowKind.INSERT, RowKind.DELETE),
        (RowKind.UPDATE_AFTER, RowKind.UPDATE_BEFORE),
        (RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER),
        (RowKind.DELETE, RowKind.INSERT),
    ],
)
def test_reversal_value_reverses_the_kind_and_keeps_the_row_bytes(
    kind: RowKind, reversed_kind: RowKind
) -> None:
    value = b'{"kind":"' + kind.value.encode() + b'","row":{"id":7,"price":12345678901234567890.123456789}}'
    reversed_ = R.reversal_value(value)
    assert reversed_ == value.replace(kind.value.encode(), reversed_kind.value.encode(), 1)
    assert decode_value(reversed_)[0] is reversed_kind


def test_other_layouts_are_decoded_and_encoded_again() -> None:
    value = b'{ "row": {"id": 1, "v": "x"}, "kind": "+U" }'
    assert R.with_kind(value, RowKind.UPDATE_BEFORE) == encode_value(
        RowKind.UPDATE_BEFORE, {"id": 1, "v": "x"}
    )


@pytest.mark.parametrize("kind", list(RowKind))
def test_kind_of_reads_the_kind_that_decoding_finds(kind: RowKind) -> None:
    """The kind read from the writers' layout's first bytes, and from other layouts by decoding."""
    written = b'{"kind":"' + kind.value.encode() + b'","row":{"id":7}}'
    other = b'{ "row": {"id": 7}, "kind": "' + kind.value.encode() + b'" }'
    for value in (written, other, encode_value(kind, {"id": 7})):
        assert R.kind_of(value) is decode_value(value)[0] is kind
    with pytest.raises(RecordDecodeError):
        R.kind_of(b'{"kind": "?", "row": {}}')


@pytest.mark.parametrize(
    ("kind", "pair"),
    [
        (RowKind.INSERT, (RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER)),
        (RowKind.UPDATE_AFTER, (RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER)),
        (RowKind.UPDATE_BEFORE, (RowKind.INSERT, RowKind.DELETE)),
        (RowKind.DELETE, (RowKind.INSERT, RowKind.DELETE)),
    ],
)
def test_reassert_pair_is_neutral_under_retract_and_restores_the_image_under_upsert(
    kind: RowKind, pair: tuple[RowKind, RowKind]
) -> None:
    row = {"id": 1, "v": "x"}
    (first, v1), (second, v2) = R.reassert_values(encode_value(kind, row))
    assert (first, second) == pair
    changes = [(1, first, decode_value(v1)[1]), (1, second, decode_value(v2)[1])]
    assert apply_retract(changes).state == {} and not apply_retract(changes).anomalies
    assert apply_upsert([(1, kind, row), *changes]) == apply_upsert([(1, kind, row)])


def test_classifier_agrees_with_classify() -> None:
    rng = random.Random(5)
    state = ControlState(epochs={"w": 9, "x": 3})
    for batch in range(1, 8):
        state.commits[("w", batch)] = CommitInfo(
            "w",
            batch,
            rng.choice([2, 5, 9]),
            offsets={0: (batch * 10, batch * 10 + 5)},
            tasks=frozenset({"0.0"}),
        )
    classifier = R.Classifier(state)
    for _ in range(3000):
        meta = decode_headers(
            encode_headers(
                RecordMeta(
                    rng.choice(["w", "x", "y"]),
                    rng.randint(1, 10),
                    rng.randint(1, 9),
                    rng.choice(["0.0", "1.0"]),
                    log_only=rng.random() < 0.1,
                )
            )
        )
        partition, offset = rng.randint(0, 1), rng.randint(0, 100)
        assert classifier(meta, partition, offset) is classify(meta, partition, offset, state)


def test_committed_offsets_are_where_classify_says_committed() -> None:
    """The vectorized scan (Spark engine) picks committed records by this range alone: it must hold
    only records ``classify`` calls committed, and all of them unless settled ranges decide per offset."""
    rng = random.Random(11)
    state = ControlState(epochs={"w": 9, "x": 3})
    for batch in range(1, 8):
        tasks = frozenset({"0.0"}) if batch % 3 else None
        offsets = {0: (batch * 10, batch * 10 + 5)}
        epoch = rng.choice([2, 5, 9])
        state.commits[("w", batch)] = CommitInfo("w", batch, epoch, offsets=offsets, tasks=tasks)
    state.settled[1] = [[0, 40]]
    classifier = R.Classifier(state)
    for _ in range(500):
        record_type = rng.choice([RecordType.DATA] * 4 + [RecordType.REVERSAL])
        meta = RecordMeta(
            rng.choice(["w", "x", "y"]),
            rng.randint(1, 10),
            rng.randint(1, 9),
            rng.choice(["0.0", "1.0"]),
            record_type=record_type,
            log_only=rng.random() < 0.1,
        )
        partition = rng.randint(0, 1)
        found = classifier.committed_offsets(meta, partition)
        for offset in range(0, 100):
            committed = classify(meta, partition, offset, state) is Decision.COMMITTED
            inside = found is not None and found[0] <= offset <= found[1]
            assert committed or not inside, (meta, partition, offset, found)
            if partition == 0:  # no settled ranges: the range is exact
                assert inside == committed, (meta, partition, offset, found)


def test_dense_span_decisions_are_those_classify_gives_the_commits_own_records() -> None:
    state = ControlState(epochs={"w": 3})
    own = CommitInfo("w", 1, 1, offsets={0: (0, 9)}, tasks=frozenset({"0.7", "0.9"}), record_count=10)
    log_only = CommitInfo("w", 2, 3, offsets={0: (10, 11)}, record_count=2, emit_mode="log")
    state.commits.update({("w", 1): own, ("w", 2): log_only})
    assert R.own_record_decision(own, 0, state) is Decision.COMMITTED
    assert R.own_record_decision(log_only, 0, state) is Decision.LOG_ONLY
    assert R.dense_spans(state, 0) == [(0, 9, Decision.COMMITTED), (10, 11, Decision.LOG_ONLY)]


def test_dense_spans_are_commits_with_nothing_else_inside() -> None:
    state = ControlState(epochs={"w": 3, "x": 1})
    state.commits[("w", 1)] = CommitInfo("w", 1, 1, offsets={0: (0, 9), 1: (0, 4)}, record_count=15)
    state.commits[("w", 2)] = CommitInfo("w", 2, 1, offsets={0: (10, 19)}, record_count=7)  # 3 foreign
    state.commits[("w", 3)] = CommitInfo("w", 3, 3, offsets={0: (20, 24)}, record_count=0)  # count unknown
    state.commits[("x", 1)] = CommitInfo("x", 1, 1, offsets={0: (25, 26)}, record_count=2, emit_mode="log")
    assert R.dense_spans(state, 0) == [(0, 9, Decision.COMMITTED), (25, 26, Decision.LOG_ONLY)]
    assert R.dense_spans(state, 1) == [(0, 4, Decision.COMMITTED)]


def test_a_record_inside_a_commit_span_that_is_not_the_commits_own_is_still_found() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2))
    dead = world.claim()
    e3 = world.claim()
    plan = world.plan(upd(1, 2, v="b"))
    first = world.produce("w", e3, 2, plan.records[:2])
    world.produce("w", dead, 2, plan.records[2:3])  # the dead attempt's record lands inside the span
    last = world.produce("w", e3, 2, plan.records[2:])
    world.commit("w", e3, 2, {0: (first[0][0], last[0][1])}, plan, "0.0", len(plan.records))
    assert R.dense_spans(world.state, 0) == [(0, 1, Decision.COMMITTED)]  # batch 2's span is not dense
    written = world.reconcile()
    assert [o.source for o in written if o.record_type is RecordType.REVERSAL] == [4]
    world.assert_log_equals_table()


# --- one failover --------------------------------------------------------------------------------


def test_one_failover_reverses_exactly_the_dead_attempt() -> None:
    world = World()
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2, 3, 4))
    world.write("w", e1, 2, upd(1, 2, v="b") + dele(3) + ins(5), die=True)  # after-log crash
    dead = [
        (p, r.offset)
        for p, recs in world.log.items()
        for r in recs
        if decode_headers(r.headers).epoch == e1 and decode_headers(r.headers).batch_id == 2
    ]
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, 2, v="b") + dele(3) + ins(5))
    written = world.reconcile()
    reversals = [o for o in written if o.record_type is RecordType.REVERSAL]
    assert sorted(o.reverses for o in reversals) == sorted(dead)  # type: ignore[type-var]
    assert total(world, "redundant") == len(dead) == total(world, "reversed")
    assert R.summarize(p.stats for p in world.runs[-1])["redundant_by_attempt"] == {f"w/2/{e1}": len(dead)}
    for out in written:  # same partition and key as the original
        original = world.log[out.partition][out.source]
        assert original.key == out.key
    # every key with a reversal has a later legitimate record (the retry): one reassert pair each
    keys = {o.key for o in reversals}
    assert total(world, "reasserted") == len(keys)
    world.assert_log_equals_table()


def test_reversals_of_a_key_are_written_in_reverse_log_order() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b") + upd(1, v="c") + dele(1), die=True)
    e2 = world.claim()
    world.write("w", e2, 3, ins(2))  # the successor committed past batch 2
    written = world.reconcile()
    sources = [o.source for o in written if o.record_type is RecordType.REVERSAL]
    assert sources == sorted(sources, reverse=True) and len(sources) == 5
    world.assert_log_equals_table()


def test_headers_of_reconciler_records() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1), die=True)
    e2 = world.claim()
    world.write("w", e2, 1, ins(1))
    world.reconcile()
    reversal, *reassert = world.log[0][2:]
    meta = decode_headers(reversal.headers)
    assert (meta.writer_id, meta.epoch, meta.batch_id) == (RECONCILER_WRITER_ID, 1001, 1)
    assert meta.record_type is RecordType.REVERSAL and meta.reverses == (0, 0)
    assert [decode_headers(r.headers).record_type for r in reassert] == [RecordType.REASSERT] * 2
    assert [decode_value(r.value)[0] for r in [reversal, *reassert]] == ["-D", "-U", "+U"]


# --- the reassert rule, both ways ----------------------------------------------------------------


def test_a_reversal_does_not_undo_a_later_legitimate_change_of_the_same_key() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.write("w", e2, 3, upd(1, v="c"))  # a later legitimate change
    world.reconcile()
    assert world.table_by_key() == {1: {"id": 1, "v": "c1"}}
    last = world.log[0][-1]
    assert decode_value(last.value) == (RowKind.UPDATE_AFTER, {"id": 1, "v": "c1"})
    world.assert_log_equals_table()


@pytest.mark.parametrize(
    ("shadowing", "latest"),
    [
        # decimal(38,10): both 1.2345678901234567E19 as doubles, two different decimals
        ("12345678901234567890.1234567891", "12345678901234567890.1234567892"),
        ("0.100000000000000000000000000000000001", "0.100000000000000000000000000000000002"),  # (38,36)
        ("0.0", "-0.0"),  # a double column: -0.0 == 0.0 in Python, yet they are two values
    ],
)
def test_a_shadowed_value_that_differs_only_past_float_precision_is_reasserted(
    shadowing: str, latest: str
) -> None:
    """Values as Spark's ``to_json`` writes them (decimals as JSON numbers with every digit). A run
    reverses a zombie's records of key 1 and reasserts its legitimate row ``shadowing``; meanwhile (after
    its safe point) a write sets ``latest``, which the run's records then shadow under upsert semantics.
    The next run must see that the key's image (``shadowing``) is not ``latest`` and reassert it, also
    where floats cannot tell the two apart (comparing images through floats skipped it: the key stayed
    at ``shadowing``)."""
    world = World(partitions=1)

    def value(kind: RowKind, price: str) -> bytes:
        return b'{"kind":"%s","row":{"id":1,"price":%s}}' % (kind.value.encode(), price.encode())

    def write(epoch: int, batch: int, changes: list[tuple[RowKind, str]], commit: bool = True) -> None:
        headers = encode_headers(RecordMeta("w", epoch, batch, "0.0"))
        offsets = [world.append(0, b"[1]", headers, value(kind, price)) for kind, price in changes]
        if commit:
            world.state.commits[("w", batch)] = CommitInfo(
                "w", batch, epoch, offsets={0: (offsets[0], offsets[-1])}, tasks=frozenset({"0.0"})
            )

    e1 = world.claim()
    write(e1, 1, [(RowKind.INSERT, "1.5")])
    write(e1, 2, [(RowKind.UPDATE_BEFORE, "1.5"), (RowKind.UPDATE_AFTER, "9.25")], commit=False)  # dies
    e2 = world.claim()
    write(e2, 2, [(RowKind.UPDATE_BEFORE, "1.5"), (RowKind.UPDATE_AFTER, shadowing)])

    first = world.reconcile(
        during=lambda: write(e2, 3, [(RowKind.UPDATE_BEFORE, shadowing), (RowKind.UPDATE_AFTER, latest)])
    )
    assert [o.record_type for o in first] == [RecordType.REVERSAL] * 2 + [RecordType.REASSERT] * 2
    assert world.log[0][-1].value == value(RowKind.UPDATE_AFTER, shadowing)  # shadowed for now

    second = world.reconcile()

    assert [(o.record_type, o.value) for o in second] == [
        (RecordType.REASSERT, value(RowKind.UPDATE_BEFORE, latest)),
        (RecordType.REASSERT, value(RowKind.UPDATE_AFTER, latest)),  # the key ends with latest
    ]
    assert str(apply_upsert(world.changes())[1]["price"]) == latest
    assert world.reconcile() == []


def test_without_the_reassert_upsert_semantics_would_be_wrong() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.write("w", e2, 3, dele(1))
    written = world.reconcile()
    without = [
        c for c, r in zip(world.changes(), _all(world), strict=True) if _type(r) is not RecordType.REASSERT
    ]
    assert apply_upsert(without) != world.table_by_key()  # the last reversal (+U a1) would resurrect it
    assert apply_retract(without).state == world.table_by_key()  # retract does not need it
    assert [o.record_type for o in written][-2:] == [RecordType.REASSERT] * 2
    assert [decode_value(o.value)[0] for o in written][-2:] == [RowKind.INSERT, RowKind.DELETE]
    world.assert_log_equals_table()


def test_reassert_written_by_the_decided_rule_even_when_images_agree() -> None:
    # X (the retry's +U b) comes after the first redundant record: a reassert pair follows the reversals
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.write("w", e2, 3, upd(1, v="a"))  # back to the image the reversal chain restores anyway
    written = world.reconcile()
    assert [o.record_type for o in written] == [RecordType.REVERSAL] * 2 + [RecordType.REASSERT] * 2
    world.assert_log_equals_table()


def test_no_reassert_when_no_legitimate_record_follows() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2))
    world.write("w", e1, 2, upd(1, v="b") + dele(2), die=True)
    e2 = world.claim()
    world.write("w", e2, 3, ins(3))  # the successor skipped batch 2 and committed past it
    written = world.reconcile()
    assert {o.record_type for o in written} == {RecordType.REVERSAL}
    assert total(world, "reasserted") == 0
    world.assert_log_equals_table()


def _zombie_world(later_change: bool) -> World:
    # epoch 1 outlives its successor: it produces batch 2 (planned on the old row) after epoch 2
    # committed batches 2 and 3
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    before = dict(world.table)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.write("w", e2, 3, upd(1, v="c"))
    now = world.table
    world.table = before
    world.produce("w", e1, 2, world.plan(upd(1, v="z")).records)
    world.table = now
    if later_change:
        world.write("w", e2, 4, upd(1, v="d"))
    return world


def test_zombie_record_followed_by_a_legitimate_change() -> None:
    world = _zombie_world(later_change=True)
    world.reconcile()
    world.assert_log_equals_table()


def test_zombie_record_with_only_older_history_is_exact_under_retract_only() -> None:
    # The documented limit: the key's legitimate history is all before the zombie's records, and the
    # planner keeps no per-key state for keys without redundant records, so the reversal chain restores
    # the zombie's stale before-image (a1) for upsert consumers; retract consumers are exact.
    world = _zombie_world(later_change=False)
    world.reconcile()
    world.assert_log_equals_table(upsert=False)
    assert apply_upsert(world.changes()) == {1: {"id": 1, "v": "a1"}}


# --- deletes, several failovers, same keys -------------------------------------------------------


def test_deletes_and_reinserts_across_failovers() -> None:
    world = World()
    e = world.claim()
    world.write("w", e, 1, ins(1, 2, 3))
    world.write("w", e, 2, dele(1, 2), die=True)
    e = world.claim()
    world.write("w", e, 2, dele(1, 2))
    world.write("w", e, 3, ins(1, v="again") + dele(3), die=True)
    e = world.claim()
    world.write("w", e, 3, ins(1, v="again") + dele(3), die=True, limit=1)  # died mid-produce
    e = world.claim()
    world.write("w", e, 3, ins(1, v="again") + dele(3))
    world.write("w", e, 4, ins(2, 3) + upd(1, v="x"))
    world.reconcile()
    assert total(world, "reversed") == 2 + 2 + 1
    world.assert_log_equals_table()


def test_keys_touched_by_several_failovers_and_reconciled_in_between() -> None:
    world = World()
    e = world.claim()
    world.write("w", e, 1, ins(1, 2, 3))
    for batch, rows in enumerate(
        [upd(1, 2, v="b"), dele(2) + upd(3, v="c"), ins(2, v="d") + upd(1, v="e")], 2
    ):
        world.write("w", e, batch, rows, die=True)
        e = world.claim()
        world.write("w", e, batch, rows, die=True, limit=2)
        e = world.claim()
        world.write("w", e, batch, rows)
        world.reconcile()
        world.assert_log_equals_table()
    assert world.reconcile() == []  # nothing left


def test_spark_task_retry_within_the_committed_epoch() -> None:
    world = World()
    e = world.claim()
    world.write("w", e, 1, ins(1, 2, 3), failed_task_first=True)
    world.reconcile()
    assert total(world, "reversed") == 3
    world.assert_log_equals_table()


# --- in flight, dead pending, positions ----------------------------------------------------------


def test_in_flight_records_are_left_alone_kept_pending_and_not_scanned_again_once_committed() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.produce_in_flight("w", e2, 3, upd(2, v="c"))  # not committed yet
    in_flight_offset = len(world.log[0]) - 2
    world.reconcile()
    stats = world.runs[-1][0].stats
    assert stats.skipped_in_flight == 2 and stats.next_position == stats.end  # the position moves on
    assert stats.pending == [["w", e2, 3, "0.0", False, in_flight_offset, in_flight_offset + 1]]
    assert world.state.reconcile_progress is not None
    assert world.state.reconcile_progress["pending"] == {"0": stats.pending}
    assert stats.first_in_flight == {
        "offset": in_flight_offset,
        "writer_id": "w",
        "batch_id": 3,
        "epoch": e2,
        "state": "in-flight",
    }
    assert stats.reversed == 2
    world.reconcile()  # still in flight: carried over, nothing scanned again
    assert world.runs[-1][0].stats.start == stats.end  # only what the first run wrote after its end
    assert world.state.reconcile_progress["pending"] == {"0": stats.pending}
    world.commit_pending("w", e2, 3)
    assert world.reconcile() == []  # committed: dropped, no rescan
    assert world.runs[-1][0].stats.start == world.runs[-2][0].stats.end
    assert world.state.reconcile_progress["pending"] == {}
    world.assert_log_equals_table()


def test_a_pending_attempt_that_turns_redundant_is_scanned_again_once() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2))
    first_pending = len(world.log[0])
    world.produce_in_flight("w", e1, 2, upd(1, v="zombie"))  # e1's attempt of batch 2, in flight
    world.write("x", world.claim("x"), 1, ins(10, 11))  # other writers keep the log growing
    world.reconcile()
    assert world.runs[-1][0].stats.pending[0][5] == first_pending
    world.write("x", world.state.epochs["x"], 2, upd(10, v="later"))
    world.reconcile()  # still pending: only the new records are scanned
    assert world.runs[-1][0].stats.start > first_pending
    e2 = world.claim()  # the writer restarts and commits batch 2 itself: e1's attempt is redundant
    world.write("w", e2, 2, upd(1, v="b"))
    written = world.reconcile()
    stats = world.runs[-1][0].stats
    assert stats.start == first_pending and stats.redundant == 2  # scanned again from its first record
    reversed_ = sorted(o.source for o in written if o.record_type is RecordType.REVERSAL)
    assert reversed_ == [first_pending, first_pending + 1]
    assert world.state.reconcile_progress is not None and world.state.reconcile_progress["pending"] == {}
    world.reconcile()
    assert world.runs[-1][0].stats.start > first_pending  # once
    world.assert_log_equals_table()


def test_dead_pending_waits_for_the_successor_then_is_reversed() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()  # restarted, not committed yet
    assert world.reconcile() == []
    stats = world.runs[-1][0].stats
    assert stats.first_in_flight is not None and stats.first_in_flight["state"] == "dead-pending"
    world.write("w", e2, 2, upd(1, v="b"))
    assert len([o for o in world.reconcile() if o.record_type is RecordType.REVERSAL]) == 2
    world.assert_log_equals_table()


def test_records_after_an_in_flight_one_are_reversed_once_across_runs() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2, 3))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.produce_in_flight("w", e2, 2, upd(1, v="b"))  # the retry, not committed yet: in flight
    world.write("x", world.claim("x"), 1, ins(10))  # another writer
    world.write("x", world.state.epochs["x"], 2, ins(11), die=True)
    world.claim("x")
    world.write("x", world.state.epochs["x"], 2, ins(11))
    first = world.reconcile()
    assert {o.source for o in first if o.record_type is RecordType.REVERSAL} != set()
    world.commit_pending("w", e2, 2)
    second = world.reconcile()
    assert total(world, "already_reversed") >= 1  # x's reversed records are scanned again, skipped
    assert not {o.reverses for o in first} & {o.reverses for o in second if o.reverses}
    world.assert_log_equals_table()


# --- idempotence: re-runs and crashes ------------------------------------------------------------


def _failover_world() -> World:
    world = World()
    e1 = world.claim()
    world.write("w", e1, 1, ins(*range(1, 9)))
    world.write("w", e1, 2, upd(1, 2, 3, v="b") + dele(4, 5) + ins(9, 10), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, 2, 3, v="b") + dele(4, 5) + ins(9, 10))
    world.write("w", e2, 3, upd(1, 9, v="c") + dele(2))
    return world


def test_rerun_reverses_nothing() -> None:
    world = _failover_world()
    assert world.reconcile()
    assert world.reconcile() == []
    world.assert_log_equals_table()


def test_crash_between_output_and_progress_then_rerun_writes_nothing_twice() -> None:
    world = _failover_world()
    first = world.reconcile(crash=True)
    assert first and world.state.reconcile_progress is None
    second = world.reconcile()
    assert second == []  # every reversal and reassert was already written
    assert total(world, "already_reversed") == len([o for o in first if o.record_type is RecordType.REVERSAL])
    world.assert_log_equals_table()


@pytest.mark.parametrize("delivered", [0, 1, 2, 3])
def test_crash_in_the_middle_of_producing_then_rerun_completes(delivered: int) -> None:
    world = _failover_world()
    world.reconcile(deliver=delivered)
    world.reconcile()
    world.assert_log_equals_table()
    assert world.reconcile() == []


def test_writes_during_a_run_shadowed_by_its_reversals_are_reasserted_by_the_next_run() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))

    def concurrent_write() -> None:  # after the safe point, before the reversals land
        world.write("w", e2, 3, upd(1, v="c") + upd(2, v="c"))

    world.reconcile(during=concurrent_write)
    assert apply_upsert(world.changes()) != world.table_by_key()  # shadowed for now
    assert apply_retract(world.changes()).state == world.table_by_key()
    written = world.reconcile()
    assert [o.record_type for o in written] == [RecordType.REASSERT] * 2
    world.assert_log_equals_table()
    assert world.reconcile() == []


# --- dead letters, foreign records, keyless tables -----------------------------------------------


def test_undecodable_records_are_dead_lettered_and_counted() -> None:
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.append(0, b"[2]", None, b"not ours")
    world.append(
        0, b"[3]", [("format-version", b"1"), ("writer-id", b"w"), ("epoch", b"x"), ("batch-id", b"1")], b"{}"
    )
    world.append(0, b"[4]", encode_headers(RecordMeta("w", e1, 7)), b'{"kind":"+I","row"')  # truncated
    e2 = world.claim()
    world.write("w", e2, 7, ins(4))  # batch 7 committed by e2: the truncated record is redundant
    world.append(
        0, b"[5]", encode_headers(RecordMeta("ghost", 1, 1)), encode_value(RowKind.INSERT, {"id": 5})
    )
    records = world.log[0]
    plans, dead = R.plan_partitions(records, world.state, {0: 0}, {0: len(records)})
    assert [record.offset for record, _ in dead] == [1, 2, 3]
    assert "no LogStore headers" in dead[0][1] and "not an integer" in dead[1][1]
    assert "cannot be reversed" in dead[2][1]
    stats = plans[0].stats
    assert (stats.dead_lettered, stats.foreign, stats.scanned, stats.reversed) == (3, 1, 6, 0)
    summary = R.summarize([stats])
    assert summary["dead_lettered"] == 3 and sum(summary["dead_letter_reasons"].values()) == 3


def test_keyless_table_gets_reversals_only() -> None:
    world = World(keyed=False)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1, 2))
    world.write("w", e1, 2, ins(3, 4), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, ins(3, 4))
    written = world.reconcile()
    assert [o.record_type for o in written] == [RecordType.REVERSAL] * 2 and all(
        o.key is None for o in written
    )
    world.assert_log_equals_table(upsert=False)
    assert world.reconcile() == []


# --- positions and gaps --------------------------------------------------------------------------


def test_start_positions_report_retention_gaps() -> None:
    starts, gaps, warnings = R.start_positions(
        {0: 5, 1: 40, 2: 3}, {0: (0, 10), 1: (25, 50), 2: (0, 3), 3: (7, 9)}
    )
    assert starts == {0: 5, 1: 40, 2: 3, 3: 7}
    assert [g.to_dict() for g in gaps] == [
        {"partition": 3, "from": 0, "to": 7, "count": 7, "detected": "log-start"}
    ]
    assert warnings == []
    starts, gaps, _ = R.start_positions({0: 5}, {0: (30, 50)})
    assert starts == {0: 30} and gaps[0].count == 25
    starts, gaps, warnings = R.start_positions({0: 99}, {0: (2, 50)})
    assert starts == {0: 2} and not gaps and "beyond the log end" in warnings[0]


def test_scan_gaps_when_records_vanish_during_the_scan() -> None:
    stats = [R.PartitionStats(0, 5, 10, first_offset=8), R.PartitionStats(1, 0, 4), R.PartitionStats(2, 3, 3)]
    assert [(g.partition, g.from_offset, g.to_offset) for g in R.scan_gaps(stats)] == [(0, 5, 8), (1, 0, 4)]


def test_lookback_ranges_cover_the_previous_runs_output() -> None:
    progress = {"safe_point": {"0": 100, "1": 50}, "output": {"0": [104, 110], "1": [20, 30]}}
    assert R.lookback_ranges(progress, {0: 100, 1: 60}) == {0: (100, 110)}
    assert R.lookback_ranges(progress, {0: 90, 1: 10}) == {0: (100, 110)}
    assert R.lookback_ranges(None, {0: 0}) == {}


def test_progress_value_and_run_number() -> None:
    value = R.progress_value(
        positions={1: 5, 0: 7},
        safe_point={0: 9, 1: 5},
        output={0: (9, 12)},
        lease_id=4,
        run=3,
        owner="me",
        summary={"scanned": 10, "reversed": 2, "other": 1},
        now_ms=123,
    )
    assert value["positions"] == {"0": 7, "1": 5} and value["output"] == {"0": [9, 12]}
    assert value["report"] == {"scanned": 10, "reversed": 2}
    assert R.run_number(value) == 4 and R.run_number(None) == 1
    assert json.loads(json.dumps(value)) == value


def test_summary_groups_redundant_records_by_writer_batch_and_epoch() -> None:
    a = R.PartitionStats(0, 0, 9, redundant=3, redundant_by_attempt={"w/2/1": 2, "w/3/1": 1})
    b = R.PartitionStats(1, 0, 9, redundant=2, redundant_by_attempt={"w/2/1": 1, "x/2/4": 1})
    summary = R.summarize([a, b])
    assert summary["redundant"] == 5
    assert summary["redundant_by_attempt"] == {"w/2/1": 3, "w/3/1": 1, "x/2/4": 1}
    assert summary["redundant_by_writer"] == {"w": 4, "x": 1}
    assert summary["redundant_by_batch"] == {"w/2": 3, "w/3": 1, "x/2": 1}
    assert summary["redundant_by_epoch"] == {"w/1": 4, "x/4": 1}


# --- randomized histories ------------------------------------------------------------------------


def _random_rows(rng: random.Random, keys: int, table: dict[Any, Any], batch: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(rng.randint(1, 6)):
        key = rng.randrange(keys)
        op = rng.choice(["insert", "update", "delete", "update"])
        if op == "delete":
            rows.append({"id": key, "op": "delete"})
        else:
            rows.append({"id": key, "v": f"b{batch}-{rng.randrange(3)}", "op": op})
    return rows


def _random_history(seed: int) -> World:
    rng = random.Random(seed)
    world = World(partitions=rng.choice([1, 2, 3]))
    epoch = world.claim()
    batch = 0
    for _ in range(rng.randint(4, 14)):
        batch += 1
        rows = _random_rows(rng, 6, world.table, batch)
        while rng.random() < 0.4:  # failed attempts of this batch, each followed by a restart
            limit = rng.choice([None, 0, 1, 2, 3])
            world.write("w", epoch, batch, rows, die=True, limit=limit if limit is not None else None)
            epoch = world.claim()
            if rng.random() < 0.3:
                world.reconcile()  # dead pending: nothing to reverse yet
        action = rng.random()
        if action < 0.15:
            world.produce_in_flight("w", epoch, batch, rows)
            world.reconcile()
            world.commit_pending("w", epoch, batch)
        elif action < 0.3:
            world.write("w", epoch, batch, rows, failed_task_first=True)
        else:
            world.write("w", epoch, batch, rows)
        roll = rng.random()
        if roll < 0.15:
            world.reconcile(crash=True)
        elif roll < 0.25:
            world.reconcile(deliver=rng.randint(0, 3))
        elif roll < 0.4:
            batch += 1
            later = _random_rows(rng, 6, world.table, batch)
            world.reconcile(during=lambda b=batch, r=later, e=epoch: world.write("w", e, b, r))
        elif roll < 0.6:
            world.reconcile()
    world.reconcile()
    world.reconcile()  # a writer-free run after the last one that raced with writes
    return world


@pytest.mark.parametrize("seed", range(300))
def test_randomized_histories_converge_under_retract_and_upsert(seed: int) -> None:
    world = _random_history(seed)
    world.assert_log_equals_table()
    assert world.reconcile() == []  # and stay converged


def _all(world: World) -> Iterable[R.LogRecordIn]:
    for partition in sorted(world.log):
        yield from world.log[partition]


def _type(record: R.LogRecordIn) -> RecordType:
    return decode_headers(record.headers).record_type


def test_scan_workers_get_partitions_of_about_equal_size() -> None:
    from airflow_logstore.reconcile.scan import split

    assert split({0: 100, 1: 90, 2: 20, 3: 10}, 2) == [[0, 3], [1, 2]]
    assert split({0: 5}, 3) == [[0]]


# --- copies of reconciler records: a retried reconcile task, two reconcilers (issue 33, holes 1, 2) ------


def _copies_in_log(world: World) -> int:
    """Reconciler records in the log beyond the first copy of each (what readers skip)."""
    return len(world.changes(copies=True)) - len(world.changes())


@pytest.mark.parametrize("flushed", [0, 1, 2, 3, 5])
def test_a_reconcile_task_retried_after_a_partial_flush_changes_no_fold(flushed: int) -> None:
    """Spark retries a reconcile task that flushed a prefix of its partition's records: the retry sends
    them all again. Readers count each reconciler record once (its identity), so the log still folds to
    the table; without that, the copies reverse rows twice."""
    world = _failover_world()
    written = world.reconcile(resend_after=flushed)
    per_partition = [len(plan.outputs) for plan in world.runs[-1]]
    assert written and _copies_in_log(world) == sum(min(flushed, n) for n in per_partition)
    world.assert_log_equals_table()
    if flushed:  # the copies are really there: read without the identity rule, the fold is wrong
        assert apply_retract(world.changes(copies=True)).state != world.table_by_key()
    assert world.reconcile() == []  # the next run sees every original reversed
    world.assert_log_equals_table()


def test_two_reconcilers_that_planned_the_same_window_fold_once() -> None:
    """Reconciler A plans and stalls past its lease; B takes the lease, plans the same window (A never
    recorded progress), writes and records its run; A wakes up and writes its plan late. Every record
    of A's has a twin of B's with the same identity: readers and the next run count it once."""
    world = _failover_world()
    late: list[R.Output] = []

    def b_runs_meanwhile() -> None:
        late.extend(world.reconcile())

    a_outputs = world.reconcile(during=b_runs_meanwhile, crash=True)  # A's progress is fenced: not recorded
    assert late and [o.value for o in a_outputs] == [o.value for o in late]
    assert _copies_in_log(world) == len(late)
    world.assert_log_equals_table()
    assert world.reconcile() == []
    world.assert_log_equals_table()


def test_a_copy_of_a_reassert_pair_cut_in_two_is_closed_by_the_next_run_and_holds_the_watermark() -> None:
    """A retried task delivered a whole reassert pair, and a stalled second reconciler only the opening
    half of its copy: the watermark stops before that open half until the next run closes it (with a
    copy of the closing half, which readers skip)."""
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.write("w", e2, 3, upd(1, v="c"))  # a legitimate change after the redundant one: a reassert
    outputs = world.reconcile()
    pair = [o for o in outputs if o.record_type is RecordType.REASSERT]
    assert [o.pair_half for o in pair] == [1, 2]
    run = R.run_number(None)
    opening = world.append(0, pair[0].key, pair[0].headers(999, run), pair[0].value)  # a copy's half
    scan = WatermarkScan({})
    for record in world.log[0]:
        meta = decode_headers(record.headers)
        scan.observe(
            0, record.offset, classify(meta, 0, record.offset, world.state), meta.pair_half, meta.reasserts
        )
    assert scan.finish({0: len(world.log[0])}) == {0: opening - 1}
    closing = world.reconcile()
    assert [(o.pair_half, o.pair_of(2)) for o in closing] == [(2, pair[0].pair_of(run))]
    world.assert_log_equals_table()
    scan = WatermarkScan({})
    for record in world.log[0]:
        meta = decode_headers(record.headers)
        scan.observe(
            0, record.offset, classify(meta, 0, record.offset, world.state), meta.pair_half, meta.reasserts
        )
    assert scan.finish({0: len(world.log[0])}) == {0: len(world.log[0]) - 1}


def test_an_open_half_whose_originals_retention_deleted_is_still_closed() -> None:
    """A run crashed between a pair's halves, and retention then deleted the redundant record the pair
    followed: the next run's window starts after it, so no redundant record makes it follow the key.
    The open half alone must: else the watermark stays before it for good (found by the simulation,
    seed 7792 of issue 33's first sweep)."""
    world = World(partitions=1)
    e1 = world.claim()
    world.write("w", e1, 1, ins(1))
    world.write("w", e1, 2, upd(1, v="b"), die=True)
    e2 = world.claim()
    world.write("w", e2, 2, upd(1, v="b"))
    world.write("w", e2, 3, upd(1, v="c"))
    assert world.reconcile(deliver=0) == []  # planned, nothing delivered
    planned = [o for plan in world.runs[-1] for o in plan.outputs]
    opening = next(o for o in planned if o.record_type is RecordType.REASSERT and o.pair_half == 1)
    offset = world.append(0, opening.key, opening.headers(5, 1), opening.value)  # then the run died
    window = [r for r in world.log[0] if r.offset >= offset]  # retention deleted everything before
    plans, _ = R.plan_partitions(window, _copy_state(world.state), {0: offset}, {0: offset + 1})
    closing = [o for plan in plans for o in plan.outputs]
    assert [(o.pair_half, o.pair_of(9)) for o in closing] == [(2, opening.pair_of(1))]
