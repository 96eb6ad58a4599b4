"""A class-data-sharing archive (AppCDS) for the Spark drivers this machine starts.

A Spark driver's JVM loads and checks some 10,000 classes before its first query: about a third of a
short job's JVM CPU time on this 2-core machine (a driver that starts, creates an Iceberg table and
writes rows: 34 s of JVM CPU without the archive, 23 s with it, under load;
``bench/driver_archive_bench.py``). With the archive, the JVM maps those classes from one file instead.

:func:`build_driver_archive` writes it once, with a short driver of its own (``python -m
airflow_logstore.spark.archive_driver``) whose JVM dumps the classes it loaded as it exits; the
archive is put in place only after that driver exited cleanly (a JVM given a truncated archive
crashes). It lives in the jars cache, named by a digest of the JVM and of Spark's jars: another JVM or
another Spark release gets its own. :func:`with_driver_archive` adds it to a driver's
``spark.driver.extraJavaOptions`` when it exists (never builds it: a driver never waits for one). A JVM
that cannot use it (its class path differs from the archive's, e.g. another ``SPARK_HOME``) runs as
without it; the options silence the JVM's warning about that.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_logstore.javac import ClassArchive, class_archive, java_binary
from airflow_logstore.settings import LocalSettings, local_settings

NAME = "spark-driver"
MODULE = "airflow_logstore.spark.archive_driver"  # the archive's own driver
JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
#: the JVM's own warnings about an archive it cannot use (or, while dumping, classes it skips)
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: how long the archive's own driver may take (a driver start, one query, the dump)
BUILD_TIMEOUT_S = 600


def _spark_jars() -> str:
    """What the archive depends on in Spark: its jars (the driver's class path) as the JVM checks them,
    by path, size and modification time (the JVM does not use an archive whose jars changed)."""
    from pyspark.find_spark_home import _find_spark_home

    stats = ((jar, jar.stat()) for jar in sorted((Path(_find_spark_home()) / "jars").glob("*.jar")))
    return "\n".join(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}" for jar, stat in stats)


def driver_archive(settings: LocalSettings | None = None) -> ClassArchive | None:
    """The archive for this machine's JVM and Spark (built or not), or None without a ``java``."""
    java = java_binary()
    if java is None:
        return None
    return class_archive(NAME, _spark_jars(), java, settings or local_settings())


def with_driver_archive(conf: Mapping[str, Any], settings: LocalSettings | None = None) -> dict[str, Any]:
    """``conf`` with the archive in the driver's Java options when it exists (after any the conf has),
    unless those options already choose class sharing (``-XX:SharedArchiveFile``, ``-Xshare``)."""
    given = str(conf.get(JAVA_OPTIONS_KEY) or "").strip()
    if "SharedArchiveFile" in given or "ArchiveClassesAtExit" in given or "-Xshare" in given:
        return dict(conf)
    archive = driver_archive(settings)
    if archive is None or archive.staging is not None:
        return dict(conf)
    options = f"{QUIET} -XX:SharedArchiveFile={archive.path}"
    return {**conf, JAVA_OPTIONS_KEY: f"{given} {options}".strip()}


def build_driver_archive(settings: LocalSettings | None = None) -> Path | None:
    """Write the archive if there is none (one builder at a time); its path, or None if it could not
    be built (no ``java``, or its driver failed: the reason is in ``<archive>.log``)."""
    settings = settings or local_settings()
    archive = driver_archive(settings)
    if archive is None:
        return None
    if archive.staging is None:
        return archive.path
    with open(settings.jars_dir / f".{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        archive = driver_archive(settings)
        if archive is None or archive.staging is None:
            return archive.path if archive else None
        log = archive.path.with_suffix(".log")
        command = [sys.executable, "-m", MODULE, "--dump", str(archive.staging)]
        with log.open("w") as out:
            try:
                code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = None
        if code != 0 or not archive.staging.exists():
            archive.discard()
            return None
        archive.keep()
        log.unlink()
        return archive.path
