"""The JVM jars LogStore runs with, downloaded once from Maven Central into ``LOGSTORE_CACHE``.

Every jar set is pinned in :mod:`airflow_logstore.versions`; this module fetches them with ``mvn``
(once per set and cache; later calls are instant) and finds them again. It sits below both Spark
(:mod:`airflow_logstore.spark.session`) and the local services (the Kafka broker, the REST catalog),
and imports neither.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from airflow_logstore import versions
from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings, local_settings

log = logging.getLogger(__name__)

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>airflow-logstore.local</groupId><artifactId>{name}</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def _dependency_xml(coordinate: str) -> str:
    """A ``<dependency>`` of ``group:artifact:version`` or ``group:artifact:version:classifier``."""
    parts = coordinate.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise ValueError(f"not a Maven coordinate (group:artifact:version[:classifier]): {coordinate!r}")
    group, artifact, version = parts[:3]
    classifier = f"<classifier>{parts[3]}</classifier>" if len(parts) == 4 else ""
    return (
        f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version>{classifier}</dependency>"
    )


def fetch_jars(
    name: str, coordinates: Sequence[str], *, transitive: bool, settings: LocalSettings | None = None
) -> Path:
    """Download ``coordinates`` (and their dependencies when ``transitive``) into the cache, once."""
    settings = settings or local_settings()
    target = _jars_folder(name, coordinates, transitive, settings)
    marker = target / ".complete"
    if marker.exists():
        return target
    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    # one download at a time per cache (parallel test workers, a demo next to a test run)
    with open(settings.jars_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return target
        return _download(name, coordinates, transitive, settings, target, marker)


def _download(
    name: str,
    coordinates: Sequence[str],
    transitive: bool,
    settings: LocalSettings,
    target: Path,
    marker: Path,
) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError("Maven ('mvn') is needed once to download the Kafka and Iceberg jars; install it")
    work = settings.cache / "poms" / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(
        _POM.format(name=name, dependencies="\n".join(_dependency_xml(c) for c in coordinates))
    )
    staging = target.with_name(target.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)
    command = [
        mvn,
        "-q",
        "-B",
        f"-Dmaven.repo.local={settings.maven_repo}",
        "-f",
        str(work / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
        f"-DexcludeTransitive={'false' if transitive else 'true'}",
    ]
    log.info("downloading %s jars with Maven (once): %s", name, ", ".join(coordinates))
    print(f"[logstore] downloading {name} jars with Maven into {settings.jars_dir} (once)", file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise ServiceError(f"Maven could not download the {name} jars:\n{tail}")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    marker.write_text("\n".join(coordinates))
    return target


def kafka_jars(settings: LocalSettings | None = None) -> Path:
    return fetch_jars("kafka-broker", versions.KAFKA_BROKER_ARTIFACTS, transitive=True, settings=settings)


def flink_kafka_jars(settings: LocalSettings | None = None) -> list[Path]:
    """Flink's Kafka SQL connector (the tests' third-party consumer), downloaded once."""
    folder = fetch_jars("flink-kafka", versions.FLINK_KAFKA_ARTIFACTS, transitive=False, settings=settings)
    return sorted(folder.glob("*.jar"))


def _jars_folder(name: str, coordinates: Sequence[str], transitive: bool, settings: LocalSettings) -> Path:
    fingerprint = hashlib.sha256(json.dumps([list(coordinates), transitive]).encode()).hexdigest()[:16]
    return settings.jars_dir / f"{name}-{fingerprint}"


def jar_setting(configured: str) -> str:
    """``LOGSTORE_SPARK_JARS`` as comma-separated jars: a folder's jars, else the value as it is."""
    folder = Path(configured)
    if configured and folder.is_dir():
        return ",".join(str(j) for j in sorted(folder.glob("*.jar")))
    return configured


def configured_spark_jars(environ: Mapping[str, str] | None = None) -> list[str]:
    """The Spark jars this machine has without downloading: ``LOGSTORE_SPARK_JARS``, else the cache."""
    environ = os.environ if environ is None else environ
    configured = environ.get("LOGSTORE_SPARK_JARS")
    if configured is not None:
        return [jar for jar in jar_setting(configured).split(",") if jar]
    return [str(jar) for jar in cached_spark_jars()]


def cached_spark_jars(settings: LocalSettings | None = None) -> list[Path]:
    """The Spark jars already in the local cache (empty when not downloaded yet); never downloads."""
    settings = settings or local_settings()
    folder = _jars_folder("spark-extra", versions.SPARK_EXTRA_ARTIFACTS, False, settings)
    return sorted(folder.glob("*.jar")) if (folder / ".complete").exists() else []


def spark_jars(settings: LocalSettings | None = None) -> list[Path]:
    """The extra jars Spark needs (Iceberg runtime, Kafka source, JDBC driver), downloaded once."""
    folder = fetch_jars("spark-extra", versions.SPARK_EXTRA_ARTIFACTS, transitive=False, settings=settings)
    return sorted(folder.glob("*.jar"))


def cluster_spark_jars(settings: LocalSettings) -> list[Path]:
    """The embedded default's Spark jars plus the object store's (S3FileIO and Hadoop S3A)."""
    extra = fetch_jars("spark-cluster", versions.CLUSTER_EXTRA_ARTIFACTS, transitive=False, settings=settings)
    return [*spark_jars(settings), *sorted(extra.glob("*.jar"))]
