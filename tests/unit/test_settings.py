"""Local settings read from the environment (never at import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_logstore.settings import extra_kafka_config, local_settings


def test_defaults_live_in_the_home_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = local_settings({})
    home = tmp_path.resolve()
    assert settings.home == home / ".logstore"
    assert settings.cache == home / ".cache" / "airflow-logstore"
    assert settings.kafka_port == 19092
    assert settings.spark_master == "local[2]"
    assert settings.kafka_bootstrap == "127.0.0.1:19092"


def test_environment_overrides(tmp_path: Path) -> None:
    settings = local_settings(
        {
            "LOGSTORE_HOME": str(tmp_path / "state"),
            "LOGSTORE_CACHE": str(tmp_path / "cache"),
            "LOGSTORE_KAFKA_PORT": "29092",
            "LOGSTORE_SPARK_MASTER": "spark://master:7077",
        }
    )
    state = (tmp_path / "state").resolve()
    cache = (tmp_path / "cache").resolve()
    assert settings.home == state
    assert settings.cache == cache
    assert settings.kafka_port == 29092
    assert settings.kafka_bootstrap == "127.0.0.1:29092"
    assert settings.spark_master == "spark://master:7077"
    assert settings.broker_dir == state / "kafka"
    assert settings.catalog_db == state / "catalog" / "catalog.db"
    assert settings.warehouse == state / "warehouse"
    assert settings.jars_dir == cache / "jars"
    assert settings.maven_repo == cache / "m2"


def test_empty_values_fall_back_to_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = local_settings(
        {"LOGSTORE_HOME": "", "LOGSTORE_CACHE": "", "LOGSTORE_KAFKA_PORT": "", "LOGSTORE_SPARK_MASTER": ""}
    )
    assert settings == local_settings({})


def test_paths_are_expanded_and_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    settings = local_settings({"LOGSTORE_HOME": "~/state", "LOGSTORE_CACHE": "rel/cache"})
    assert settings.home == tmp_path.resolve() / "state"
    assert settings.cache == tmp_path.resolve() / "rel" / "cache"
    assert settings.home.is_absolute() and settings.cache.is_absolute()


def test_reads_the_process_environment_when_called(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path / "one"))
    monkeypatch.setenv("LOGSTORE_KAFKA_PORT", "1234")
    assert local_settings().home == (tmp_path / "one").resolve()
    assert local_settings().kafka_port == 1234
    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path / "two"))
    assert local_settings().home == (tmp_path / "two").resolve()


def test_bad_port() -> None:
    with pytest.raises(ValueError):
        local_settings({"LOGSTORE_KAFKA_PORT": "kafka"})


def test_extra_kafka_config() -> None:
    assert extra_kafka_config({}) == {}
    assert extra_kafka_config({"LOGSTORE_KAFKA_CONFIG": ""}) == {}
    raw = '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "retries": 3}'
    assert extra_kafka_config({"LOGSTORE_KAFKA_CONFIG": raw}) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "retries": 3,
    }


def test_extra_kafka_config_from_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSTORE_KAFKA_CONFIG", '{"acks": "all"}')
    assert extra_kafka_config() == {"acks": "all"}
    monkeypatch.delenv("LOGSTORE_KAFKA_CONFIG")
    assert extra_kafka_config() == {}


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "3", "null"])
def test_extra_kafka_config_must_be_an_object(raw: str) -> None:
    with pytest.raises(ValueError, match="LOGSTORE_KAFKA_CONFIG must be a JSON object"):
        extra_kafka_config({"LOGSTORE_KAFKA_CONFIG": raw})


def test_extra_kafka_config_bad_json() -> None:
    with pytest.raises(ValueError):
        extra_kafka_config({"LOGSTORE_KAFKA_CONFIG": "{not json"})
