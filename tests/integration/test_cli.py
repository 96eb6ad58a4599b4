"""The ``logstore`` CLI's failures on the real broker, catalog and Spark: messages, never tracebacks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.cli import main
from airflow_logstore.table.catalog import default_catalog
from airflow_logstore.table.schema import parse_schema
from airflow_logstore.table.tables import ICEBERG_DEFAULTS, LogStoreTable
from logstore_dev.testing.environment import LogStoreTestEnv, dev_command, with_checkout
from logstore_dev.testing.tables import make_table, write_jsonl


@pytest.fixture
def table(env: LogStoreTestEnv) -> LogStoreTable:
    return make_table(env)


def logstore(env: LogStoreTestEnv, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: its own process, the test environment's state folder."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_logstore.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env.env},
        timeout=300,
        check=False,
    )


def test_read_of_a_missing_table(env: LogStoreTestEnv) -> None:
    done = logstore(env, "read", "no.such_table")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"logstore: error: table 'no.such_table' does not exist in catalog 'logstore' (sql sqlite:///"
        f"{env.settings.catalog_db}?timeout=30, warehouse {env.settings.warehouse.as_uri()})",
        f"logstore: state folder {env.settings.home} (from LOGSTORE_HOME); create the table with 'logstore "
        "table create', or use the state folder that has it (run inside its project checkout, or set "
        "LOGSTORE_HOME / LOGSTORE_CATALOG)",
    ]


def test_write_of_a_missing_input_file_fails_before_spark(env: LogStoreTestEnv, table: LogStoreTable) -> None:
    done = logstore(env, "write", str(table.name), "--input", "/tmp/does_not_exist.jsonl")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "logstore: error: input path '/tmp/does_not_exist.jsonl' does not exist",
        "logstore: fix the input (the path, row or column named above) and run the command again",
    ]


def test_spark_path_not_found_is_a_message(
    env: LogStoreTestEnv, spark: Any, table: LogStoreTable, capfd: pytest.CaptureFixture[str]
) -> None:
    """A glob is Spark's to resolve (as a remote URI is): its PATH_NOT_FOUND becomes the message."""
    pattern = "/tmp/does_not_exist_*.jsonl"
    code = main(["write", str(table.name), "--input", pattern])
    _, err = capfd.readouterr()
    assert code == 2
    assert "Traceback" not in err
    assert err.strip().splitlines()[-2:] == [
        f"logstore: error: input path not found: file:{pattern}",
        "logstore: check --input: a JSON-lines, CSV or Parquet file or folder, or a URI Spark can read",
    ]


