"""The ``logstore`` source's glue to Spark and to the control topic, without a session or a broker.

The rows' Spark schema for every column type; where a read finds its catalog and Kafka settings (the
options a job's settings become, every secret under a key Spark redacts, else the environment); how
far a stream is behind, read from a query's progress; a stream's control follower caught up with the
control topic before a micro-batch is planned.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import types as T

from airflow_logstore.exceptions import KafkaUnavailableError, OptionError
from airflow_logstore.read import source
from airflow_logstore.read.spark_source import logstore_options, source_options, spark_schema, stream_lag
from airflow_logstore.table.catalog import CatalogSpec, is_secret_key


def test_the_schema_maps_every_column_type_and_adds_the_metadata() -> None:
    types = {
        "i": "int",
        "l": "long",
        "f": "float",
        "d": "double",
        "s": "string",
        "b": "boolean",
        "day": "date",
        "at": "timestamptz",
        "local": "timestamp",
        "raw": "binary",
        "money": "decimal(38, 18)",
    }
    schema = spark_schema(types, hybrid=False)
    assert [f.dataType for f in schema.fields[: len(types)]] == [
        T.IntegerType(),
        T.LongType(),
        T.FloatType(),
        T.DoubleType(),
        T.StringType(),
        T.BooleanType(),
        T.DateType(),
        T.TimestampType(),
        T.TimestampNTZType(),
        T.BinaryType(),
        T.DecimalType(38, 18),
    ]
    assert schema.fieldNames()[len(types) :] == [
        "_kind",
        "_partition",
        "_offset",
        "_writer_id",
        "_epoch",
        "_batch_id",
        "_record_type",
    ]
    assert spark_schema({"i": "int"}, hybrid=True).fieldNames()[-1] == "_source"
    assert all(f.nullable for f in schema.fields)


def test_a_jobs_settings_travel_as_options_with_every_secret_under_a_secret_key() -> None:
    catalog = CatalogSpec(
        "lake",
        "sql",
        "postgresql+psycopg2://user:pa55word@db:5432/catalog",
        "s3://warehouse/",
        {"s3.secret-access-key": "s3cr3t-key", "s3.endpoint": "http://s3:9000"},
    )
    kafka = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "logstore", "sasl.password": "kafka-pw"}
    options = logstore_options(catalog=catalog, kafka_extra=kafka)
    for key, value in options.items():
        if any(secret in value for secret in ("pa55word", "s3cr3t-key", "kafka-pw")):
            assert is_secret_key(key), key  # redacted by spark.sql.redaction.options.regex
    opts = source_options({"table": "ns.t", **options})
    assert opts.catalog == catalog
    assert opts.kafka_extra == kafka
    assert opts.table == "ns.t"


def test_in_a_submitted_job_the_options_come_from_the_settings_the_operators_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``logstore_options(spark)``: the job's Spark properties (``job_properties``, what the operators pass
    to spark-submit) win over the environment, and name the same catalog and Kafka settings."""
    from airflow_logstore.spark.jobconf import job_properties

    env_spec = {"name": "env", "type": "sql", "uri": "sqlite:////tmp/x.db", "warehouse": "file:///tmp/w"}
    monkeypatch.setenv("LOGSTORE_CATALOG", json.dumps(env_spec))
    monkeypatch.setenv("LOGSTORE_KAFKA_CONFIG", json.dumps({"security.protocol": "SSL"}))
    catalog = CatalogSpec(
        "lake", "rest", "http://catalog:8181", "s3://warehouse/", {"s3.secret-access-key": "s3cr3t-key"}
    )
    kafka = {"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "kafka-pw"}
    submitted = {"spark.app.name": "job", **job_properties(catalog, kafka)}

    class _Session:  # the edge faked: a session's SparkConf, as spark-submit filled it
        class sparkContext:
            @staticmethod
            def getConf() -> Any:
                return type("Conf", (), {"getAll": staticmethod(lambda: list(submitted.items()))})()

    options = logstore_options(_Session())  # type: ignore[arg-type]
    assert options == logstore_options(catalog=catalog, kafka_extra=kafka)
    opts = source_options({"table": "ns.t", **options})
    assert (opts.catalog, opts.kafka_extra) == (catalog, kafka)
    submitted.clear()  # a session nobody submitted settings to: the environment's
    assert source_options({"table": "ns.t", **logstore_options(_Session())}).catalog.name == "env"  # type: ignore[arg-type]


def test_without_settings_a_read_finds_the_catalog_as_the_logstore_command_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = {"name": "env", "type": "sql", "uri": "sqlite:////tmp/x.db", "warehouse": "file:///tmp/w"}
    monkeypatch.setenv("LOGSTORE_CATALOG", json.dumps(spec))
    monkeypatch.setenv("LOGSTORE_KAFKA_CONFIG", json.dumps({"security.protocol": "SSL"}))
    opts = source_options({"table": "ns.t"})
    assert opts.catalog == CatalogSpec.from_mapping(spec)
    assert opts.kafka_extra == {"security.protocol": "SSL"}


def test_how_far_a_stream_is_behind_from_its_progress() -> None:
    offset = {
        "version": 1,
        "positions": {"0": 5, "1": 2},
        "log_end": {"0": 9, "1": 2},
        "watermark": {"0": 6, "1": 1},
    }
    progress = {"sources": [{"endOffset": offset, "latestOffset": offset}]}
    lag = stream_lag(progress)
    assert lag["behind"] == {"0": 4, "1": 0}
    assert lag["unpublished"] == {"0": 2, "1": 0}  # offsets 7 and 8 wait for a publish
    assert stream_lag(json.dumps(progress)) == lag

    class _Progress(dict):  # PySpark's: a dict whose offsets are Python reprs, and the JVM's JSON
        json = json.dumps(progress)

    assert stream_lag(_Progress(sources=[{"endOffset": str(offset)}])) == lag
    eventual = {"positions": {"0": 5}, "log_end": {"0": 9}}
    assert "unpublished" not in stream_lag({"sources": [{"endOffset": eventual, "latestOffset": eventual}]})


class _Follower:
    """A control follower whose consumer delivers one record per poll."""

    def __init__(self, end: int, compacted_after: int | None = None) -> None:
        self.topic, self.next, self.end, self.polls = "ctl", 0, end, 0
        self.compacted_after = compacted_after
        self.consumer = self

    def poll(self, timeout: float = 0) -> bool:
        self.polls += 1
        if self.compacted_after is None or self.next < self.compacted_after:
            self.next = min(self.next + 1, self.end)
        return False

    def position(self, partitions: list[Any]) -> list[Any]:
        class _At:
            offset = (
                self.end if self.compacted_after is not None and self.next >= self.compacted_after else -1001
            )

        return [_At()]


class _Kafka:
    def __init__(self, end: int) -> None:
        self.end = end

    def partition_offsets(self, cons: Any, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        return {0: (0, self.end)}

    def request_timeout(self, timeout: float | None) -> float:
        return 0.5 if timeout is None else timeout


def test_a_streams_control_follower_folds_up_to_the_topics_end_before_a_micro_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(source, "kafka_client", _Kafka(5))
    follower = _Follower(5)
    source.catch_up(follower)  # type: ignore[arg-type]
    assert follower.next == 5 and follower.polls >= 5
    # the last records compacted away: the consumer's position is past them, nothing more to fold
    gone = _Follower(5, compacted_after=3)
    source.catch_up(gone)  # type: ignore[arg-type]
    assert gone.next == 3
    stuck = _Follower(5, compacted_after=2)
    stuck.position = lambda partitions: [type("At", (), {"offset": -1001})()]  # type: ignore[method-assign]
    with pytest.raises(KafkaUnavailableError, match="did not deliver its records up to 5"):
        source.catch_up(stuck, timeout=0.2)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["{not json", "[1, 2]", '"a string"'])
def test_a_catalog_option_that_is_not_a_catalogs_json_names_the_option(spec: str) -> None:
    with pytest.raises(OptionError, match=r"option 'catalog\.spec': is not a catalog's JSON"):
        source_options({"table": "ns.t", "catalog.spec": spec})
