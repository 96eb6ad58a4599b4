"""Airflow's secrets masker hides every secret of LogStore's connections in task logs."""

from __future__ import annotations

import json

import pytest


def test_the_hook_has_airflow_mask_every_secret_of_the_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.log import redact

    from airflow_logstore.hooks.logstore import LogStoreHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_LOGSTORE_MASKED",
        json.dumps(
            {
                "conn_type": "logstore",
                "host": "http://catalog:8181",
                "extra": {
                    "properties": {"credential": "Masked-credential-1", "s3.access-key-id": "Masked-key-1"}
                },
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_MASKED",
        json.dumps(
            {"conn_type": "kafka", "extra": {"sasl.password": "Masked-sasl-1", "sasl.username": "someone"}}
        ),
    )
    hook = LogStoreHook("logstore_masked", "kafka_masked")
    assert hook.catalog_spec().properties["credential"] == "Masked-credential-1"
    assert hook.kafka_extra()["sasl.password"] == "Masked-sasl-1"
    line = str(redact("credential Masked-credential-1 key Masked-key-1 sasl Masked-sasl-1 user someone"))
    assert "Masked-" not in line and "someone" in line, line
