"""Operators submit Spark jobs without assuming the driver or executors run here.

The executors' Python and the jars come from the configuration, never from this process or a Maven
download; a job's result comes back through a file next to the table (real SQLite catalog and
pyiceberg FileIO), never through the driver's output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_logstore.core.failures import result_path
from airflow_logstore.exceptions import JobFailedError, OptionError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators import _spark
from airflow_logstore.operators._spark import (
    SparkTarget,
    job_path,
    job_result,
    python_conf,
    resolve_jars,
    spark_submit_hook,
    spark_target,
)
from airflow_logstore.operators.compaction import LogStoreCompactionOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.settings import local_settings
from airflow_logstore.spark.results import emit_result
from airflow_logstore.table.reports import read_result, write_result
from airflow_logstore.table.tables import LogStoreTable
from logstore_dev.testing.environment import REPO_ROOT

#: an input file that exists (the dual write checks its input path before spark-submit)
AN_INPUT = str(REPO_ROOT / "dags" / "data" / "orders_batch_1.jsonl")

LOCAL = SparkTarget("local[2]")
STANDALONE = SparkTarget("spark://master:7077", "client")
CLUSTER = SparkTarget("spark://master:7077", "cluster")


# -- the executors' and the driver's Python ----------------------------------------------------------


def test_a_local_master_defaults_to_this_interpreter() -> None:
    assert python_conf(LOCAL, {}, environ={}) == {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }


def test_a_remote_master_never_gets_this_interpreter_for_its_executors() -> None:
    # client mode: the driver runs here (this interpreter); executors keep Spark's own default
    assert python_conf(STANDALONE, {}, environ={}) == {"spark.pyspark.driver.python": sys.executable}
    # cluster mode: the driver runs on the cluster too
    assert python_conf(CLUSTER, {}, environ={}) == {}


def test_the_executors_python_comes_from_conf_then_environment() -> None:
    conf = {"spark.pyspark.python": "/opt/spark-venv/bin/python"}
    assert python_conf(STANDALONE, conf, environ={"PYSPARK_PYTHON": "/other"}) == {
        "spark.pyspark.python": "/opt/spark-venv/bin/python",
        "spark.pyspark.driver.python": sys.executable,
    }
    chosen = python_conf(CLUSTER, {}, environ={"PYSPARK_PYTHON": "/usr/bin/python3"})
    assert chosen == {"spark.pyspark.python": "/usr/bin/python3"}
    driver = python_conf(CLUSTER, {"spark.pyspark.driver.python": "/d/python"}, environ={})
    assert driver == {"spark.pyspark.driver.python": "/d/python"}
    assert python_conf(CLUSTER, conf, python="/explicit", environ={}) == {
        "spark.pyspark.python": "/explicit",
        "spark.pyspark.driver.python": "/explicit",
    }


def _spark_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **extra: Any) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "spark", "host": "spark://master:7077", "extra": extra}),
    )


def test_the_connection_says_where_jobs_run_and_what_spark_settings_they_get(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _spark_connection(
        monkeypatch, "spark_cluster", **{"deploy-mode": "cluster", "spark-conf": {"spark.jars": "/j.jar"}}
    )
    assert spark_target("spark_cluster") == SparkTarget(
        "spark://master:7077", "cluster", {"spark.jars": "/j.jar"}
    )
    _spark_connection(monkeypatch, "spark_bad", **{"spark-conf": "spark.jars=/j.jar"})
    with pytest.raises(OptionError, match=r"spark-conf.*spark_bad"):
        spark_target("spark_bad")


def test_a_job_on_a_standalone_master_carries_no_path_of_this_machine_for_executors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    _spark_connection(
        monkeypatch,
        "spark_remote",
        **{"deploy-mode": "client", "spark-conf": {"spark.pyspark.python": "/opt/venv/bin/python"}},
    )
    with spark_submit_hook(
        catalog=LogStoreHook().catalog_spec(),
        kafka_extra={},
        conn_id="spark_remote",
        name="n",
        application_args=[],
        jars="",
        python=None,
        conf={"spark.executor.memory": "1g"},
    ) as hook:
        command = hook._build_spark_submit_command(job_path("dual_write_app.py"))
        assert hook._env_vars is None  # no PYSPARK_PYTHON of this machine in the job's environment
    assert "spark.pyspark.python=/opt/venv/bin/python" in command
    assert f"spark.pyspark.driver.python={sys.executable}" in command  # client mode: the driver is here
    assert "spark.executor.memory=1g" in command and "--jars" not in command


# -- jars: from the configuration, never downloaded by a task -----------------------------------------


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty jar cache, and a download that fails the test if anything calls it."""
    from airflow_logstore import jars

    def download(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a task must never run Maven")

    monkeypatch.setattr(jars, "_download", download)
    monkeypatch.setenv("LOGSTORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LOGSTORE_SPARK_JARS", raising=False)
    return tmp_path / "cache"


def test_jars_come_from_the_arguments_the_environment_or_spark_conf(
    no_download: Path, tmp_path: Path
) -> None:
    assert resolve_jars("/a.jar,/b.jar", {}) == "/a.jar,/b.jar"
    assert resolve_jars("", {}) is None  # in the Spark image
    folder = tmp_path / "jars"
    folder.mkdir()
    (folder / "b.jar").touch()
    (folder / "a.jar").touch()
    assert resolve_jars(None, {}, {"LOGSTORE_SPARK_JARS": str(folder)}) == f"{folder}/a.jar,{folder}/b.jar"
    assert resolve_jars(None, {}, {"LOGSTORE_SPARK_JARS": ""}) is None
    assert resolve_jars(None, {"spark.jars.packages": "org.apache.iceberg:x:1"}, {}) is None
    assert resolve_jars(None, {"spark.jars": "s3://jars/iceberg.jar"}, {}) is None


def test_without_jar_settings_a_task_uses_the_local_cache_or_names_the_setting(no_download: Path) -> None:
    with pytest.raises(OptionError) as error:
        resolve_jars(None, {}, {})
    assert "LOGSTORE_SPARK_JARS" in str(error.value) and "spark.jars" in str(error.value)
    assert "never downloads" in str(error.value)
    from airflow_logstore.jars import _jars_folder
    from airflow_logstore.versions import SPARK_EXTRA_ARTIFACTS

    cache = _jars_folder("spark-extra", SPARK_EXTRA_ARTIFACTS, False, local_settings())
    cache.mkdir(parents=True)
    (cache / "iceberg.jar").touch()
    with pytest.raises(OptionError):  # a download that did not complete is not a cache
        resolve_jars(None, {}, {})
    (cache / ".complete").touch()
    assert resolve_jars(None, {}, {}) == str(cache / "iceberg.jar")


# -- results: next to the table, read back through pyiceberg -----------------------------------------


def test_a_result_is_written_next_to_the_table_read_back_once_and_removed(handle: LogStoreTable) -> None:
    table = handle.load()
    path = write_result(table, "attempt/1", {"rows_in": 3})
    assert path == f"{table.location()}/logstore/results/attempt%2F1.json"
    assert job_result(handle, "attempt/1", "dual write") == {"rows_in": 3}
    assert read_result(table, "attempt/1") is None


def test_a_missing_result_after_a_successful_submit_names_where_it_was_expected(
    handle: LogStoreTable,
) -> None:
    with pytest.raises(JobFailedError) as error:
        job_result(handle, "r9", "compaction of db.orders")
    expected = result_path(handle.load().location(), "r9")
    assert str(error.value).startswith("JobResultMissing: compaction of db.orders: spark-submit succeeded")
    assert expected in str(error.value) and error.value.retryable


def test_a_job_prints_its_result_and_writes_it_under_the_report_id(
    handle: LogStoreTable, capsys: pytest.CaptureFixture[str]
) -> None:
    emit_result({"status": "done"}, handle, "r1")
    assert capsys.readouterr().out == 'LOGSTORE_RESULT {"status": "done"}\n'
    assert read_result(handle.load(), "r1") == {"status": "done"}
    emit_result({"status": "console only"})  # the CLI: no report id, nothing written
    with pytest.raises(ValueError, match="needs the table"):
        emit_result({}, None, "r2")


def _fake_job(monkeypatch: pytest.MonkeyPatch, result: dict[str, Any] | None) -> list[list[str]]:
    """A spark-submit that succeeds, prints nothing, and leaves ``result`` where a job would."""
    calls: list[list[str]] = []

    def submit(self: SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        args = list(self._application_args)
        calls.append(args)
        if result is not None:
            table = LogStoreHook().table(args[args.index("--table") + 1])
            emit_result(result, table, args[args.index("--report-id") + 1])

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    return calls


def test_the_dual_write_operator_reads_its_result_from_the_table(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_job(monkeypatch, {"rows_in": 4, "log_records": 4, "epoch": 2, "offsets": {"0": [0, 3]}})
    operator = LogStoreDualWriteOperator(
        task_id="w", table="db.orders", input_path="s3://in/b1", batch_id=1, writer_id="w", jars=""
    )
    value = operator.execute({})
    assert (value["rows_in"], value["log_records"], value["epoch"]) == (4, 4, 2)
    report_id = calls[0][calls[0].index("--report-id") + 1]
    assert read_result(handle.load(), report_id) is None  # read once, then removed


def test_operators_fail_naming_the_place_when_a_job_left_no_result(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_job(monkeypatch, None)
    location = handle.load().location()
    for operator in (
        LogStoreDualWriteOperator(task_id="w", table="db.orders", input_path=AN_INPUT, batch_id=1, jars=""),
        LogStoreReconcileOperator(task_id="r", table="db.orders", engine="spark", jars=""),
        LogStoreCompactionOperator(task_id="c", table="db.orders", jars=""),
    ):
        with pytest.raises(JobFailedError, match=f"left no result at {location}/logstore/results/"):
            operator.execute({})


def test_the_reconcile_and_compaction_operators_return_the_jobs_reports(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_job(monkeypatch, {"status": "done", "reversed": 2})
    reconcile = LogStoreReconcileOperator(task_id="r", table="db.orders", engine="spark", jars="")
    assert reconcile.execute({})["reversed"] == 2
    compaction = LogStoreCompactionOperator(task_id="c", table="db.orders", jars="")
    assert compaction.execute({})["status"] == "done"


def test_no_result_is_parsed_from_the_drivers_output() -> None:
    assert not hasattr(_spark, "CapturingSparkSubmitHook")
