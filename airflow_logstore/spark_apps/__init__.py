"""The PySpark applications that operators hand to ``spark-submit``, shipped inside the package.

Each module here is a file ``spark-submit`` runs as its main program; it only calls the entry point of
an actor's job (``write.write_job``, ``read.read_job``, ``reconcile.reconcile_job``,
``compaction.compact_job``). They live inside ``airflow_logstore`` so an installed wheel carries them
(no generic top-level package); the repository's ``spark_jobs/*.py`` call the same entry points. They
stand above the actors, apart from :mod:`airflow_logstore.spark` (the engine glue the actors' jobs use).
"""

from __future__ import annotations

from pathlib import Path

#: The application files (``<job>_app.py``: the application of ``spark_jobs/<job>.py``, named apart from
#: that script, from the operator module and from the actor's package of the same job).
APPLICATIONS: tuple[str, ...] = (
    "dual_write_app.py",
    "read_table_app.py",
    "compact_app.py",
    "reconcile_app.py",
)


def application_path(script: str) -> Path:
    """The installed file of application ``script`` (one of :data:`APPLICATIONS`)."""
    if script not in APPLICATIONS:
        raise ValueError(f"unknown LogStore Spark application {script!r}; known: {', '.join(APPLICATIONS)}")
    return Path(__file__).resolve().parent / script
