"""The cluster storage services' pure parts: Maven coordinates with classifiers, URLs, redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_logstore import versions
from airflow_logstore.jars import _dependency_xml
from logstore_dev.services.objectstore import LocalObjectStore
from logstore_dev.services.postgres import LocalPostgres
from logstore_dev.services.rest_catalog import LAUNCHER_SOURCE, LocalRestCatalog


def test_a_coordinate_with_a_classifier_becomes_a_dependency_with_that_classifier() -> None:
    xml = _dependency_xml("org.apache.iceberg:iceberg-core:1.11.0:tests")
    assert (
        "<artifactId>iceberg-core</artifactId><version>1.11.0</version><classifier>tests</classifier>" in xml
    )
    assert "<classifier>" not in _dependency_xml("org.xerial:sqlite-jdbc:3.50.3.0")
    for bad in ("a:b", "a:b:c:d:e", "a::c"):
        with pytest.raises(ValueError, match="not a Maven coordinate"):
            _dependency_xml(bad)


def test_the_rest_catalog_artifacts_include_the_fixture_jars() -> None:
    assert "org.apache.iceberg:iceberg-open-api:1.11.0:test-fixtures" in versions.REST_CATALOG_ARTIFACTS
    assert "org.apache.iceberg:iceberg-core:1.11.0:tests" in versions.REST_CATALOG_ARTIFACTS
    assert 'System.getProperty("logstore.rest.host", "127.0.0.1")' in LAUNCHER_SOURCE


def test_urls_are_loopback_and_status_hides_the_password(tmp_path: Path) -> None:
    postgres = LocalPostgres(port=25432, state_dir=tmp_path / "pg", password="p@ss")
    assert postgres.url == "postgresql+psycopg2://airflow:p@ss@127.0.0.1:25432/airflow"
    status = postgres.status()
    assert status["running"] is False and "p@ss" not in json.dumps(status)
    s3 = LocalObjectStore(port=29000, state_dir=tmp_path / "s3", access_key="a", secret_key="b")
    assert s3.endpoint == "http://127.0.0.1:29000"
    catalog = LocalRestCatalog(
        port=28181, state_dir=tmp_path / "c", s3_endpoint=s3.endpoint, access_key="a", secret_key="b"
    )
    assert catalog.uri == "http://127.0.0.1:28181"
    assert catalog.client_properties()["s3.endpoint"] == s3.endpoint
    assert catalog.down() is False and s3.down() is False and postgres.down() is False
