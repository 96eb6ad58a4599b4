"""The steps of one reconciler run, each alone, and a whole run of them against an in-memory control
topic and a scripted engine (no Kafka, no table)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core import reconcile as core
from airflow_logstore.exceptions import FencedError
from airflow_logstore.pause import KillPointError
from airflow_logstore.reconcile import reconciler as rec
from airflow_logstore.reconcile.reconciler import PlanResult, ReconcilerLease, ScanJob, TableLog
from tests.unit.reconcile.test_reconciler_lease import Broker, InMemoryControlTopic


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch) -> InMemoryControlTopic:
    monkeypatch.setattr(ReconcilerLease, "_keep", lambda self: None)  # no renewal thread
    return InMemoryControlTopic(Broker())


def _state(positions: dict[int, int], progress: dict[str, Any] | None = None) -> control.ControlState:
    return control.ControlState(reconcile_positions=positions, reconcile_progress=progress)


def test_plan_window_starts_at_the_saved_positions_and_reports_gaps() -> None:
    progress = {"run": 4, "safe_point": {"0": 10, "1": 5}, "output": {"0": [11, 12]}}
    state = _state({0: 10, 1: 2}, progress)
    bounds = {0: (0, 20), 1: (3, 9)}
    window = rec.plan_window(state, bounds)
    assert window.run == 5
    assert window.starts == {0: 10, 1: 3}
    assert window.gaps == [core.Gap(1, 2, 3)]
    assert window.safe_point == {0: 20, 1: 9}
    assert window.lookback == {0: (10, 12)}
    assert state.reconcile_positions == {0: 10, 1: 2} and bounds == {0: (0, 20), 1: (3, 9)}  # unchanged


def test_progress_is_recorded_only_when_something_changed() -> None:
    state = _state({0: 5, 1: 7})
    assert not rec.progress_changed(state, {0: 5, 1: 7}, {}, [])
    assert rec.progress_changed(state, {0: 6, 1: 7}, {}, [])
    assert rec.progress_changed(state, {0: 5, 1: 7}, {0: (8, 9)}, [])
    assert rec.progress_changed(state, {0: 5, 1: 7}, {}, [core.Gap(0, 1, 2)])
    assert rec.progress_changed(_state({}), {0: 0}, {}, [])  # a first run records where it stopped


def test_window_fields_say_where_the_run_scanned() -> None:
    window = rec.plan_window(_state({0: 4}), {0: (2, 9), 1: (0, 0)})
    stats = [core.PartitionStats(0, 4, 9, next_position=6), core.PartitionStats(1, 0, 0, next_position=0)]
    fields = rec.window_fields(window, _state({0: 4}), stats, [core.Gap(0, 2, 3, "scan")])
    assert fields["safe_point"] == {"0": 9, "1": 0}
    assert fields["log_start"] == {"0": 2, "1": 0}
    assert fields["positions_before"] == {"0": 4, "1": 0}
    assert fields["positions_after"] == {"0": 6, "1": 0}
    assert fields["gaps"] == [{"partition": 0, "from": 2, "to": 3, "count": 1, "detected": "scan"}]


def test_take_lease_holds_it_or_names_the_holder(ctl: InMemoryControlTopic) -> None:
    first = rec.take_lease(ctl, "a", 30.0)
    assert isinstance(first, ReconcilerLease) and first.lease_id == 1
    second = rec.take_lease(ctl, "b", 30.0)
    assert isinstance(second, control.Lease) and second.owner == "a"
    assert rec.lease_held("t", second)["lease_holder"]["owner"] == "a"


class _Engine:
    """Plans a fixed result; produce records what it was asked and returns the given offsets."""

    name = "scripted"

    def __init__(self, result: PlanResult, written: dict[int, tuple[int, int]]) -> None:
        self.result, self.written = result, written
        self.jobs: list[ScanJob] = []

    def plan(self, job: ScanJob) -> PlanResult:
        self.jobs.append(job)
        return self.result

    def produce(self, job: ScanJob, result: PlanResult, lease_id: int, run: int) -> rec.Offsets:
        return self.written


def _table_log(ctl: InMemoryControlTopic) -> TableLog:
    config = SimpleNamespace(partitions=2, replication_factor=None)
    return TableLog(SimpleNamespace(name="db.t"), None, config, "t", ctl, {})  # type: ignore[arg-type]


def _run(
    ctl: InMemoryControlTopic,
    monkeypatch: pytest.MonkeyPatch,
    lease: ReconcilerLease | None,
    outputs: int = 1,
    stages: list[str] | None = None,
) -> tuple[dict[str, Any], list[str], _Engine]:
    stats = [
        core.PartitionStats(0, 0, 10, first_offset=0, reversed=1, next_position=7),
        core.PartitionStats(1, 2, 4, first_offset=2, next_position=4),
    ]
    engine = _Engine(PlanResult(stats, outputs, None), {0: (10, 10)} if outputs else {})
    monkeypatch.setattr(rec, "safe_point", lambda log_side: {0: (0, 10), 1: (2, 4)})
    monkeypatch.setattr(rec, "control_state", lambda log_side, record_ledger: (ctl.read(), ["w/1/1"]))
    stages = [] if stages is None else stages
    fields = rec._run(_table_log(ctl), engine, lease, rec._at_stage(stages.append))
    return fields, stages, engine


def test_a_run_plans_produces_and_records_in_the_protocols_order(
    ctl: InMemoryControlTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = rec.take_lease(ctl, "me", 30.0)
    assert isinstance(lease, ReconcilerLease)
    fields, stages, engine = _run(ctl, monkeypatch, lease)
    assert stages == ["planned", "lease-checked", "output-flushed", "before-progress"]
    assert engine.jobs[0].starts == {0: 0, 1: 2} and engine.jobs[0].ends == {0: 10, 1: 4}
    assert fields["output_offsets"] == {"0": [10, 10]} and fields["progress_recorded"]
    assert fields["gaps"] == [{"partition": 1, "from": 0, "to": 2, "count": 2, "detected": "log-start"}]
    state = ctl.read()
    assert state.reconcile_positions == {0: 7, 1: 4}
    progress = state.reconcile_progress or {}
    assert progress["output"] == {"0": [10, 10]} and progress["lease"] == lease.lease_id
    assert list(state.gaps) == [1]


def test_a_dry_run_writes_nothing(ctl: InMemoryControlTopic, monkeypatch: pytest.MonkeyPatch) -> None:
    fields, stages, _ = _run(ctl, monkeypatch, None)
    assert stages == ["planned"]
    assert "progress_recorded" not in fields and fields["ledger_added"] == ["w/1/1"]
    assert fields["reversed"] == 1 and fields["positions_after"] == {"0": 7, "1": 4}
    assert ctl.broker.records == []


@pytest.mark.parametrize("outputs", [0, 1])
def test_a_fenced_run_stops_before_writing(
    ctl: InMemoryControlTopic, monkeypatch: pytest.MonkeyPatch, outputs: int
) -> None:
    lease = rec.take_lease(ctl, "me", 30.0)
    assert isinstance(lease, ReconcilerLease)
    ctl.append(control.lease_key(rec.LEASE_NAME), {"release": lease.lease_id, "owner": "me"})
    with pytest.raises(FencedError):
        _run(ctl, monkeypatch, lease, outputs)
    # nothing produced, no progress (the gap records go first, unchecked, as they always did)
    assert ctl.read().reconcile_progress is None
    assert {r.key for r in ctl.broker.records} <= {control.lease_key(rec.LEASE_NAME), control.gap_key(1)}


class _Killed(BaseException):
    """What SIGKILL does to the run: nothing after it runs (``finally`` blocks aside, in this stand-in)."""


def test_a_kill_point_stops_a_run_at_its_stage(
    ctl: InMemoryControlTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LOGSTORE_KILL_AT=reconcile:output-flushed``: killed after its reversals, before its progress."""
    signals: list[int] = []

    def kill(pid: int, sig: int) -> None:
        signals.append(sig)
        raise _Killed

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setenv("LOGSTORE_KILL_AT", "reconcile:output-flushed")
    lease = rec.take_lease(ctl, "me", 30.0)
    assert isinstance(lease, ReconcilerLease)
    stages: list[str] = []
    with pytest.raises(_Killed):
        _run(ctl, monkeypatch, lease, stages=stages)
    assert signals == [signal.SIGKILL] and stages == ["planned", "lease-checked"]
    assert ctl.read().reconcile_progress is None


def test_a_bad_kill_point_fails_a_run_before_it_reads_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSTORE_KILL_AT", "reconcile:planed")
    monkeypatch.setattr(TableLog, "open", lambda handle: pytest.fail("the run read the table"))
    with pytest.raises(KillPointError, match=r"'reconcile:planed' is not a kill point; .* reconcile:planned"):
        rec.reconcile(SimpleNamespace(name="db.t"))  # type: ignore[arg-type]
