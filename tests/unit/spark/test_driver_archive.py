"""The Spark drivers' class archive (``airflow_logstore/spark/driver_archive.py``): which drivers get it,
how it joins their Java options, and that a failed build leaves nothing a JVM could map. The JVM mapping
it is proven in ``tests/integration/test_jvm_scan.py``."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from airflow_logstore.operators._spark import SparkTarget, submit_conf
from airflow_logstore.settings import LocalSettings, local_settings
from airflow_logstore.spark import driver_archive
from airflow_logstore.spark.driver_archive import JAVA_OPTIONS_KEY, QUIET

REAL = driver_archive.driver_archive  # (tests/unit/conftest.py hides the machine's archive from the others)


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LocalSettings:
    """A jars cache of its own; any file stands for the JVM, fixed jars for Spark's."""
    monkeypatch.setattr(driver_archive, "driver_archive", REAL)
    monkeypatch.setattr(driver_archive, "java_binary", lambda: sys.executable)
    monkeypatch.setattr(driver_archive, "_spark_jars", lambda: "spark-core.jar:1:2")
    chosen = dataclasses.replace(local_settings(), cache=tmp_path)
    monkeypatch.setattr(driver_archive, "local_settings", lambda: chosen)
    return chosen


def _built(settings: LocalSettings) -> Path:
    archive = driver_archive.driver_archive(settings)
    assert archive is not None and archive.staging is not None
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    archive.path.write_bytes(b"archive")
    return archive.path


def test_a_driver_gets_no_archive_before_one_is_built(settings: LocalSettings) -> None:
    conf = {"spark.app.name": "x"}
    assert driver_archive.with_driver_archive(conf, settings) == conf


def test_the_archive_follows_the_java_options_a_driver_already_has(settings: LocalSettings) -> None:
    path = _built(settings)
    archived = f"{QUIET} -XX:SharedArchiveFile={path}"
    assert driver_archive.with_driver_archive({}, settings) == {JAVA_OPTIONS_KEY: archived}
    given = {JAVA_OPTIONS_KEY: "-Dmine=1 ", "other": 2}
    assert driver_archive.with_driver_archive(given, settings) == {
        JAVA_OPTIONS_KEY: f"-Dmine=1 {archived}",
        "other": 2,
    }


def test_a_driver_whose_options_choose_class_sharing_keeps_them(settings: LocalSettings) -> None:
    _built(settings)
    for own in ("-XX:SharedArchiveFile=/mine.jsa", "-Xshare:off", "-XX:ArchiveClassesAtExit=/new.jsa"):
        assert driver_archive.with_driver_archive({JAVA_OPTIONS_KEY: own}, settings) == {
            JAVA_OPTIONS_KEY: own
        }


def test_another_jvm_or_spark_has_its_own_archive(
    settings: LocalSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _built(settings)
    monkeypatch.setattr(driver_archive, "_spark_jars", lambda: "spark-core.jar:1:3")  # a reinstalled jar
    other = driver_archive.driver_archive(settings)
    assert other is not None and other.path != path and other.staging is not None
    assert driver_archive.with_driver_archive({}, settings) == {}


def test_jobs_submitted_here_get_it_and_a_driver_in_the_cluster_does_not(settings: LocalSettings) -> None:
    path = _built(settings)
    for target in (SparkTarget("local[2]"), SparkTarget("spark://master:7077", "client")):
        assert f"-XX:SharedArchiveFile={path}" in submit_conf(target, {}, None)[JAVA_OPTIONS_KEY]
    cluster = submit_conf(SparkTarget("spark://master:7077", "cluster"), {JAVA_OPTIONS_KEY: "-Dx=1"}, None)
    assert cluster[JAVA_OPTIONS_KEY] == "-Dx=1"


def test_a_build_whose_driver_failed_leaves_no_archive(
    settings: LocalSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(command: list[str], **kwargs: object) -> int:
        Path(command[-1]).write_bytes(b"half an archive")  # what a JVM killed while dumping leaves
        return 1

    monkeypatch.setattr(driver_archive.subprocess, "call", fails)
    assert driver_archive.build_driver_archive(settings) is None
    archive = driver_archive.driver_archive(settings)
    assert archive is not None and archive.staging is not None  # still to be built
    assert not list(settings.jars_dir.glob("*.jsa*"))
    assert driver_archive.with_driver_archive({}, settings) == {}


def test_a_build_puts_the_archive_in_place_once_its_driver_exited_cleanly(
    settings: LocalSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def dumps(command: list[str], **kwargs: object) -> int:
        calls.append(command)
        assert command[-2] == "--dump"
        Path(command[-1]).write_bytes(b"archive")
        return 0

    monkeypatch.setattr(driver_archive.subprocess, "call", dumps)
    path = driver_archive.build_driver_archive(settings)
    assert path is not None and path.read_bytes() == b"archive"
    assert driver_archive.build_driver_archive(settings) == path and len(calls) == 1  # built once
    assert [p.name for p in settings.jars_dir.glob("spark-driver*")] == [path.name]  # no log, no staging
