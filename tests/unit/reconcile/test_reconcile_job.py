"""The Spark engine's planning (``reconcile/reconcile_job.plan_batches``) on Arrow batches, without Spark:
it must plan exactly what the Python engine plans (``core.reconcile.plan_partitions``), and its produce
stage must write the same records, headers included (a reassert's half and pair identity)."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from airflow_logstore.core import ranges
from airflow_logstore.core import reconcile as R
from airflow_logstore.reconcile import reconcile_job
from airflow_logstore.reconcile.reconcile_job import PlanContext, _planned_output, plan_batches
from airflow_logstore.spark import results
from tests.unit.core.test_reconcile import World, _comparable, _copy_state, _random_history

LEASE, RUN = 7, 3  # the run's lease and number, as the produce stage stamps them
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_KAFKA_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", _HEADERS),
    ]
)


def _batches(records: list[R.LogRecordIn], rng: random.Random) -> list[pa.RecordBatch]:
    """One partition's records as Arrow batches of random sizes (as Spark's Kafka source hands them)."""
    rows = [
        {
            "partition": r.partition,
            "offset": r.offset,
            "key": r.key,
            "value": r.value,
            "headers": None if r.headers is None else [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in records
    ]
    batches = []
    while rows:
        size = rng.randint(1, 7)
        batches.append(pa.RecordBatch.from_pylist(rows[:size], schema=_KAFKA_SCHEMA))
        rows = rows[size:]
    return batches


def _spark_plan(world: World, ctx: PlanContext, rng: random.Random) -> dict[int, dict[str, Any]]:
    planned: dict[int, dict[str, Any]] = {}
    for partition in sorted(ctx.ends):
        window = world.log[partition][ctx.starts[partition] : ctx.ends[partition]]
        for batch in plan_batches(_batches(window, rng), ctx):
            for row in batch.to_pylist():
                entry = planned.setdefault(row["partition"], {"outputs": [], "dead": []})
                if row["kind"] == "stats":
                    stats = R.PartitionStats.from_dict(json.loads(row["stats"]))
                    entry["stats"] = _comparable(stats)
                elif row["kind"] == "output":  # what the produce stage writes from the row
                    out = _planned_output(row)
                    entry["outputs"].append((out.key, out.value, out.headers(LEASE, RUN)))
                else:
                    entry["dead"].append(row["dead_offset"])
    return planned


def _python_plan(world: World, ctx: PlanContext) -> dict[int, dict[str, Any]]:
    records = [r for p in sorted(world.log) for r in world.log[p][ctx.starts[p] : ctx.ends[p]]]
    plans, dead = R.plan_partitions(records, _copy_state(world.state), ctx.starts, ctx.ends, ctx.lookback)
    return {
        plan.partition: {
            "outputs": [(o.key, o.value, o.headers(LEASE, RUN)) for o in plan.iter_outputs()],
            "dead": [record.offset for record, _ in dead if record.partition == plan.partition],
            "stats": _comparable(plan.stats),
        }
        for plan in plans
        if plan.stats.start < plan.stats.end
    }


@pytest.mark.parametrize("seed", range(40))
def test_the_spark_engine_plans_what_the_python_engine_plans(seed: int) -> None:
    rng = random.Random(seed)
    world = _random_history(seed)
    epoch = world.state.epochs["w"]
    batch = max(b for _, b in world.state.commits) + 1
    world.write("w", epoch, batch, [{"id": 1, "v": "x", "op": "update"}], die=True)  # left unreconciled
    dead, epoch = epoch, world.claim()
    world.write("w", epoch, batch, [{"id": 1, "v": "y", "op": "update"}])
    # a dead attempt's records inside the next commit's spans: not committed, though inside them
    plan = world.plan([{"id": n, "v": "z", "op": "update"} for n in range(8)])
    half = len(plan.records) // 2
    head = world.produce("w", epoch, batch + 1, plan.records[:half])
    world.produce("w", dead, batch + 1, plan.records)
    tail = world.produce("w", epoch, batch + 1, plan.records[half:])
    world.commit("w", epoch, batch + 1, ranges.merge_spans([head, tail]), plan, "0.0", len(plan.records))
    world.log[0].append(R.LogRecordIn(0, len(world.log[0]), b"[9]", None, b"{}"))  # a dead letter
    bounds = {p: (0, len(records)) for p, records in world.log.items()}
    starts, _, _ = R.start_positions(world.state.reconcile_positions if rng.random() < 0.5 else {}, bounds)
    ends = {p: high for p, (_, high) in bounds.items()}
    ctx = PlanContext(
        _copy_state(world.state), starts, ends, R.lookback_ranges(world.state.reconcile_progress, starts)
    )
    expected = _python_plan(world, ctx)
    assert any(entry["outputs"] for entry in expected.values())
    assert _spark_plan(world, ctx, rng) == expected


def test_a_bad_kill_point_fails_the_spark_job_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The kill points are the reconciler's (``reconcile:<stage>``); a bad value is one line, exit code 1,
    before the job's Spark session (every table job checks it: ``spark.results.run_table_job``)."""
    monkeypatch.setenv("LOGSTORE_KILL_AT", "output-flushed")
    monkeypatch.setattr(results, "job_session", lambda app: pytest.fail("Spark started"))
    monkeypatch.setattr(results, "emit_failure", lambda exc, **where: None)  # no table to report next to
    assert reconcile_job.main(["--table", "db.t"]) == 1
    err = capsys.readouterr().err
    assert "reconcile: error: LOGSTORE_KILL_AT: 'output-flushed' is not a kill point; the kill points " in err
    assert "reconcile:output-flushed" in err
