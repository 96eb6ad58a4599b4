"""The Spark drivers' class archive's own driver (:mod:`airflow_logstore.spark.driver_archive`).

``python -m airflow_logstore.spark.archive_driver`` builds the archive if there is none and prints its path;
``--dump STAGING`` is the driver the build runs.
"""

from __future__ import annotations

import sys

from airflow_logstore.spark import driver_archive
from airflow_logstore.spark.session import build_spark_session


def _dump(staging: str) -> None:
    """A short driver whose JVM writes the classes it loaded to ``staging`` as it exits: a session with
    the LogStore settings and jars (the start every job pays), and one query."""
    options = f"{driver_archive.QUIET} -XX:ArchiveClassesAtExit={staging}"
    spark = build_spark_session(
        "logstore-class-archive", master="local[1]", extra_conf={driver_archive.JAVA_OPTIONS_KEY: options}
    )
    spark.range(1000).selectExpr("sum(id)").collect()
    process = spark.sparkContext._gateway.proc  # type: ignore[union-attr]  # the driver's JVM
    spark.stop()
    # the JVM writes the archive as it exits: it exits when its input closes; wait for it, so that the
    # builder puts a whole archive in place
    process.stdin.close()
    if process.wait(driver_archive.BUILD_TIMEOUT_S) != 0:
        raise SystemExit(f"the driver's JVM exited with {process.returncode}")


def main(argv: list[str]) -> int:
    """Build the archive (print its path); ``--dump STAGING``: be the archive's own driver."""
    if argv[:1] == ["--dump"]:
        _dump(argv[1])
        return 0
    path = driver_archive.build_driver_archive()
    print(path if path else "no archive: see the log next to it in the jars cache", file=sys.stderr)
    return 0 if path else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