def test_write_of_a_bad_input_row_is_a_message(
    env: LogStoreTestEnv,
    spark: Any,
    table: LogStoreTable,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The dual-write job finds the bad row inside Spark; the CLI explains it (not the job's own line)."""
    rows = write_jsonl(tmp_path / "bad.jsonl", [{"id": 1, "name": "ann", "amount": "lots"}])
    code = main(["write", str(table.name), "--input", str(rows)])
    _, err = capfd.readouterr()
    assert code == 2, err
    assert "Traceback" not in err and "dual_write: error" not in err, err
    assert err.strip().splitlines()[-2:] == [
        "logstore: error: row 1, column 'amount': value does not fit type bigint (file bad.jsonl)",
        "logstore: fix the input (the path, row or column named above) and run the command again",
    ]


def test_write_with_the_broker_down_is_a_message(
    env: LogStoreTestEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table's log is on a port nobody listens on: the write stops at the broker, before Spark."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("LOGSTORE_KAFKA_TIMEOUT_S", "2")
    log = {"log-store.enabled": "true", "log-store.topic": env.unique("down"), "log-store.address": down}
    name = f"it.{env.unique('brokerdown')}"
    catalog = default_catalog().load()
    catalog.create_namespace_if_not_exists("it")
    catalog.create_table(name, parse_schema("id int", ["id"]), properties={**ICEBERG_DEFAULTS, **log})
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": 1}])
    done = logstore(env, "write", name, "--input", str(rows))
    assert done.returncode == 1 and done.stdout == "", done.stderr
    problem, step = done.stderr.splitlines()  # no librdkafka log lines, no Spark start-up lines
    assert problem.startswith(f"logstore: error: Kafka at {down} did not answer within 2s"), done.stderr
    assert "'./dev services status'" in step and "log-store.address" in step, done.stderr


def test_table_show_names_the_state_folder_catalog_and_broker(
    env: LogStoreTestEnv, table: LogStoreTable
) -> None:
    done = logstore(env, "table", "show", str(table.name), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["using"] == {
        "state_folder": f"{env.settings.home} (from LOGSTORE_HOME)",
        "catalog": f"'logstore' (sql sqlite:///{env.settings.catalog_db}?timeout=30, "
        f"warehouse {env.settings.warehouse.as_uri()})",
        "broker": env.bootstrap,
    }


def test_services_status_names_the_running_broker(env: LogStoreTestEnv) -> None:
    done = subprocess.run(
        dev_command("services", "status"),
        capture_output=True,
        text=True,
        env=with_checkout({**os.environ, **env.env}),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        f"state folder: {env.settings.home} (from LOGSTORE_HOME)",
        f"catalog: 'logstore' (sql sqlite:///{env.settings.catalog_db}?timeout=30, "
        f"warehouse {env.settings.warehouse.as_uri()})",
        f"broker: {env.bootstrap}",
    ]
    assert lines[3].startswith(f"kafka broker running (pid {env.broker.pid()}) at {env.bootstrap}")


def test_a_missing_topic_is_a_message(env: LogStoreTestEnv) -> None:
    """The table's log points at the real broker, but its topic was never created."""
    name = f"it.{env.unique('notopic')}"
    catalog = default_catalog().load()
    catalog.create_namespace_if_not_exists("it")
    properties = {**ICEBERG_DEFAULTS, **env.log_properties(env.unique("missing"))}
    catalog.create_table(name, parse_schema("id int", ["id"]), properties=properties)
    done = logstore(env, "read", name)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    topic = properties["log-store.topic"]
    assert done.stderr.splitlines() == [
        f"logstore: error: topic '{topic}' has no partition 0: the topic is missing or has fewer partitions "
        "than the table's log-store.partitions; 'logstore table create' creates it"
    ]


def test_write_publishes_and_reads_say_what_they_hold_back(
    env: LogStoreTestEnv,
    spark: Any,
    table: LogStoreTable,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the shared Spark session: a missing column is an error unless --missing-as-null; a write
    publishes (a consistent read returns it) unless --no-publish (a consistent read then says what it
    held back, and why); the write's steps are progress lines on stderr, its outcome a summary on stdout."""
    monkeypatch.delenv("LOGSTORE_KAFKA_CONFIG", raising=False)  # the CLI quiets the job's Kafka clients
    name = str(table.name)  # the first write fails after claiming epoch 1: the second is epoch 2
    rows = write_jsonl(tmp_path / "no_amount.jsonl", [{"id": 1, "name": "ann"}])

    code = main(["write", name, "--input", str(rows)])
    out, err = capfd.readouterr()
    assert code == 2 and out == "", err
    assert err.strip().splitlines()[-2:] == [
        "logstore: error: row 1, column 'amount': value is missing: the input has no column 'amount', and "
        "missing-as-null is off (file no_amount.jsonl)",
        "logstore: add the column to the input, or pass --missing-as-null to write null into it",
    ]

    code = main(["write", name, "--input", str(rows), "--missing-as-null"])
    out, err = capfd.readouterr()
    assert code == 0, err
    wrote, published = out.splitlines()
    assert wrote.startswith(
        f"wrote batch 1 of writer 'logstore-cli' (epoch 2) to {name}: 1 changes, 1 log records"
    )
    assert "data files)" in wrote, wrote
    assert published.startswith("published: visible watermark") and "consistent log reads return" in published
    assert "logstore: starting Spark for the write" in err and "1 log records flushed" in err, err
    assert "rdkafka" not in err, err  # (Spark's output: the shared session's JVM is the test's)

    code = main(["read", name, "--consistency", "transactional"])  # Paimon's name: the summary says ours
    out, err = capfd.readouterr()
    assert code == 0 and [json.loads(line)["amount"] for line in out.splitlines()] == [None], err
    assert err.splitlines() == [f"logstore: 1 records of {name} (consistent log read; 1 scanned)"]

    more = write_jsonl(tmp_path / "more.jsonl", [{"id": 2, "name": "bo", "amount": 5}])
    code = main(["write", name, "--input", str(more), "--no-publish", "--json"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert json.loads(out)["published"] is None and json.loads(out)["write"]["batch_id"] == 2

    code = main(["read", name, "--consistency", "consistent"])
    out, err = capfd.readouterr()
    assert code == 0 and len(out.splitlines()) == 1, err
    assert err.splitlines()[1:] == [
        "logstore: held back: 1 records past the visibility watermark",
        "logstore:   1 written by writers whose batch is not published (or not committed) yet: "
        f"'logstore publish {name}' publishes what is committed",
    ]

    code = main(["read", name, "--mode", "hybrid", "--limit", "1"])
    out, err = capfd.readouterr()
    assert code == 0 and len(out.splitlines()) == 1, err
    code = main(["read", name, "--mode", "file", "--limit", "0", "--from", "latest"])
    out, err = capfd.readouterr()
    assert code == 0 and out == "", err
    assert err.splitlines()[0] == "logstore: note: --from does not apply to a file read; ignored"

    code = main(["table", "snapshots", name])
    out, _ = capfd.readouterr()
    assert (
        code == 0
        and out.splitlines()[0] == f"3 snapshots of {name}, oldest first (--from snapshot:ID reads from one)"
    )
    assert "writer logstore-cli batch 2 epoch" in out.splitlines()[-1] and out.splitlines()[-1].endswith(
        "(current)"
    )


def test_table_create_alter_and_drop_on_the_broker(
    env: LogStoreTestEnv, capfd: pytest.CaptureFixture[str]
) -> None:
    """A table created without a log gets one with 'table alter'; 'table drop --yes' deletes its topics."""
    from airflow_logstore.log import kafka_client

    name = f"it.{env.unique('alter')}"
    assert main(["table", "create", name, "--schema", "id int", "--primary-key", "id", "--no-log"]) == 0
    capfd.readouterr()
    topic = env.unique("altered")
    address = f"log-store.address={env.bootstrap}"
    code = main(
        [
            "table",
            "alter",
            name,
            "--property",
            "log-store.enabled=true",
            "--property",
            f"log-store.topic={topic}",
            "--property",
            address,
        ]
    )
    out, err = capfd.readouterr()
    assert code == 0, err
    assert out.splitlines()[-1] == f"log topic {topic} created"
    config = kafka_client.client_config(env.bootstrap, {})
    assert kafka_client.describe_topic(config, topic) is not None
    code = main(["table", "drop", name, "--yes"])
    out, err = capfd.readouterr()
    assert code == 0, err
    dropped, deleted = out.splitlines()  # the dead-letter topic exists only once a record needed it
    assert dropped == f"dropped table {name} and its files"
    assert deleted.startswith(f"deleted topics: {topic}, {topic}.logstore-control"), out
    assert kafka_client.describe_topic(config, topic) is None


def test_services_status_names_another_broker_on_the_port(env: LogStoreTestEnv, tmp_path: Path) -> None:
    """Another state folder, the same port: the broker there is not this folder's, and the status says so."""
    port = env.bootstrap.rsplit(":", 1)[1]
    done = subprocess.run(
        dev_command("services", "status"),
        capture_output=True,
        text=True,
        env=with_checkout(
            {
                **os.environ,
                **env.env,
                "LOGSTORE_HOME": str(tmp_path / "elsewhere"),
                "LOGSTORE_KAFKA_PORT": port,
            }
        ),
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"state folder: {tmp_path / 'elsewhere'} (from LOGSTORE_HOME)"
    assert lines[-1].startswith(f"another Kafka broker answers on {env.bootstrap}: not this state folder's")
