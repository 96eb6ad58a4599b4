"""What the stages of ``./dev test`` download or build on first use, fetched ahead in the background.

On a clean machine the unit tests build Compose's loader (``tests/composecheck.py``, a Go build), the
integration tests' first broker and Spark session download the Kafka and Spark jars, and the cluster
tests the object store's jars and the REST catalog's (Maven). ``./dev test`` runs ``python -m
tests.prefetch`` while ruff and mypy (one core) run, so these downloads and builds overlap them instead of
holding up a stage. Each fetch takes its own file lock and marks what it finished: a stage that needs one
waits for it, and one that failed here is tried again there, with its error. It also builds the Spark
drivers' class archive (``airflow_logstore/spark/driver_archive.py``), which every Spark driver the tests
start then maps instead of loading its classes (about a third of a short job's JVM CPU); nothing waits
for it: a driver started before it exists runs without it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def _steps() -> list[tuple[str, Callable[[], object]]]:
    from airflow_logstore import versions
    from airflow_logstore.jars import cluster_spark_jars, fetch_jars, kafka_jars, spark_jars
    from airflow_logstore.settings import local_settings
    from airflow_logstore.spark.driver_archive import build_driver_archive
    from logstore_dev.services.rest_catalog import compile_launcher
    from tests import composecheck

    settings = local_settings()

    def rest_catalog() -> object:
        jars = fetch_jars("rest-catalog", versions.REST_CATALOG_ARTIFACTS, transitive=True, settings=settings)
        return compile_launcher(jars, settings)

    def driver_archive() -> object:
        path = build_driver_archive(settings)
        if path is None:
            raise RuntimeError("not built: its log is in the jars cache (spark-driver-*.log)")
        return path

    # in the order the stages need them
    return [
        ("Compose's loader (unit tests)", composecheck.binary),
        ("Kafka broker jars (integration tests)", lambda: kafka_jars(settings)),
        ("Spark jars (integration tests)", lambda: spark_jars(settings)),
        ("Spark drivers' class archive (integration tests)", driver_archive),
        ("object store jars (cluster tests)", lambda: cluster_spark_jars(settings)),
        ("REST catalog (cluster tests)", rest_catalog),
    ]


def main() -> int:
    failed = 0
    for what, step in _steps():
        started = time.monotonic()
        try:
            step()
        except Exception as exc:  # the stage that needs it tries again and reports it
            failed += 1
            print(f"[prefetch] {what}: failed ({exc})", file=sys.stderr)
            continue
        print(f"[prefetch] {what}: ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
