"""LogStoreReconcileOperator and `logstore reconcile` without services: arguments, templating, errors."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_logstore.cli import build_parser
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.reconcile.reconciler import ReconcileReport


def test_operator_fields_and_no_io_in_init() -> None:
    operator = LogStoreReconcileOperator(task_id="r", table="db.t", dry_run="{{ params.dry_run }}")
    assert set(operator.template_fields) == {"table", "dry_run_flag", "engine", "scanner"}
    assert operator.dry_run_flag == "{{ params.dry_run }}"
    assert callable(operator.dry_run)  # BaseOperator.dry_run() stays a method


def test_operator_runs_the_library_and_returns_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_reconcile(handle: Any, **kwargs: Any) -> ReconcileReport:
        calls.append({"table": str(handle.name), **kwargs})
        return ReconcileReport(str(handle.name), status="dry-run", dry_run=True, reversed=3)

    monkeypatch.setattr("airflow_logstore.reconcile.reconciler.reconcile", fake_reconcile)
    operator = LogStoreReconcileOperator(
        task_id="r", table="db.t", dry_run="True", lease_ttl_s=30, scanner="librdkafka"
    )
    result = operator.execute(context={})
    assert result["reversed"] == 3 and result["dry_run"] is True
    engine = calls[0].pop("engine")
    assert calls == [{"table": "db.t", "dry_run": True, "lease_ttl_s": 30}]
    assert (engine.name, engine.scanner) == ("python", "librdkafka")


def test_operator_refuses_an_unknown_scanner() -> None:
    operator = LogStoreReconcileOperator(task_id="r", table="db.t", scanner="kafka-python")
    with pytest.raises(
        AirflowFailException, match=r"^OptionError: option 'scanner': 'kafka-python' is not one of"
    ):
        operator.execute(context={})


def test_operator_refuses_an_unknown_engine() -> None:
    operator = LogStoreReconcileOperator(task_id="r", table="db.t", engine="flink")
    with pytest.raises(AirflowFailException, match=r"^OptionError: option 'engine': 'flink' is not one of"):
        operator.execute(context={})


def test_cli_subcommand() -> None:
    args = build_parser().parse_args(["reconcile", "db.t", "--dry-run", "--lease-ttl", "30"])
    assert (args.table, args.dry_run, args.lease_ttl) == ("db.t", True, 30.0)
    assert build_parser().parse_args(["reconcile", "db.t", "--scanner", "jvm"]).scanner == "jvm"
    assert args.scanner == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reconcile", "db.t", "--scanner", "somewhere"])
