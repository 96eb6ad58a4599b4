"""Faults survived, nothing lost: the broker going away mid-write, the catalog locked during a commit."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.log import kafka_client
from airflow_logstore.pause import pause_file
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_log
from airflow_logstore.spark.results import parse_result
from airflow_logstore.table.tables import LogStoreTable, create_table, snapshot_commits
from airflow_logstore.write.writer import open_writer
from logstore_dev.services.local import BrokerOptions, LocalBroker
from logstore_dev.testing.environment import free_port_pair
from logstore_dev.testing.tables import fold_log, table_state, write_jsonl
from tests.pause_files import wait_reached

FAST_FAILING_KAFKA = json.dumps({"message.timeout.ms": 8000, "socket.timeout.ms": 4000})
BATCH_1 = [{"id": i, "name": f"n{i}", "amount": i} for i in range(1, 401)]
BATCH_2 = [{"id": i, "name": f"m{i}", "amount": -i, "op": "update"} for i in range(1, 401, 2)] + [
    {"id": i, "op": "delete"} for i in range(2, 401, 4)
]


def _expected(*batches: list[dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in batches:
        full = [{"name": None, "amount": None, **row} for row in rows]
        state = apply_final(state, plan_batch(full, ["id"], state).final)
    return {key[0]: (row["name"], row["amount"]) for key, row in state.items()}


def _plain(state: dict[Any, dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    return {row["id"]: (row["name"], row["amount"]) for row in state.values()}


def _reconcile(handle: LogStoreTable) -> dict[str, Any]:
    from airflow_logstore.reconcile.reconciler import reconcile

    return reconcile(handle).to_dict()


def _assert_three_views_agree(handle: LogStoreTable, expected: dict[int, tuple[Any, Any]]) -> None:
    assert _plain(table_state(handle)) == expected
    publish_visible_offsets(handle)
    assert _plain(fold_log(read_log(handle, consistency="consistent"), ["id"])) == expected
    eventual = read_log(handle, consistency="eventual")
    assert _plain(fold_log(eventual, ["id"])) == expected
    assert _plain(fold_log(eventual, ["id"], "upsert")) == expected


@pytest.fixture
def own_broker(env) -> Iterator[LocalBroker]:
    """A broker this test may stop and start (the session broker serves other tests)."""
    broker = LocalBroker(
        env.settings,
        options=BrokerOptions(port=free_port_pair()),
        state_dir=env.settings.home / f"kafka-{env.unique('outage')}",
    )
    broker.up()
    yield broker
    # this process's shared producers to it go first: one left behind would log its failed reconnects
    # into later tests' stderr (test_cli checks that a write's stderr has no librdkafka lines)
    kafka_client.close_shared_producers()
    broker.down()


def test_broker_outage_mid_write(env, own_broker: LocalBroker, tmp_path: Path) -> None:
    name = env.unique("outage")
    handle = LogStoreTable.open(f"faults.{name}")
    create_table(
        handle,
        "id int, name string, amount long",
        primary_key=["id"],
        properties={
            "log-store.enabled": "true",
            "log-store.topic": f"{name}_log",
            "log-store.address": own_broker.bootstrap,
        },
    )
    base = ["--table", str(handle.name), "--writer-id", "outage"]
    b1, b2 = write_jsonl(tmp_path / "b1.jsonl", BATCH_1), write_jsonl(tmp_path / "b2.jsonl", BATCH_2)
    assert env.run_job("dual_write.py", [*base, "--input", str(b1), "--batch-id", "1"]).returncode == 0

    pauses = tmp_path / "pauses"
    pauses.mkdir()
    job = env.popen_job(
        "dual_write.py",
        [*base, "--input", str(b2), "--batch-id", "2"],
        extra_env={
            "LOGSTORE_KAFKA_CONFIG": FAST_FAILING_KAFKA,
            # the job's own Kafka requests give up as fast as its producer (default 30 s)
            "LOGSTORE_KAFKA_TIMEOUT_S": "8",
            "LOGSTORE_PAUSE_AT": "produce:started",
            "LOGSTORE_PAUSE_DIR": str(pauses),
        },
    )
    output: list[str] = []
    drain = threading.Thread(target=lambda: output.extend(job.stdout or ()), daemon=True)
    drain.start()  # a paused job must never block on a full pipe
    wait_reached(job, pauses, "produce:started", 300)
    own_broker.down()  # the broker dies mid-write: planned, its produce task started
    pause_file(pauses, "produce:started", "release").touch()
    job.wait(timeout=300)
    drain.join(30)
    text = "".join(output)
    assert job.returncode == 1, text[-3000:]
    assert "dual_write: error:" in text and (
        "delivery failed" in text or "not acknowledged" in text or "did not answer" in text
    ), text[-3000:]
    assert [c.batch_id for c in snapshot_commits(handle.load())] == [1]  # nothing half-committed

    own_broker.up()
    retried = env.run_job("dual_write.py", [*base, "--input", str(b2), "--batch-id", "2"])
    assert retried.returncode == 0, retried.stderr[-3000:]
    assert parse_result(retried.stdout)["skipped"] is False
    _reconcile(handle)
    _assert_three_views_agree(handle, _expected(BATCH_1, BATCH_2))


def _hold_lock(database: Path, locked: threading.Event, unlock: threading.Event) -> None:
    connection = sqlite3.connect(database, timeout=60, isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
    locked.set()
    assert unlock.wait(600)
    connection.execute("COMMIT")
    connection.close()


@pytest.mark.parametrize("lock_seconds, commits", [(5.0, True), (None, False)])
def test_catalog_locked_during_the_commit(
    env, spark, tmp_path: Path, lock_seconds: float | None, commits: bool
) -> None:
    """The catalog is locked exactly when the writer publishes its commit (a pause point holds it
    there until the lock is taken): for a few seconds (under the busy timeout), or until it gave up.

    The long lock runs with a 5 s busy timeout (``LOGSTORE_SQLITE_BUSY_TIMEOUT_S``) instead of the
    default 30 s: the writer gives up after the same attempts, in a sixth of the time."""
    name = env.unique("locked")
    handle = LogStoreTable.open(f"faults.{name}")
    create_table(
        handle,
        "id int, name string, amount long",
        primary_key=["id"],
        properties=env.log_properties(f"{name}_log"),
    )
    base = ["--table", str(handle.name), "--writer-id", "locked"]
    b1 = write_jsonl(tmp_path / "b1.jsonl", BATCH_1)
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    job = env.popen_job(
        "dual_write.py",
        [*base, "--input", str(b1), "--batch-id", "1"],
        {
            "LOGSTORE_PAUSE_AT": "commit:before-publish",
            "LOGSTORE_PAUSE_DIR": str(pauses),
            **({} if commits else {"LOGSTORE_SQLITE_BUSY_TIMEOUT_S": "5"}),
        },
    )
    output: list[str] = []
    drain = threading.Thread(target=lambda: output.extend(job.stdout or ()), daemon=True)
    drain.start()  # a paused job must never block on a full pipe
    wait_reached(job, pauses, "commit:before-publish", 300)
    locked, unlock = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_lock, args=(env.settings.catalog_db, locked, unlock))
    holder.start()
    assert locked.wait(30)
    pause_file(pauses, "commit:before-publish", "release").touch()
    if lock_seconds is not None:  # a short lock: the fault's length, well under the 30 s busy timeout
        threading.Timer(lock_seconds, unlock.set).start()
    try:
        job.wait(timeout=400)
    finally:
        unlock.set()  # a long lock: held until the writer gave up
        holder.join()
    drain.join(30)
    text = "".join(output)
    if commits:  # a short lock: the commit waits (busy timeout) and succeeds
        assert job.returncode == 0, text[-3000:]
    else:  # a lock longer than the busy timeout: the batch fails clearly, nothing half-committed
        assert job.returncode != 0, text[-3000:]
        assert "locked" in text.lower() or "busy" in text.lower(), text[-3000:]
        assert snapshot_commits(handle.load()) == []
        # the retry, in the test's session: the failure it follows is the job's, not the retry's
        spark.catalog.refreshTable(handle.spark_name())
        retried = open_writer(spark, str(handle.name), writer_id="locked").write_path(str(b1), 1)
        assert not retried.skipped
        _reconcile(handle)
    commits_1 = [c for c in snapshot_commits(handle.load()) if c.batch_id == 1]
    assert len(commits_1) == 1
    # No snapshot summary points at offsets that were never written: every offset range is in the log.
    records = read_log(handle, consistency="eventual").records
    written = {(r.partition, r.offset) for r in records if r.meta.epoch == commits_1[0].epoch}
    for partition, (first, last) in commits_1[0].offsets.items():
        assert (partition, first) in written and (partition, last) in written
    _assert_three_views_agree(handle, _expected(BATCH_1))
