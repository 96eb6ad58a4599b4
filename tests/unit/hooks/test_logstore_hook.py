"""LogStoreHook: which connection it loads, and when (only) the embedded default applies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowNotFoundException
from structlog.testing import capture_logs

from airflow_logstore.exceptions import ConnectionUnavailableError
from airflow_logstore.hooks.logstore import LogStoreHook


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path))
    monkeypatch.delenv("LOGSTORE_CATALOG", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_LOGSTORE_DEFAULT", raising=False)
    return tmp_path


def _failing_backend(monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[str]:
    asked: list[str] = []

    def get_connection(conn_id: str) -> None:
        asked.append(conn_id)
        raise error

    monkeypatch.setattr(LogStoreHook, "get_connection", staticmethod(get_connection))
    return asked


def test_a_defined_connection_is_used(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_LOGSTORE_PROD",
        json.dumps({"conn_type": "logstore", "host": "http://rest:8181", "extra": {"type": "rest"}}),
    )
    spec = LogStoreHook("logstore_prod").catalog_spec()
    assert (spec.type, spec.uri) == ("rest", "http://rest:8181")


def test_an_explicit_id_that_is_not_defined_is_an_error_naming_it(home: Path) -> None:
    with pytest.raises(ConnectionUnavailableError, match="connection 'logstore_prod' is not defined"):
        LogStoreHook("logstore_prod").catalog_spec()
    with pytest.raises(ConnectionUnavailableError, match="connection 'kafka_prod' is not defined"):
        LogStoreHook(kafka_config_id="kafka_prod").kafka_extra()
    assert not (home / "catalog.db").exists()  # nothing local was touched


def test_the_default_id_missing_uses_the_embedded_default_and_says_so(home: Path) -> None:
    with capture_logs() as logs:  # Airflow's task logger is structlog
        spec = LogStoreHook().catalog_spec()
        kafka = LogStoreHook().kafka_extra()
    assert spec.uri.startswith(f"sqlite:///{home}") and kafka == {}
    events = [(entry["log_level"], entry["event"]) for entry in logs]
    # the documented local set-up: said at INFO, not as a warning
    assert (
        "info",
        "no LogStore connection configured ('logstore_default' not defined): using the embedded default "
        f"sql catalog '{spec.name}', warehouse {spec.warehouse}",
    ) in events
    assert any(level == "info" and "'kafka_default' not defined" in event for level, event in events)
    assert not [entry for entry in logs if entry["log_level"] not in ("info", "debug")], logs


def _notices(logs: list[dict]) -> list[str]:
    return [entry["event"] for entry in logs if " connection configured (" in entry["event"]]


def test_a_hook_says_which_default_applies_once_however_often_it_is_asked(home: Path) -> None:
    """A sensor polls through one hook: its log says which default applies once, not at every poll."""
    hook = LogStoreHook()
    with capture_logs() as logs:
        for _ in range(3):
            hook.catalog_spec()
            hook.kafka_extra()
    said = _notices(logs)
    assert len(said) == 2 and "'logstore_default' not defined" in said[0], said
    assert "'kafka_default' not defined" in said[1], said
    with capture_logs() as logs:
        quiet = LogStoreHook(log_defaults=False)
        quiet.catalog_spec()
        quiet.kafka_extra()
    assert _notices(logs) == []


def test_no_connection_id_at_all_uses_the_embedded_default(home: Path) -> None:
    assert (
        LogStoreHook(logstore_conn_id="", kafka_config_id=None)
        .catalog_spec()
        .uri.startswith(f"sqlite:///{home}")
    )


@pytest.mark.parametrize("conn_id", ["logstore_default", "logstore_prod"])
def test_a_backend_error_never_falls_back(home: Path, monkeypatch: pytest.MonkeyPatch, conn_id: str) -> None:
    asked = _failing_backend(monkeypatch, TimeoutError("vault did not answer"))
    with pytest.raises(ConnectionUnavailableError) as caught:
        LogStoreHook(conn_id).catalog_spec()
    assert asked == [conn_id]
    assert f"connection '{conn_id}' could not be loaded" in str(caught.value)
    assert "TimeoutError: vault did not answer" in str(caught.value)
    assert not (home / "catalog.db").exists()


def test_a_backend_error_on_the_kafka_connection_never_falls_back(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_backend(monkeypatch, PermissionError("access denied"))
    with pytest.raises(ConnectionUnavailableError, match="connection 'kafka_default' could not be loaded"):
        LogStoreHook().kafka_extra()


def test_not_found_is_recognised_as_airflow_reports_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = AirflowNotFoundException("The conn_id `logstore_default` isn't defined")
    asked = _failing_backend(monkeypatch, missing)
    assert LogStoreHook().catalog_spec().uri.startswith(f"sqlite:///{home}")
    assert asked == ["logstore_default"]
