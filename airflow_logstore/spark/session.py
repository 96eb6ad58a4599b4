"""One function that builds a SparkSession configured for LogStore tables.

Under ``spark-submit`` (the Airflow path) the submit command already carries jars and catalog
settings, so the job just attaches to that session. Elsewhere (tests, the CLI, notebooks) the session
is built here: master ``local[2]`` unless ``LOGSTORE_SPARK_MASTER`` says otherwise, the jars from the
local cache, the catalog from :func:`airflow_logstore.table.catalog.default_catalog`.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_logstore.exceptions import InstallationError
from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import SECRET_KEY_REGEX, CatalogSpec, default_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def base_conf() -> dict[str, str]:
    """Settings every LogStore Spark application needs, wherever it runs.

    ``spark.redaction.regex`` is :data:`airflow_logstore.table.catalog.SECRET_KEY_REGEX`, the project's one
    definition of a secret setting, so every secret the jobs carry (catalog credential, S3 keys, Kafka SASL
    password: see :mod:`airflow_logstore.spark.jobconf`) is redacted in the Spark UI, its REST API, the event
    log and Spark's logs; Spark's default misses ``credential`` and ``access-key-id``. Spark redacts a
    property when the pattern matches its key or its value. SQL options (a data source's, in plans and
    in the SQL tab) are redacted by the same pattern plus ``spark.sql.redaction.options.regex``.

    ``spark.python.sql.dataFrameDebugging.enabled`` is off: PySpark 4 otherwise wraps every DataFrame and
    column call to send its Python call site to the JVM (five more Py4J round trips each, for error
    messages that would point into this package's code, not a user's). A streaming micro-batch's dual
    write makes about 90 such calls: 0.77 s instead of 0.87 s a micro-batch (medians of 20 each,
    alternated in one process: ``bench/dataframe_debugging_bench.py``, BENCHMARKS.md). Sessions of
    users' own (``register``) are not touched.
    """
    return {
        "spark.redaction.regex": SECRET_KEY_REGEX,
        "spark.sql.redaction.options.regex": f"(?i)url|{SECRET_KEY_REGEX.removeprefix('(?i)')}",
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.speculation": "false",
        "spark.sql.iceberg.merge-schema": "false",
        "spark.python.worker.reuse": "true",
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }


def local_conf() -> dict[str, str]:
    """Extra settings for a small local session (tests, the demo)."""
    return {
        "spark.pyspark.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.driver.memory": "2g",
        "spark.sql.adaptive.enabled": "true",
        "spark.task.maxFailures": "2",
    }


def session_conf(
    catalog: CatalogSpec, jars: Sequence[Path] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    conf = {**base_conf(), **catalog.spark_conf()}
    if jars:
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    conf.update(extra or {})
    return conf


#: Where the JVM of a session this process builds writes its output (None: this process's stderr).
_jvm_output: Path | None = None


def send_spark_output_to(path: Path | None) -> None:
    """The JVM of the next session this process builds writes its output (Spark's log, its start-up
    warnings about the loopback hostname and the native Hadoop library, the JVM's own) to ``path``.

    For the ``logstore`` command, whose failures and progress are its own messages on stderr
    (``--debug`` keeps Spark's output there). None: back to this process's stderr.
    """
    global _jvm_output
    _jvm_output = path


@contextmanager
def _jvm_stderr() -> Iterator[None]:
    """The JVM started meanwhile inherits :data:`_jvm_output` as its stderr; ours is restored after,
    and the next session's JVM writes to stderr again unless :func:`send_spark_output_to` says otherwise."""
    global _jvm_output
    output, _jvm_output = _jvm_output, None
    if output is None:
        yield
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with output.open("ab") as out:
            os.dup2(out.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def under_spark_submit() -> bool:
    """True inside a Python application launched by spark-submit."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def check_pyspark_release(version: Callable[[str], str] | None = None) -> None:
    """Fail, naming the versions to align, when pyspark and pyspark-client come from two releases.

    The Spark provider requires pyspark-client, which installs its own copy of pyspark's Python files
    over pyspark's: of two releases (a plain ``pip install`` resolves each to its newest, e.g. pyspark
    4.1.4 with pyspark-client 4.1.3, and ``pip check`` is content), Spark's Python and its jars differ.
    Checked where a Spark job or session is built, not when the provider is imported.

    :param version: the installed version of a distribution (default: :func:`importlib.metadata.version`)
    :raises InstallationError: the two are installed at different versions
    """
    version = version or importlib.metadata.version
    try:
        client = version("pyspark-client")
    except importlib.metadata.PackageNotFoundError:
        return  # pyspark alone: its files are its own
    try:
        spark = version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        raise InstallationError(
            f"pyspark-client {client} is installed without pyspark: LogStore's Spark jobs need pyspark "
            f'(its jars); install it at the same version: pip install "pyspark=={client}"'
        ) from None
    if spark != client:
        both = min(spark, client, key=_release)
        raise InstallationError(
            f"pyspark {spark} and pyspark-client {client} are installed together: pyspark-client "
            "installs over pyspark's files, so Spark's Python and its jars come from two releases; "
            f'install both at one version: pip install "pyspark=={both}" "pyspark-client=={both}"'
        )


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in text.split("."))


def build_spark_session(
    app_name: str = "airflow-logstore",
    *,
    catalog: CatalogSpec | None = None,
    master: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Iceberg runtime and the LogStore catalog."""
    check_pyspark_release()
    from pyspark.sql import SparkSession

    if under_spark_submit():
        from pyspark import SparkConf, SparkContext

        # What spark-submit was given (the operator's spark_conf, the connection's) wins over the defaults;
        # a SparkConf reads it only once the driver is attached to spark-submit's JVM.
        SparkContext._ensure_initialized()
        submitted = SparkConf()
        builder = SparkSession.builder.appName(app_name)
        for key, value in base_conf().items():
            if not submitted.contains(key):
                builder = builder.config(key, value)
        return builder.getOrCreate()

    from airflow_logstore.jars import spark_jars
    from airflow_logstore.spark.driver_archive import with_driver_archive

    settings = local_settings()
    # Python workers must run the interpreter that has airflow_logstore (PySpark reads the env var).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    catalog = catalog or default_catalog()
    conf = {**local_conf(), **session_conf(catalog, spark_jars(settings), extra_conf)}
    conf = with_driver_archive(conf, settings)
    builder = SparkSession.builder.appName(app_name).master(master or settings.spark_master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _jvm_stderr():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
