"""The Python engine's scan (``reconcile.scan.scan_task``) over a scripted consumer: it must plan what
``core.reconcile.plan_partitions`` plans from the same records (no Kafka)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from airflow_logstore.core import reconcile as R
from airflow_logstore.log import kafka_client
from airflow_logstore.reconcile import scan as reconcile_scan
from tests.unit.core.test_reconcile import _comparable, _copy_state, _random_history
from tests.unit.test_topic_scan import _Consumer


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


@pytest.mark.parametrize("seed", range(30))
def test_the_scan_plans_what_the_planner_plans_from_the_same_records(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    world = _random_history(seed)
    world.write("w", world.state.epochs["w"], 999, [{"id": 1, "v": "x", "op": "update"}], die=True)
    world.claim()
    bounds = {p: (0, len(records)) for p, records in world.log.items()}
    starts, _, _ = R.start_positions({} if seed % 2 else world.state.reconcile_positions, bounds)
    ends = {p: high for p, (_, high) in bounds.items()}
    lookback = R.lookback_ranges(world.state.reconcile_progress, starts)
    window = [r for p in sorted(world.log) for r in world.log[p][starts[p] : ends[p]]]
    expected, _ = R.plan_partitions(window, _copy_state(world.state), starts, ends, lookback)

    cons = _Consumer(_polls(window, rng))
    monkeypatch.setattr(kafka_client, "consumer", lambda config, **settings: cons)
    cons.close = lambda: None  # type: ignore[attr-defined]
    task = reconcile_scan.ScanTask("t", {}, starts, ends, _copy_state(world.state), lookback, None)
    plans = reconcile_scan.scan_task(task)
    assert [p.outputs for p in plans] == [p.outputs for p in expected]
    assert [_comparable(p.stats) for p in plans] == [_comparable(p.stats) for p in expected]
