"""How a spark-submit'ed job learns its catalog and Kafka settings without secrets on a command line.

The operator writes them as Spark properties into a private ``--properties-file``:
``spark.sql.catalog.<name>.*`` (what Spark itself needs), ``spark.logstore.catalog.*`` (the same catalog
for pyiceberg in the driver) and ``spark.logstore.kafka.<librdkafka key>`` (security settings for the
producers).

Every secret travels under a key of its own that :func:`airflow_logstore.table.catalog.is_secret_key` matches,
and ``spark.redaction.regex`` is that same pattern (:func:`airflow_logstore.spark.session.base_conf`), so
Spark redacts it in its UI, REST API, event log and logs. Nothing secret rides inside another value: the
catalog spec (``spark.logstore.catalog.spec``) carries name, type, URI without its password and warehouse;
each catalog property is a key of its own (``spark.logstore.catalog.property.<key>``), the URI's password
is ``spark.logstore.catalog.uri-password``. :func:`job_properties` refuses to write a secret value under a
key that is not secret-looking.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_logstore.settings import extra_kafka_config
from airflow_logstore.table.catalog import CatalogSpec, default_catalog, is_secret_key

CATALOG_SPEC_KEY = "spark.logstore.catalog.spec"
CATALOG_PROPERTY_PREFIX = "spark.logstore.catalog.property."
CATALOG_URI_PASSWORD_KEY = "spark.logstore.catalog.uri-password"
KAFKA_PREFIX = "spark.logstore.kafka."

_URI_PASSWORD = re.compile(r"^(?P<head>[a-z][a-z0-9+.-]*://[^:/@]*):(?P<password>[^@/]*)@", re.IGNORECASE)


#: Shorter values are not searched for inside other values (as Airflow's masker does not mask them):
#: "abc" in some URI says nothing.
MIN_SECRET_LENGTH = 5


class SecretPlacementError(ValueError):
    """A secret value would travel under a Spark key that is not redacted."""


def job_properties(catalog: CatalogSpec, kafka_extra: Mapping[str, Any]) -> dict[str, str]:
    """The Spark properties a job needs: catalog for Spark and pyiceberg, Kafka client settings.

    :raises SecretPlacementError: a secret value (a secret-named catalog property or Kafka setting, the
        URI's password) would appear in the value of a key Spark does not redact.
    """
    props = dict(catalog.spark_conf())
    uri, uri_password = _split_uri_password(catalog.uri)
    props[CATALOG_SPEC_KEY] = json.dumps(
        {"name": catalog.name, "type": catalog.type, "uri": uri, "warehouse": catalog.warehouse}
    )
    if uri_password:
        props[CATALOG_URI_PASSWORD_KEY] = uri_password
    for key, value in catalog.properties.items():
        props[CATALOG_PROPERTY_PREFIX + key] = value
    secrets = {value for key, value in catalog.properties.items() if is_secret_key(key)}
    secrets.add(uri_password)
    for key, value in kafka_extra.items():
        if callable(value):
            continue
        props[KAFKA_PREFIX + key] = str(value)
        if is_secret_key(key):
            secrets.add(str(value))
    check_secret_placement(props, secrets)
    return props


def check_secret_placement(props: Mapping[str, str], secrets: Iterable[str]) -> None:
    """Raise when a secret appears in the value of a key :func:`is_secret_key` does not match."""
    values = [s for s in secrets if len(s) >= MIN_SECRET_LENGTH]
    for key, value in props.items():
        if not is_secret_key(key) and any(secret in value for secret in values):
            raise SecretPlacementError(
                f"Spark property '{key}' would carry a secret in its value, and Spark would not redact it "
                "(name secrets with a secret-looking key: see airflow_logstore.table.catalog.is_secret_key)"
            )


def _split_uri_password(uri: str) -> tuple[str, str]:
    """(URI without the password of its user info, the password or "")."""
    match = _URI_PASSWORD.match(uri)
    if not match or not match.group("password"):
        return uri, ""
    return match.group("head") + "@" + uri[match.end() :], match.group("password")


def _join_uri_password(uri: str, password: str) -> str:
    if not password:
        return uri
    head, sep, rest = uri.partition("@")
    return f"{head}:{password}@{rest}" if sep else uri


def split_secret_conf(conf: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(settings that may go on spark-submit's command line, secret ones for the properties file).

    An operator's ``spark_conf`` or the Spark connection's may carry secrets too (say
    ``spark.executorEnv.AWS_SECRET_ACCESS_KEY``); on the command line every process listing shows them.
    """
    public = {key: value for key, value in conf.items() if not is_secret_key(str(key))}
    secret = {str(key): str(value) for key, value in conf.items() if is_secret_key(str(key))}
    return public, secret


#: Environment variables spark-submit, the driver and its Python workers do not inherit from the Airflow
#: task: Airflow's connections, variables and configuration (``AIRFLOW_CONN_*`` holds every secret of a
#: connection), LogStore's own settings the job gets from its properties instead, and any secret-named
#: one (``AWS_SECRET_ACCESS_KEY``: S3 keys reach Spark through the catalog's ``s3.*`` properties).
#: Spark's own variables (``SPARK_*``, ``_SPARK_*``, ``PYSPARK_*``) stay: Spark handles their secrets.
SCRUBBED_ENV_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__")
SCRUBBED_ENV_NAMES = frozenset({"LOGSTORE_CATALOG", "LOGSTORE_KAFKA_CONFIG"})
_SPARK_ENV_PREFIXES = ("SPARK_", "_SPARK_", "PYSPARK_")


def submit_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment spark-submit runs with: ``environ`` without secrets (see the names above)."""
    return {
        name: value
        for name, value in environ.items()
        if not name.startswith(SCRUBBED_ENV_PREFIXES)
        and name not in SCRUBBED_ENV_NAMES
        and (name.startswith(_SPARK_ENV_PREFIXES) or not is_secret_key(name))
    }


def settings_from_spark_conf(conf: Mapping[str, str]) -> tuple[CatalogSpec, dict[str, Any]] | None:
    """(catalog, kafka extra) from a job's Spark properties, or None when they are not there."""
    spec = conf.get(CATALOG_SPEC_KEY)
    if not spec:
        return None
    data = json.loads(spec)
    data["uri"] = _join_uri_password(str(data.get("uri", "")), conf.get(CATALOG_URI_PASSWORD_KEY, ""))
    data["properties"] = {
        key[len(CATALOG_PROPERTY_PREFIX) :]: value
        for key, value in conf.items()
        if key.startswith(CATALOG_PROPERTY_PREFIX)
    }
    kafka = {
        key[len(KAFKA_PREFIX) :]: _typed(value) for key, value in conf.items() if key.startswith(KAFKA_PREFIX)
    }
    return CatalogSpec.from_mapping(data), kafka


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
