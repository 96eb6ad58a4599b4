"""How LogStore operators submit their PySpark jobs through the Airflow Spark provider.

The command is a list built by ``SparkSubmitHook``; catalog and Kafka settings (secrets included) go
into a private ``--properties-file`` that is deleted after the job, never onto the command line.
Nothing here assumes the driver or the executors run on this machine: their Python and jars come
from the configuration (:func:`python_conf`, :func:`resolve_jars`), and a job's result comes back
through a file next to the table (:func:`job_result`), not through the driver's output.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowNotFoundException
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_logstore.exceptions import JobFailedError, OptionError
from airflow_logstore.spark.driver_archive import with_driver_archive
from airflow_logstore.spark.executors import package_zip
from airflow_logstore.spark.jobconf import job_properties, split_secret_conf, submit_environment
from airflow_logstore.spark.session import base_conf, check_pyspark_release
from airflow_logstore.spark_apps import application_path
from airflow_logstore.table.catalog import CatalogSpec
from airflow_logstore.tempdirs import private_folder, process_file, remove_orphans

if TYPE_CHECKING:
    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)


def job_path(script: str) -> str:
    """Path of a PySpark application (``dual_write_app.py``, ...) inside the installed package
    (``airflow_logstore/spark_apps/``), so a wheel install submits a file that exists."""
    return str(application_path(script))


#: The Spark connection's extra key for Spark properties every job of that connection gets
#: (e.g. ``{"spark-conf": {"spark.pyspark.python": "/opt/venv/bin/python", "spark.jars": "..."}}``).
CONN_CONF_KEY = "spark-conf"
EXECUTOR_PYTHON = "spark.pyspark.python"
DRIVER_PYTHON = "spark.pyspark.driver.python"


@dataclass(frozen=True)
class SparkTarget:
    """Where a job runs, as the Spark connection says: master, deploy mode, and its Spark properties."""

    master: str
    deploy_mode: str | None = None
    conf: Mapping[str, Any] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.master.startswith("local")


def spark_target(conn_id: str) -> SparkTarget:
    """The master and deploy mode SparkSubmitHook resolves for ``conn_id``, and its ``spark-conf`` extra."""
    resolved = SparkSubmitHook(conn_id=conn_id)._connection
    try:
        extra = SparkSubmitHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        extra = {}
    conf = extra.get(CONN_CONF_KEY) or {}
    if not isinstance(conf, Mapping):
        raise OptionError(CONN_CONF_KEY, f"the extra of Spark connection '{conn_id}' must be an object")
    return SparkTarget(str(resolved["master"]), resolved.get("deploy_mode"), dict(conf))


def python_conf(
    target: SparkTarget,
    conf: Mapping[str, Any],
    python: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """The interpreters of the executors and the driver.

    Executors: ``python``, else ``spark.pyspark.python`` (operator or connection conf), else
    ``PYSPARK_PYTHON``; this process's interpreter only for a local master (elsewhere Spark's own
    default applies). The driver: the same choice from ``spark.pyspark.driver.python`` /
    ``PYSPARK_DRIVER_PYTHON``, else this interpreter when it runs here (not in cluster deploy mode).
    """
    chosen: dict[str, str] = {}
    executors = python or conf.get(EXECUTOR_PYTHON) or environ.get("PYSPARK_PYTHON")
    if not executors and target.local:
        executors = sys.executable
    if executors:
        chosen[EXECUTOR_PYTHON] = str(executors)
    driver = python or conf.get(DRIVER_PYTHON) or environ.get("PYSPARK_DRIVER_PYTHON")
    if not driver and target.deploy_mode != "cluster":
        driver = sys.executable
    if driver:
        chosen[DRIVER_PYTHON] = str(driver)
    return chosen


def resolve_jars(
    jars: str | None, conf: Mapping[str, Any], environ: Mapping[str, str] = os.environ
) -> str | None:
    """The ``--jars`` of a job (None: no ``--jars``); never downloads anything.

    ``jars`` when given ("": none, they are in the Spark image), else ``LOGSTORE_SPARK_JARS`` (a folder
    or a comma-separated list; empty: the Spark image), else none when ``spark.jars`` or
    ``spark.jars.packages`` is configured, else the local cache that ``./dev services up`` and
    ``./dev demo`` fill; else an error naming these settings.
    """
    if jars is not None:
        return jars or None
    configured = environ.get("LOGSTORE_SPARK_JARS")
    if configured is not None:
        from airflow_logstore.jars import jar_setting

        return jar_setting(configured) or None
    if conf.get("spark.jars") or conf.get("spark.jars.packages"):
        return None
    from airflow_logstore.jars import cached_spark_jars

    cached = cached_spark_jars()
    if cached:
        return ",".join(str(j) for j in cached)
    raise OptionError(
        "jars",
        "no Spark jars configured (Iceberg runtime, Kafka source, catalog driver): set LOGSTORE_SPARK_JARS "
        "(a folder or comma-separated jars; empty when the Spark image has them), or spark.jars / "
        f"spark.jars.packages in the operator's spark_conf or the Spark connection's '{CONN_CONF_KEY}' "
        "extra; a task never downloads them (in a checkout, `./dev services up` fills the local cache)",
    )


def _ensure_spark_submit_on_path() -> None:
    """Use the spark-submit that pyspark installs next to this interpreter when none is on PATH."""
    if shutil.which("spark-submit") is None:
        bundled = Path(sys.executable).parent / "spark-submit"
        if bundled.exists():
            os.environ["PATH"] = f"{bundled.parent}{os.pathsep}{os.environ.get('PATH', '')}"


#: the folder of the properties files in the temporary directory (one per OS user, see tempdirs)
PROPERTIES_FOLDER = "logstore-submit"


def write_properties_file(properties: Mapping[str, str], folder: Path | None = None) -> str:
    """A 0600 Spark properties file in the user's own folder (the caller deletes it).

    The files that killed tasks left there (holding their secrets) are removed first."""
    folder = folder or private_folder(PROPERTIES_FOLDER)
    for orphan in remove_orphans(folder, ".properties"):
        log.info("removed %s, left by a task that was killed", orphan)
    fd, path = process_file(folder, ".properties")
    with os.fdopen(fd, "w") as out:
        for key, value in properties.items():
            escaped = str(value).replace("\\", "\\\\").replace("\n", "\\n")
            out.write(f"{key}={escaped}\n")
    return path


def submit_conf(target: SparkTarget, conf: Mapping[str, Any] | None, python: str | None) -> dict[str, Any]:
    """The job's ``--conf``: LogStore's base settings, the connection's, the operator's, the interpreters,
    and, for a driver that runs here (not ``--deploy-mode cluster``), the drivers' class archive."""
    merged = {**base_conf(), **dict(target.conf), **dict(conf or {})}
    merged = {**merged, **python_conf(target, merged, python)}
    return merged if target.deploy_mode == "cluster" else with_driver_archive(merged)


class ScrubbedSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook whose spark-submit (and so the driver, its Python workers and, in local mode,
    the executors) does not inherit the task's secrets (see
    :func:`airflow_logstore.spark.jobconf.submit_environment`)."""

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        env = submit_environment(kwargs.pop("env", None) or os.environ)
        if self._env:  # env_vars: the hook would start again from the whole os.environ
            env.update({str(k): str(v) for k, v in self._env.items()})
            self._env = None
        return super().submit(application, env=env, **kwargs)


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
) -> Iterator[SparkSubmitHook]:
    """A configured hook whose secrets live in a properties file for the duration of the block (the
    catalog's and Kafka's, and any secret-named Spark setting), with no secret in spark-submit's
    command line or environment."""
    check_pyspark_release()
    _ensure_spark_submit_on_path()
    target = spark_target(conn_id)
    settings = submit_conf(target, conf, python)
    jar_list = resolve_jars(jars, settings)  # before the properties file: a bad setting leaves nothing
    public, secret = split_secret_conf(settings)  # secret settings never reach a command line
    properties_file = write_properties_file({**secret, **job_properties(catalog, kafka_extra)})
    try:
        yield ScrubbedSparkSubmitHook(
            conf=public,
            conn_id=conn_id,
            jars=jar_list,
            name=name,
            application_args=list(application_args),
            properties_file=properties_file,
            py_files=str(package_zip()),  # executors get the installed package's code with the job
        )
    finally:
        Path(properties_file).unlink(missing_ok=True)


def job_result(handle: LogStoreTable, report_id: str, what: str) -> dict[str, Any]:
    """The result the job submitted with ``report_id`` wrote next to the table (then removed).

    Called after spark-submit succeeded: a missing result is an error naming where it was expected.
    """
    from airflow_logstore.core.failures import result_path
    from airflow_logstore.table.reports import delete_result, read_result

    table = handle.load()
    result = read_result(table, report_id)
    if result is None:
        raise JobFailedError(
            "JobResultMissing",
            f"{what}: spark-submit succeeded but the job left no result at "
            f"{result_path(table.location(), report_id)} (did it run this version of airflow-logstore?)",
            retryable=True,
        )
    delete_result(table, report_id)
    return dict(result)
