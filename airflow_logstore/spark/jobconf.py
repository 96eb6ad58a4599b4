"""How a spark-submit'ed job learns its catalog and Kafka settings without secrets on a command line.

The operator writes them as Spark properties into a private ``--properties-file``:
``spark.sql.catalog.<name>.*`` (what Spark itself needs), ``spark.logstore.catalog.*`` (the same catalog
for pyiceberg in the driver) and ``spark.logstore.kafka.<librdkafka key>`` (security settings for the
producers). Spark redacts keys containing secret/password/token in its UI and logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_logstore.catalog import CatalogSpec, default_catalog
from airflow_logstore.settings import extra_kafka_config

CATALOG_SPEC_KEY = "spark.logstore.catalog.spec"
KAFKA_PREFIX = "spark.logstore.kafka."


def job_properties(catalog: CatalogSpec, kafka_extra: Mapping[str, Any]) -> dict[str, str]:
    """The Spark properties a job needs: catalog for Spark and pyiceberg, Kafka client settings."""
    props = dict(catalog.spark_conf())
    props[CATALOG_SPEC_KEY] = catalog.to_json()
    for key, value in kafka_extra.items():
        if callable(value):
            continue
        props[KAFKA_PREFIX + key] = str(value)
    return props


def settings_from_spark_conf(conf: Mapping[str, str]) -> tuple[CatalogSpec, dict[str, Any]] | None:
    """(catalog, kafka extra) from a job's Spark properties, or None when they are not there."""
    spec = conf.get(CATALOG_SPEC_KEY)
    if not spec:
        return None
    kafka = {
        key[len(KAFKA_PREFIX) :]: _typed(value) for key, value in conf.items() if key.startswith(KAFKA_PREFIX)
    }
    return CatalogSpec.from_mapping(json.loads(spec)), kafka


def job_settings(spark_conf: Mapping[str, str]) -> tuple[CatalogSpec, dict[str, Any]]:
    """The job's catalog and Kafka settings: from spark-submit properties, else the environment."""
    found = settings_from_spark_conf(spark_conf)
    if found is not None:
        return found
    return default_catalog(), extra_kafka_config()


def _typed(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value.lstrip("-").isdigit():
        return int(value)
    return value


def spark_conf_dict(spark: Any) -> dict[str, str]:
    return dict(spark.sparkContext.getConf().getAll())
