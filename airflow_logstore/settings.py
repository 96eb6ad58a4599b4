"""Where the embedded default keeps its state, read from the environment when asked (never at import).

``LOGSTORE_HOME``        state: broker data, the SQLite catalog, the warehouse (default ``~/.logstore``)
``LOGSTORE_CACHE``       downloaded jars and the Maven repository (default ``~/.cache/airflow-logstore``)
``LOGSTORE_KAFKA_PORT``  port of the local broker on 127.0.0.1 (default 19092; controller uses port+1)
``LOGSTORE_CATALOG``     a JSON catalog spec overriding the embedded SQLite catalog (see catalog.py)
``LOGSTORE_KAFKA_CONFIG``  JSON librdkafka settings added to every Kafka client (e.g. SASL)
``LOGSTORE_SPARK_MASTER``  Spark master for sessions built outside spark-submit (default local[2])
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LocalSettings:
    home: Path
    cache: Path
    kafka_port: int
    spark_master: str

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


def local_settings(env: dict[str, str] | None = None) -> LocalSettings:
    env = dict(os.environ if env is None else env)
    home = Path(env.get("LOGSTORE_HOME") or Path.home() / ".logstore").expanduser().resolve()
    cache = (
        Path(env.get("LOGSTORE_CACHE") or Path.home() / ".cache" / "airflow-logstore").expanduser().resolve()
    )
    port = int(env.get("LOGSTORE_KAFKA_PORT") or 19092)
    master = env.get("LOGSTORE_SPARK_MASTER") or "local[2]"
    return LocalSettings(home=home, cache=cache, kafka_port=port, spark_master=master)


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
