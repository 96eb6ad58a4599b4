"""Where the embedded default keeps its state, read from the environment when asked (never at import).

``LOGSTORE_HOME``        state: broker data, the SQLite catalog, the warehouse
``LOGSTORE_CACHE``       downloaded jars and the Maven repository
``LOGSTORE_KAFKA_PORT``  port of the local broker on 127.0.0.1 (default 19092; controller uses port+1)
``LOGSTORE_KAFKA_TIMEOUT_S``  how long Kafka admin and offset requests wait for the broker (default 30)
``LOGSTORE_SQLITE_BUSY_TIMEOUT_S``  how long the embedded SQLite catalog waits for a lock (default 30)
``LOGSTORE_CATALOG``     a JSON catalog spec overriding the embedded SQLite catalog (see table/catalog.py)
``LOGSTORE_KAFKA_CONFIG``  JSON librdkafka settings added to every Kafka client (e.g. SASL)
``LOGSTORE_SPARK_MASTER``  Spark master for sessions built outside spark-submit (default local[2])

The state folder and the cache are found the same way by ``./dev``, the installed ``logstore`` command,
Airflow tasks and Spark jobs: the environment variable when it is set; else, inside a checkout of this
project (the working directory or a folder above it), the checkout's ``.logstore/`` and ``.cache/``;
else ``~/.logstore`` and ``~/.cache/airflow-logstore``.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_NAME = "airflow-logstore"
DEFAULT_KAFKA_TIMEOUT_S = 30.0
DEFAULT_SQLITE_BUSY_TIMEOUT_S = 30.0
#: the folder that holds ``airflow_logstore/`` (in a checkout: the repository, with ``dags/``,
#: ``spark_jobs/`` and ``scripts/``)
SOURCE_ROOT = Path(__file__).resolve().parents[1]
#: the example DAGs and the demo's input files, shipped in the package (in a checkout: links to
#: ``dags/``); ``logstore dags copy DEST`` copies them into a DAGs folder
EXAMPLE_DAGS = Path(__file__).resolve().parent / "example_dags"


@dataclass(frozen=True)
class LocalSettings:
    """The embedded default's folders and ports.

    :param home_source: why ``home`` is where it is: ``LOGSTORE_HOME``, ``checkout <path>`` or ``default``
    """

    home: Path
    cache: Path
    kafka_port: int
    spark_master: str
    home_source: str = "default"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def broker_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def catalog_db(self) -> Path:
        return self.home / "catalog" / "catalog.db"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    @property
    def jars_dir(self) -> Path:
        return self.cache / "jars"

    @property
    def maven_repo(self) -> Path:
        return self.cache / "m2"

    def describe_home(self) -> str:
        """The state folder and why it was chosen, for messages."""
        return f"{self.home} (from {self.home_source})"


def find_checkout(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` that is a checkout of this project, or None.

    A checkout has a ``pyproject.toml`` whose ``[project] name`` is airflow-logstore, next to the
    ``dev`` script or a ``.logstore`` state folder (an unpacked source distribution has neither).
    """
    start = start.expanduser().absolute()
    for folder in (start, *start.parents):
        if _is_checkout(folder):
            return folder
    return None


def _is_checkout(folder: Path) -> bool:
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file() or not ((folder / "dev").is_file() or (folder / ".logstore").is_dir()):
        return False
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    name = project.get("name") if isinstance(project, dict) else None
    return isinstance(name, str) and re.sub(r"[-_.]+", "-", name).lower() == PROJECT_NAME


def _working_directory() -> Path | None:
    try:
        return Path.cwd()
    except OSError:  # the working directory was deleted
        return None


def local_settings(env: dict[str, str] | None = None, cwd: Path | None = None) -> LocalSettings:
    """The settings for ``env`` (default: the process environment) seen from ``cwd`` (default: here)."""
    env = dict(os.environ if env is None else env)
    start = cwd or _working_directory()
    checkout = find_checkout(start) if start is not None else None
    if env.get("LOGSTORE_HOME"):
        home, source = Path(env["LOGSTORE_HOME"]), "LOGSTORE_HOME"
    elif checkout is not None:
        home, source = checkout / ".logstore", f"checkout {checkout}"
    else:
        home, source = Path.home() / ".logstore", "default"
    if env.get("LOGSTORE_CACHE"):
        cache = Path(env["LOGSTORE_CACHE"])
    else:
        cache = checkout / ".cache" if checkout else Path.home() / ".cache" / "airflow-logstore"
    return LocalSettings(
        home=_absolute(home, start),
        cache=_absolute(cache, start),
        kafka_port=_port(env.get("LOGSTORE_KAFKA_PORT")),
        spark_master=env.get("LOGSTORE_SPARK_MASTER") or "local[2]",
        home_source=source,
    )


def _port(raw: str | None) -> int:
    if not raw:
        return 19092
    if not raw.strip().isdigit() or not 0 < int(raw) < 65535:
        raise ValueError(f"LOGSTORE_KAFKA_PORT must be a port number below 65535, not {raw!r}")
    return int(raw)


def _absolute(path: Path, cwd: Path | None) -> Path:
    path = path.expanduser()
    if not path.is_absolute() and cwd is not None:
        path = cwd / path
    return path.resolve()


def kafka_timeout_s(env: dict[str, str] | None = None) -> float:
    """``LOGSTORE_KAFKA_TIMEOUT_S``: how long a Kafka request waits for an answer (default 30 s)."""
    return _seconds(env, "LOGSTORE_KAFKA_TIMEOUT_S", DEFAULT_KAFKA_TIMEOUT_S)


def sqlite_busy_timeout_s(env: dict[str, str] | None = None) -> float:
    """``LOGSTORE_SQLITE_BUSY_TIMEOUT_S``: how long the embedded catalog waits for a lock (default 30 s)."""
    return _seconds(env, "LOGSTORE_SQLITE_BUSY_TIMEOUT_S", DEFAULT_SQLITE_BUSY_TIMEOUT_S)


def _seconds(env: dict[str, str] | None, name: str, default: float) -> float:
    raw = dict(os.environ if env is None else env).get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number of seconds, not {raw!r}")
    return value


def extra_kafka_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    """librdkafka settings from ``LOGSTORE_KAFKA_CONFIG`` (JSON), e.g. SASL credentials."""
    env = dict(os.environ if env is None else env)
    raw = env.get("LOGSTORE_KAFKA_CONFIG")
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("LOGSTORE_KAFKA_CONFIG must be a JSON object")
    return value
