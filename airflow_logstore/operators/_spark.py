"""How LogStore operators submit their PySpark jobs through the Airflow Spark provider.

The command is a list built by ``SparkSubmitHook``; catalog and Kafka settings (secrets included) go
into a private ``--properties-file`` that is deleted after the job, never onto the command line.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_logstore.catalog import CatalogSpec
from airflow_logstore.spark.apps import application_path
from airflow_logstore.spark.executors import package_zip
from airflow_logstore.spark.jobconf import job_properties
from airflow_logstore.spark.jobs import parse_result
from airflow_logstore.spark.session import base_conf


def job_path(script: str) -> str:
    """Path of a PySpark application (``dual_write.py``, ...) inside the installed package
    (``airflow_logstore/spark/apps/``), so a wheel install submits a file that exists."""
    return str(application_path(script))


def default_jars() -> str:
    """``LOGSTORE_SPARK_JARS`` when set (empty: the jars are in the Spark image), else the Iceberg, Kafka
    and JDBC jars from the local cache (downloaded with Maven on first use)."""
    configured = os.environ.get("LOGSTORE_SPARK_JARS")
    if configured is not None:
        folder = Path(configured)
        if configured and folder.is_dir():
            return ",".join(str(j) for j in sorted(folder.glob("*.jar")))
        return configured
    from airflow_logstore.services.local import spark_jars

    return ",".join(str(j) for j in spark_jars())


class CapturingSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that also keeps the job's result line (``LOGSTORE_RESULT {...}``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.captured: list[str] = []

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def tee() -> Iterator[Any]:
            for line in itr:
                self.captured.append(line if isinstance(line, str) else line.decode("utf-8", "replace"))
                yield line

        super()._process_spark_submit_log(tee())

    def result(self) -> dict[str, Any] | None:
        return parse_result("\n".join(self.captured))


def _ensure_spark_submit_on_path() -> None:
    """Use the spark-submit that pyspark installs next to this interpreter when none is on PATH."""
    if shutil.which("spark-submit") is None:
        bundled = Path(sys.executable).parent / "spark-submit"
        if bundled.exists():
            os.environ["PATH"] = f"{bundled.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def write_properties_file(properties: Mapping[str, str]) -> str:
    """A 0600 temporary Spark properties file (the caller deletes it)."""
    fd, path = tempfile.mkstemp(prefix="logstore-", suffix=".properties")
    with os.fdopen(fd, "w") as out:
        for key, value in properties.items():
            escaped = str(value).replace("\\", "\\\\").replace("\n", "\\n")
            out.write(f"{key}={escaped}\n")
    os.chmod(path, 0o600)
    return path


@contextmanager
def spark_submit_hook(
    *,
    catalog: CatalogSpec,
    kafka_extra: Mapping[str, Any],
    conn_id: str,
    name: str,
    application_args: Sequence[str],
    jars: str | None,
    python: str | None,
    conf: Mapping[str, Any] | None = None,
) -> Iterator[CapturingSparkSubmitHook]:
    """A configured hook whose secrets live in a properties file for the duration of the block."""
    _ensure_spark_submit_on_path()
    properties = job_properties(catalog, kafka_extra)
    properties_file = write_properties_file(properties)
    python = python or sys.executable
    submit_conf = {
        **base_conf(),
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        **dict(conf or {}),
    }
    try:
        hook = CapturingSparkSubmitHook(
            conf=submit_conf,
            conn_id=conn_id,
            jars=default_jars() if jars is None else (jars or None),
            name=name,
            application_args=list(application_args),
            properties_file=properties_file,
            py_files=str(package_zip()),  # executors get the installed package's code with the job
            env_vars={"PYSPARK_PYTHON": python},
        )
        yield hook
    finally:
        Path(properties_file).unlink(missing_ok=True)
