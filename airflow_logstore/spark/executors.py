"""What Spark executors need to run LogStore jobs: one list, for the Spark image and for ``spark-submit``.

Executors run the jobs' Arrow functions (the dual write's producers, the reads' decoding, reconciliation's
planning and reversals). They import LogStore's core, its Kafka client and pyiceberg, never Airflow.
Following Spark's Python package management:

- the project's own code travels with each job: :func:`package_zip` zips the *installed*
  ``airflow_logstore`` and the operators pass it as ``--py-files``, so workers need no LogStore install
  and always run the driver's version;
- the native dependencies (confluent-kafka's librdkafka, pyarrow) are in the Spark image:
  ``python -m airflow_logstore.spark.executors`` prints :data:`EXECUTOR_REQUIREMENTS` for
  ``pip install -c constraints.txt`` (``docker/spark.Dockerfile``); their version ranges are the
  package's own (pyproject.toml), their pins constraints.txt's.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

from airflow_logstore.tempdirs import private_folder

#: What Spark itself gives its executors (the Spark image's, or the worker's, pyspark), not in the list below.
SPARK_PROVIDED: tuple[str, ...] = ("pyspark",)

#: Distributions the executors import besides :data:`SPARK_PROVIDED`: no Airflow. numpy is named itself:
#: the executors' code imports it and pyarrow does not require it. A unit test checks that every
#: third-party import of :data:`EXECUTOR_MODULES`, and of the modules they import, is covered here.
EXECUTOR_REQUIREMENTS: tuple[str, ...] = ("pyiceberg[pyarrow]", "confluent-kafka", "numpy")

#: Modules whose functions run on executors; a test imports them with Airflow made unimportable.
EXECUTOR_MODULES: tuple[str, ...] = (
    "airflow_logstore.write.writer",
    "airflow_logstore.read.read_job",
    "airflow_logstore.reconcile.reconcile_job",
    "airflow_logstore.compaction.compact_job",
    "airflow_logstore.log.kafka_client",
)


def _package_files(root: Path) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and path.suffix in {".py", ".typed", ".java"} and "__pycache__" not in path.parts
    )


def package_zip(folder: Path | None = None) -> Path:
    """A zip of the installed ``airflow_logstore`` package (its sources), for ``--py-files``.

    Named by a hash of its content, so every job of one installation reuses the same file.

    :param folder: where to keep it (default: ``logstore-py-files-<uid>`` in the temporary directory, a
        folder of this user only: see :func:`~airflow_logstore.tempdirs.private_folder`)
    """
    root = Path(__file__).resolve().parents[1]  # the package (not imported: it is the layer above all)
    files = _package_files(root)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    folder = folder or private_folder("logstore-py-files")
    target = folder / f"airflow_logstore-{version('airflow-logstore')}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=folder, suffix=".zip.partial")
    os.close(fd)
    os.chmod(partial, 0o644)  # plain code, no secret: readable like the installed package
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, Path("airflow_logstore") / path.relative_to(root))
    os.replace(partial, target)  # concurrent jobs: each writes its own file, the last rename wins
    return target


if __name__ == "__main__":  # used by docker/spark.Dockerfile
    print(" ".join(EXECUTOR_REQUIREMENTS))
    sys.exit(0)
