"""One definition of a secret setting, and secrets that travel only under keys Spark redacts."""

from __future__ import annotations

import json
import re

import pytest

from airflow_logstore.spark.jobconf import (
    CATALOG_SPEC_KEY,
    SecretPlacementError,
    job_properties,
    settings_from_spark_conf,
    split_secret_conf,
    submit_environment,
)
from airflow_logstore.spark.session import base_conf
from airflow_logstore.table.catalog import SECRET_KEY_REGEX, CatalogSpec, is_secret_key

SPARK_DEFAULT_REDACTION = r"(?i)secret|password|token|access[.]?key"


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.catalog.logstore.credential",
        "spark.sql.catalog.logstore.token",
        "spark.sql.catalog.logstore.s3.access-key-id",
        "spark.sql.catalog.logstore.s3.secret-access-key",
        "spark.sql.catalog.logstore.s3.session-token",
        "spark.sql.catalog.logstore.jdbc.password",
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.logstore.catalog.property.credential",
        "spark.logstore.catalog.uri-password",
        "spark.logstore.kafka.sasl.password",
        "spark.logstore.kafka.ssl.key.pem",
        "spark.logstore.kafka.sasl.oauthbearer.config",
        "kafka.sasl.jaas.config",
        "spark.executorEnv.AWS_ACCESS_KEY_ID",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
        "spark.executorEnv.AWS_SESSION_TOKEN",
    ],
)
def test_every_secret_the_jobs_carry_is_redacted_by_spark(key: str) -> None:
    assert is_secret_key(key)
    assert re.search(base_conf()["spark.redaction.regex"], key)


def test_spark_redaction_is_the_one_definition_and_covers_sparks_default() -> None:
    assert base_conf()["spark.redaction.regex"] == SECRET_KEY_REGEX
    for word in ("secret", "password", "token", "accesskey", "access.key", "TOKEN"):
        assert re.search(SPARK_DEFAULT_REDACTION, word) and is_secret_key(word)
    # what Spark's default misses, and is why the project sets its own
    for key in ("spark.sql.catalog.logstore.credential", "s3.access-key-id", "AWS_ACCESS_KEY_ID"):
        assert not re.search(SPARK_DEFAULT_REDACTION, key) and is_secret_key(key)
    assert re.search(base_conf()["spark.sql.redaction.options.regex"], "url")


def _catalog(**overrides: object) -> CatalogSpec:
    data = {
        "name": "logstore",
        "type": "rest",
        "uri": "http://catalog:8181",
        "warehouse": "s3://warehouse/",
        "properties": {
            "credential": "client:Catalog-credential-1",
            "s3.access-key-id": "S3-key-id-1",
            "s3.secret-access-key": "S3-secret-key-1",
            "s3.endpoint": "http://minio:9000",
        },
        **overrides,
    }
    return CatalogSpec.from_mapping(data)


KAFKA = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "Sasl-password-1"}
SECRETS = ("client:Catalog-credential-1", "S3-key-id-1", "S3-secret-key-1", "Sasl-password-1")


def test_no_secret_rides_in_the_value_of_a_key_spark_does_not_redact() -> None:
    props = job_properties(_catalog(), KAFKA)
    for key, value in props.items():
        if any(secret in value for secret in SECRETS):
            assert is_secret_key(key), key
    spec = json.loads(props[CATALOG_SPEC_KEY])
    assert "properties" not in spec and spec["uri"] == "http://catalog:8181"


def test_the_job_gets_back_exactly_what_was_sent() -> None:
    for catalog in (
        _catalog(),
        _catalog(
            type="sql", uri="postgresql+psycopg2://iceberg:Pg-password-1@db:5432/iceberg", properties={}
        ),
    ):
        props = job_properties(catalog, {**KAFKA, "enable.idempotence": True, "linger.ms": 5})
        found = settings_from_spark_conf(props)
        assert found is not None
        assert found[0] == catalog
        assert found[1] == {**KAFKA, "enable.idempotence": True, "linger.ms": 5}


def test_the_uri_password_travels_under_a_key_of_its_own() -> None:
    catalog = _catalog(
        type="sql", uri="postgresql+psycopg2://iceberg:Pg-password-1@db:5432/iceberg", properties={}
    )
    props = job_properties(catalog, {})
    carrying = {key for key, value in props.items() if "Pg-password-1" in value}
    assert carrying == {"spark.logstore.catalog.uri-password", "spark.sql.catalog.logstore.jdbc.password"}
    assert "Pg-password-1" not in props[CATALOG_SPEC_KEY]


def test_a_secret_that_would_show_is_refused() -> None:
    with pytest.raises(SecretPlacementError, match=r"spark\.sql\.catalog\.logstore\.uri"):
        job_properties(_catalog(uri="http://user:Rest-password-1@catalog:8181"), {})


def test_secret_settings_leave_the_command_line() -> None:
    public, secret = split_secret_conf(
        {"spark.executorEnv.AWS_SECRET_ACCESS_KEY": "k", "spark.ui.port": 4040, "spark.redaction.regex": "x"}
    )
    assert public == {"spark.ui.port": 4040, "spark.redaction.regex": "x"}
    assert secret == {"spark.executorEnv.AWS_SECRET_ACCESS_KEY": "k"}


def test_spark_submit_inherits_no_airflow_secret() -> None:
    environ = {
        "PATH": "/bin",
        "LOGSTORE_HOME": "/h",
        "AIRFLOW_CONN_KAFKA_DEFAULT": '{"extra": {"sasl.password": "p"}}',
        "AIRFLOW_VAR_X": "v",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://a:b@c/d",
        "LOGSTORE_KAFKA_CONFIG": '{"sasl.password": "p"}',
        "LOGSTORE_CATALOG": "{}",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ACCESS_KEY_ID": "i",
        "AWS_REGION": "us-east-1",
        "PYSPARK_PYTHON": "/py",
        "_SPARK_AUTH_SECRET": "spark's own",
    }
    assert submit_environment(environ) == {
        "PATH": "/bin",
        "LOGSTORE_HOME": "/h",
        "AWS_REGION": "us-east-1",
        "PYSPARK_PYTHON": "/py",
        "_SPARK_AUTH_SECRET": "spark's own",
    }
