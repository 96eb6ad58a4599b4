"""Local settings read from the environment (never at import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_logstore.settings import (
    extra_kafka_config,
    find_checkout,
    kafka_timeout_s,
    local_settings,
    sqlite_busy_timeout_s,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_defaults_live_in_the_home_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = local_settings({}, cwd=tmp_path)
    home = tmp_path.resolve()
    assert settings.home == home / ".logstore"
    assert settings.cache == home / ".cache" / "airflow-logstore"
    assert settings.kafka_port == 19092
    assert settings.spark_master == "local[2]"
    assert settings.kafka_bootstrap == "127.0.0.1:19092"
    assert settings.home_source == "default"


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
    assert settings.home_source == "LOGSTORE_HOME"


def test_empty_values_fall_back_to_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = local_settings(
        {"LOGSTORE_HOME": "", "LOGSTORE_CACHE": "", "LOGSTORE_KAFKA_PORT": "", "LOGSTORE_SPARK_MASTER": ""},
        cwd=tmp_path,
    )
    assert settings == local_settings({}, cwd=tmp_path)


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


@pytest.mark.parametrize("raw", ["kafka", "0", "65535", "-5", "1.5"])
def test_bad_port(raw: str) -> None:
    with pytest.raises(ValueError, match="LOGSTORE_KAFKA_PORT must be a port number"):
        local_settings({"LOGSTORE_KAFKA_PORT": raw})


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


# -- one state location: ./dev, the installed CLI, Airflow tasks and Spark jobs resolve it alike --------


def make_checkout(root: Path, name: str = "airflow-logstore", marker: str = "dev") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "1"\n')
    if marker == "dev":
        (root / "dev").write_text("#!/usr/bin/env bash\n")
    elif marker == ".logstore":
        (root / ".logstore").mkdir()
    return root


def test_inside_a_checkout_state_is_the_checkouts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    checkout = make_checkout(tmp_path / "clone")
    deep = checkout / "dags" / "sub"
    deep.mkdir(parents=True)
    for where in (checkout, deep):
        settings = local_settings({}, cwd=where)
        assert settings.home == checkout.resolve() / ".logstore"
        assert settings.cache == checkout.resolve() / ".cache"
        assert settings.home_source == f"checkout {checkout}"
        assert settings.catalog_db == checkout.resolve() / ".logstore" / "catalog" / "catalog.db"


def test_process_working_directory_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path / "clone")
    monkeypatch.chdir(checkout)
    assert local_settings({}).home == checkout.resolve() / ".logstore"


def test_environment_wins_over_the_checkout(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path / "clone")
    settings = local_settings({"LOGSTORE_HOME": str(tmp_path / "elsewhere")}, cwd=checkout)
    assert settings.home == (tmp_path / "elsewhere").resolve()
    assert settings.home_source == "LOGSTORE_HOME"
    assert settings.cache == checkout.resolve() / ".cache"  # each variable decides only its own folder
    settings = local_settings({"LOGSTORE_CACHE": str(tmp_path / "jars")}, cwd=checkout)
    assert settings.home == checkout.resolve() / ".logstore"
    assert settings.cache == (tmp_path / "jars").resolve()


def test_relative_environment_paths_are_relative_to_the_working_directory(tmp_path: Path) -> None:
    settings = local_settings({"LOGSTORE_HOME": "state"}, cwd=tmp_path)
    assert settings.home == tmp_path.resolve() / "state"


def test_a_state_folder_marks_a_checkout_without_the_dev_script(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path / "clone", marker=".logstore")
    assert find_checkout(checkout) == checkout
    assert local_settings({}, cwd=checkout).home == checkout.resolve() / ".logstore"


@pytest.mark.parametrize("name", ["Airflow_LogStore", "airflow.logstore", "AIRFLOW-LOGSTORE"])
def test_project_name_is_compared_normalized(tmp_path: Path, name: str) -> None:
    checkout = make_checkout(tmp_path / "clone", name=name)
    assert find_checkout(checkout) == checkout


def test_not_a_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    other = make_checkout(tmp_path / "other", name="other-project")
    sdist = make_checkout(tmp_path / "sdist", marker="none")  # unpacked source: no dev, no .logstore
    broken = make_checkout(tmp_path / "broken")
    (broken / "pyproject.toml").write_text("[project\nname = ")
    folder = tmp_path / "folder"
    (folder / "pyproject.toml").mkdir(parents=True)
    (folder / "dev").write_text("")
    for where in (other, sdist, broken, folder, tmp_path):
        assert find_checkout(where) is None, where
        settings = local_settings({}, cwd=where)
        assert settings.home == (tmp_path / "user").resolve() / ".logstore"
        assert settings.cache == (tmp_path / "user").resolve() / ".cache" / "airflow-logstore"
        assert settings.home_source == "default"


def test_nearest_checkout_wins_and_other_projects_inside_it_are_skipped(tmp_path: Path) -> None:
    outer = make_checkout(tmp_path / "outer")
    inner = make_checkout(outer / "worktrees" / "inner")
    foreign = make_checkout(outer / "vendor" / "lib", name="some-lib")
    assert find_checkout(inner / "dags") == inner
    assert find_checkout(foreign) == outer


def test_this_repository_resolves_to_its_own_state_folder() -> None:
    """What ./dev used to export by hand: <checkout>/.logstore and <checkout>/.cache."""
    settings = local_settings({}, cwd=REPO_ROOT / "tests" / "unit")
    assert settings.home == REPO_ROOT / ".logstore"
    assert settings.cache == REPO_ROOT / ".cache"


def test_describe_home_names_the_folder_and_why(tmp_path: Path) -> None:
    settings = local_settings({"LOGSTORE_HOME": str(tmp_path)}, cwd=tmp_path)
    assert settings.describe_home() == f"{tmp_path.resolve()} (from LOGSTORE_HOME)"


def test_kafka_timeout() -> None:
    assert kafka_timeout_s({}) == 30.0
    assert kafka_timeout_s({"LOGSTORE_KAFKA_TIMEOUT_S": "2.5"}) == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError, match="LOGSTORE_KAFKA_TIMEOUT_S"):
            kafka_timeout_s({"LOGSTORE_KAFKA_TIMEOUT_S": bad})


def test_sqlite_busy_timeout() -> None:
    assert sqlite_busy_timeout_s({}) == 30.0
    assert sqlite_busy_timeout_s({"LOGSTORE_SQLITE_BUSY_TIMEOUT_S": "5"}) == 5.0
    with pytest.raises(ValueError, match="LOGSTORE_SQLITE_BUSY_TIMEOUT_S must be a positive number"):
        sqlite_busy_timeout_s({"LOGSTORE_SQLITE_BUSY_TIMEOUT_S": "never"})


def test_kafka_requests_wait_the_configured_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_logstore.log.kafka_client import request_timeout

    monkeypatch.delenv("LOGSTORE_KAFKA_TIMEOUT_S", raising=False)
    assert request_timeout(None) == 30.0
    monkeypatch.setenv("LOGSTORE_KAFKA_TIMEOUT_S", "1.5")
    assert request_timeout(None) == 1.5
    assert request_timeout(7.0) == 7.0  # an explicit timeout wins
