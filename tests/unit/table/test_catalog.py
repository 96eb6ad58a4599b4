"""Catalog descriptions for Spark and pyiceberg, and validated table names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_logstore.exceptions import IdentifierError
from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import (
    CatalogSpec,
    TableName,
    default_catalog,
    embedded_catalog,
    is_secret_key,
)

P = "spark.sql.catalog.logstore"


# --- JDBC URIs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "jdbc"),
    [
        ("sqlite:////abs/path/catalog.db", "jdbc:sqlite:/abs/path/catalog.db"),
        ("sqlite:////abs/catalog.db?timeout=30", "jdbc:sqlite:/abs/catalog.db"),
        ("sqlite:///relative.db", "jdbc:sqlite:relative.db"),
        ("postgresql://db:5432/iceberg", "jdbc:postgresql://db:5432/iceberg"),
        ("postgresql+psycopg2://user:pw@db:5432/iceberg", "jdbc:postgresql://db:5432/iceberg"),
        ("postgresql://user@db/iceberg?sslmode=require", "jdbc:postgresql://db/iceberg?sslmode=require"),
    ],
)
def test_jdbc_uri(uri: str, jdbc: str) -> None:
    assert CatalogSpec(uri=uri).jdbc_uri() == jdbc


@pytest.mark.parametrize("uri", ["", "mysql://db/iceberg", "http://rest:8181", "jdbc:sqlite:/x.db"])
def test_jdbc_uri_refuses_other_uris(uri: str) -> None:
    with pytest.raises(ValueError, match=f"cannot derive a JDBC URL from catalog uri '{uri}'"):
        CatalogSpec(uri=uri).jdbc_uri()


# --- Spark configuration ---------------------------------------------------------------------------


def test_spark_conf_of_sqlite_catalog() -> None:
    spec = CatalogSpec(uri="sqlite:////data/catalog.db?timeout=30", warehouse="file:///data/warehouse")
    assert spec.spark_conf() == {
        P: "org.apache.iceberg.spark.SparkCatalog",
        f"{P}.cache-enabled": "false",
        f"{P}.type": "jdbc",
        f"{P}.uri": "jdbc:sqlite:/data/catalog.db",
        f"{P}.jdbc.schema-version": "V1",
        f"{P}.jdbc.busy_timeout": "30000",
        f"{P}.warehouse": "file:///data/warehouse",
    }


def test_the_sqlite_busy_timeout_is_one_setting_for_pyiceberg_and_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOGSTORE_SQLITE_BUSY_TIMEOUT_S", "2.5")
    spec = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}, cwd=tmp_path))
    assert spec.uri.endswith("?timeout=2.5")
    assert spec.spark_conf()[f"{P}.jdbc.busy_timeout"] == "2500"
    without = CatalogSpec(uri=spec.uri.split("?")[0], warehouse=spec.warehouse)
    assert without.spark_conf()[f"{P}.jdbc.busy_timeout"] == "2500"  # the setting, when the URI has none
    monkeypatch.delenv("LOGSTORE_SQLITE_BUSY_TIMEOUT_S")
    assert without.spark_conf()[f"{P}.jdbc.busy_timeout"] == "30000"


def test_spark_conf_of_postgres_catalog_carries_credentials() -> None:
    spec = CatalogSpec(
        name="lake",
        uri="postgresql+psycopg2://ice:s3cret@db:5432/iceberg",
        warehouse="s3://bucket/wh",
        properties={"s3.endpoint": "http://minio:9000"},
    )
    conf = spec.spark_conf()
    p = "spark.sql.catalog.lake"
    assert conf == {
        p: "org.apache.iceberg.spark.SparkCatalog",
        f"{p}.cache-enabled": "false",
        f"{p}.type": "jdbc",
        f"{p}.uri": "jdbc:postgresql://db:5432/iceberg",
        f"{p}.jdbc.schema-version": "V1",
        f"{p}.jdbc.user": "ice",
        f"{p}.jdbc.password": "s3cret",
        f"{p}.warehouse": "s3://bucket/wh",
        f"{p}.s3.endpoint": "http://minio:9000",
        # Spark's own reads of s3:// files (inputs) reach the same store through Hadoop's S3A
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
    }


def test_spark_conf_of_postgres_catalog_without_password() -> None:
    conf = CatalogSpec(uri="postgresql://ice@db/iceberg").spark_conf()
    assert conf[f"{P}.jdbc.user"] == "ice"
    assert f"{P}.jdbc.password" not in conf
    assert f"{P}.jdbc.busy_timeout" not in conf
    assert f"{P}.warehouse" not in conf


def test_spark_conf_of_rest_catalog() -> None:
    spec = CatalogSpec(
        type="rest",
        uri="http://rest:8181",
        warehouse="s3://warehouse/",
        properties={"credential": "id:secret", "io-impl": "org.apache.iceberg.aws.s3.S3FileIO"},
    )
    assert spec.spark_conf() == {
        P: "org.apache.iceberg.spark.SparkCatalog",
        f"{P}.cache-enabled": "false",
        f"{P}.type": "rest",
        f"{P}.uri": "http://rest:8181",
        f"{P}.warehouse": "s3://warehouse/",
        f"{P}.credential": "id:secret",
        f"{P}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }


def test_s3_input_files_use_the_catalogs_store_and_keys() -> None:
    spec = CatalogSpec(
        type="rest",
        uri="http://rest:8181",
        warehouse="s3://warehouse/",
        properties={
            "s3.endpoint": "http://127.0.0.1:9000",
            "s3.path-style-access": "true",
            "s3.access-key-id": "AK",
            "s3.secret-access-key": "SK",
            "s3.region": "us-east-1",
        },
    )
    assert spec.hadoop_s3_conf() == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": "AK",
        "spark.hadoop.fs.s3a.secret.key": "SK",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    }
    assert CatalogSpec(uri="sqlite:////tmp/c.db", warehouse="file:///tmp/wh").hadoop_s3_conf() == {}


def test_spark_conf_of_sql_catalog_with_bad_uri_fails() -> None:
    with pytest.raises(ValueError, match="cannot derive a JDBC URL"):
        CatalogSpec(uri="mysql://x/y").spark_conf()


# --- pyiceberg -------------------------------------------------------------------------------------


def test_pyiceberg_properties_of_sql_catalog() -> None:
    spec = CatalogSpec(uri="sqlite:////data/c.db", warehouse="file:///data/wh", properties={"a": "b"})
    assert spec.pyiceberg_properties() == {
        "type": "sql",
        "uri": "sqlite:////data/c.db",
        "a": "b",
        "warehouse": "file:///data/wh",
        "schema_version": "v1",
    }


def test_pyiceberg_properties_of_rest_catalog() -> None:
    spec = CatalogSpec(type="rest", uri="http://rest:8181", properties={"token": "t"})
    assert spec.pyiceberg_properties() == {"type": "rest", "uri": "http://rest:8181", "token": "t"}


# --- (de)serialization -----------------------------------------------------------------------------


def test_json_round_trip() -> None:
    spec = CatalogSpec(name="c", type="rest", uri="http://x", warehouse="s3://w", properties={"k": "v"})
    assert CatalogSpec.from_mapping(json.loads(spec.to_json())) == spec


def test_from_mapping_defaults_and_stringifies() -> None:
    assert CatalogSpec.from_mapping({}) == CatalogSpec()
    spec = CatalogSpec.from_mapping({"uri": "sqlite:///x.db", "properties": {"port": 1, "flag": True}})
    assert spec.properties == {"port": "1", "flag": "True"}


def test_from_mapping_refuses_unknown_types() -> None:
    with pytest.raises(ValueError, match="catalog type 'hive' is not supported"):
        CatalogSpec.from_mapping({"type": "hive"})


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("credential", True),
        ("token", True),
        ("s3.secret-access-key", True),
        ("s3.session-key", True),
        ("jdbc.password", True),
        ("PASSWORD", True),
        ("gcs.oauth2.token", True),
        ("adls.private-key", True),
        ("s3.endpoint", False),
        ("warehouse", False),
    ],
)
def test_is_secret_key(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_embedded_catalog_lives_under_logstore_home(tmp_path: Path) -> None:
    settings = local_settings({"LOGSTORE_HOME": str(tmp_path)})
    spec = embedded_catalog(settings)
    db = tmp_path.resolve() / "catalog" / "catalog.db"
    assert spec.type == "sql" and spec.name == "logstore"
    assert spec.uri == f"sqlite:///{db}?timeout=30"
    assert spec.warehouse == (tmp_path.resolve() / "warehouse").as_uri()
    assert spec.jdbc_uri() == f"jdbc:sqlite:{db}"


def test_default_catalog_from_environment(tmp_path: Path) -> None:
    raw = json.dumps({"name": "lake", "type": "rest", "uri": "http://rest:8181"})
    assert default_catalog({"LOGSTORE_CATALOG": raw}) == CatalogSpec(
        name="lake", type="rest", uri="http://rest:8181"
    )
    assert default_catalog({"LOGSTORE_HOME": str(tmp_path)}) == embedded_catalog(
        local_settings({"LOGSTORE_HOME": str(tmp_path)})
    )
    assert default_catalog({"LOGSTORE_HOME": str(tmp_path), "LOGSTORE_CATALOG": ""}).type == "sql"


# --- table names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "namespace", "table"),
    [
        ("events", "default", "events"),
        ("ns.events", "ns", "events"),
        ("  ns.events  ", "ns", "events"),
        ("_private.T_1", "_private", "T_1"),
        ("a" * 128 + ".b", "a" * 128, "b"),
    ],
)
def test_table_name_parse(text: str, namespace: str, table: str) -> None:
    name = TableName.parse(text)
    assert (name.namespace, name.table) == (namespace, table)
    assert name.identifier == str(name) == f"{namespace}.{table}"


def test_table_name_default_namespace() -> None:
    assert TableName.parse("t", default_namespace="sales") == TableName("sales", "t")
    assert TableName.parse("ns.t", default_namespace="sales") == TableName("ns", "t")


def test_table_name_for_spark_is_quoted_with_the_catalog() -> None:
    assert TableName.parse("ns.events").spark(CatalogSpec(name="lake")) == "lake.`ns`.`events`"


@pytest.mark.parametrize("text", ["a.b.c", "cat.ns.t", "..", "a..b"])
def test_table_name_with_too_many_parts(text: str) -> None:
    with pytest.raises(IdentifierError) as info:
        TableName.parse(text)
    assert str(info.value) == f"table name '{text}' must be 'namespace.table' (letters, digits and '_' only)"


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("a; DROP TABLE x", "a; DROP TABLE x"),
        ("ns.t; DROP TABLE x", "t; DROP TABLE x"),
        ("`ns`.t", "`ns`"),
        ('"t"', '"t"'),
        ("'t'", "'t'"),
        ("ns.`t`", "`t`"),
        ("my table", "my table"),
        ("ns.my table", "my table"),
        ("ns.t--", "t--"),
        ("ns.t/*x*/", "t/*x*/"),
        ("1abc", "1abc"),
        ("ns.", ""),
        (".t", ""),
        ("", ""),
        ("ns-1.t", "ns-1"),
        ("é.t", "é"),
        ("a" * 129, "a" * 129),
        ("ns\n.t", "ns\n"),
        ("ns\t.t", "ns\t"),
    ],
)
def test_table_name_rejects_non_identifiers(text: str, part: str | None) -> None:
    with pytest.raises(IdentifierError) as info:
        TableName.parse(text)
    if part is not None:
        assert str(info.value) == (
            f"table name '{text}': '{part}' is not a plain identifier "
            "(start with a letter or '_', then letters, digits, '_'; at most 128)"
        )


def test_identifier_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        TableName.parse("a b")


def test_describe_names_the_catalog_and_masks_a_password(tmp_path: Path) -> None:
    embedded = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    assert embedded.describe() == (
        f"'logstore' (sql sqlite:///{tmp_path.resolve()}/catalog/catalog.db?timeout=30, "
        f"warehouse {(tmp_path.resolve() / 'warehouse').as_uri()})"
    )
    postgres = CatalogSpec(type="sql", uri="postgresql+psycopg2://cat:hunter2@db:5432/iceberg")
    assert postgres.describe() == "'logstore' (sql postgresql+psycopg2://cat:***@db:5432/iceberg)"
    assert "hunter2" not in postgres.describe()
    rest = CatalogSpec(name="prod", type="rest", uri="http://rest:8181", warehouse="s3://warehouse/")
    assert rest.describe() == "'prod' (rest http://rest:8181, warehouse s3://warehouse/)"


@pytest.mark.parametrize("raw", ['{"type": "rest"', "[1]", '{"type": "hive"}'])
def test_a_bad_catalog_spec_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=r"^LOGSTORE_CATALOG is not a catalog spec: "):
        default_catalog({"LOGSTORE_CATALOG": raw})
