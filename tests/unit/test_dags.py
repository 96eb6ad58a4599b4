"""Every example DAG imports without errors, and the pipeline's trigger form is usable."""

from __future__ import annotations

import pytest

from logstore_dev.testing.environment import REPO_ROOT


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO_ROOT / "dags"))


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert {
        "logstore_pipeline",
        "logstore_reconcile",
        "logstore_compaction",
        "logstore_downstream",
        "logstore_publish",
    } <= set(dagbag.dag_ids)


def test_pipeline_params_have_types_defaults_and_validation(dagbag) -> None:
    dag = dagbag.dags["logstore_pipeline"]
    params = dag.params
    schema = {name: params.get_param(name).schema for name in params}
    assert schema["batch_id"]["type"] == "integer" and schema["batch_id"]["minimum"] == 1
    assert schema["read_mode"]["enum"] == ["file", "log", "hybrid"]
    assert schema["consistency"]["enum"] == ["consistent", "eventual", "transactional"]
    assert "pattern" in schema["table"]
    assert params["table"] == "demo.orders" and params["batch_id"] == 1
    for name in params:
        assert params.get_param(name).description, f"param {name} has no description"

    from airflow.sdk.exceptions import ParamValidationError

    for name, value, message in (
        ("batch_id", 0, "less than the minimum"),
        ("batch_id", "seven", "not of type 'integer'"),
        ("table", "orders; DROP TABLE x", "does not match"),
        ("read_mode", "stream", "is not one of"),
        ("consistency", "strong", "is not one of"),
    ):
        with pytest.raises(ParamValidationError, match=message):
            params.get_param(name).resolve(value)


def test_pipeline_shape(dagbag) -> None:
    dag = dagbag.dags["logstore_pipeline"]
    assert dag.schedule is None or str(dag.timetable.summary) in ("None", "Never")
    wait = dag.get_task("wait_for_snapshot")
    assert wait.deferrable is True
    assert wait.write_task_id == "dual_write" and dag.has_task(wait.write_task_id)
    assert dag.get_task("publish_visible_offsets").upstream_task_ids == {"dual_write", "wait_for_snapshot"}
    # the write emits no asset event: downstream DAGs run on the table's visible events (issue 38, item 1)
    assert dag.get_task("dual_write").outlets == []


def test_maintenance_dags_are_scheduled_without_catchup(dagbag) -> None:
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    reconcile = dagbag.dags["logstore_reconcile"]
    assert LazyDeserializedDAG.from_dag(reconcile).timetable.summary == "*/10 * * * *"
    assert reconcile.catchup is False and reconcile.max_active_runs == 1
    compaction = dagbag.dags["logstore_compaction"]
    assert LazyDeserializedDAG.from_dag(compaction).timetable.summary == "0 * * * *"
    assert compaction.catchup is False and compaction.max_active_runs == 1


def _watched(dag) -> dict[str, list[str]]:
    """The assets a DAG is scheduled on (any of them), with their watchers' trigger classes."""
    condition = dag.timetable.asset_condition
    return {a.name: [type(w.trigger).__name__ for w in a.watchers] for a in condition.objects}


def test_downstream_runs_on_visible_events_and_publish_on_commit_events(dagbag) -> None:
    # issue 38, item 1: a downstream run starts once the batch is visible, never on the write alone
    tables = ("demo.orders", "demo.orders_stream")
    downstream = dagbag.dags["logstore_downstream"]
    assert _watched(downstream) == {f"logstore.{t}.visible": ["LogStoreVisibleTrigger"] for t in tables}
    assert downstream.max_active_runs == 1 and downstream.catchup is False
    tasks = {t.task_id: (type(t).__name__, t.table) for t in downstream.tasks}
    names = {t: t.replace(".", "_") for t in tables}
    assert tasks == {
        **{f"read_{n}": ("LogStoreReadVisibleOperator", t) for t, n in names.items()},
        **{f"catch_up_{n}": ("LogStoreVisibleCatchUpOperator", t) for t, n in names.items()},
    }
    for name in names.values():  # after the read, whatever became of it (a skipped read too)
        catch_up = downstream.get_task(f"catch_up_{name}")
        assert catch_up.upstream_task_ids == {f"read_{name}"} and catch_up.trigger_rule == "all_done"
    publish = dagbag.dags["logstore_publish"]
    assert _watched(publish) == {f"logstore.{t}.commits": ["LogStoreCommitTrigger"] for t in tables}
    assert publish.max_active_runs == 1
    assert publish.get_task("publish").upstream_task_ids == {"committed_tables"}


def test_the_streaming_example_is_supervised_and_retried(dagbag) -> None:
    dag = dagbag.dags["logstore_streaming"]
    stream = dag.get_task("stream")
    assert type(stream).__name__ == "LogStoreStreamingDualWriteOperator"
    assert stream.table == "demo.orders_stream" and stream.retries == 2
    assert stream.upstream_task_ids == {"create_table"}
    assert dag.max_active_runs == 1


def test_no_task_redeclares_a_watched_asset_without_its_watcher(dagbag) -> None:
    """Airflow keeps one definition per asset, the last it collects: a task's inlet or outlet ``Asset``
    of the same name without the watcher would drop the watcher (found on a real Airflow: the visible
    trigger never ran). Tasks name watched assets by reference."""
    from airflow.sdk import Asset

    for dag in dagbag.dags.values():
        condition = dag.timetable.asset_condition
        watched = {a.name for a in getattr(condition, "objects", ()) if getattr(a, "watchers", None)}
        for task in dag.tasks:
            for asset in [*task.inlets, *task.outlets]:
                if isinstance(asset, Asset) and asset.name in watched:
                    assert asset.watchers, f"{dag.dag_id}.{task.task_id} redeclares {asset.name}"


@pytest.mark.parametrize("dag_id", ["logstore_reconcile", "logstore_compaction"])
@pytest.mark.parametrize("now", ["2026-11-27T22:50:01Z", "2026-11-27T22:54:00Z", "2026-11-27T22:59:59Z"])
def test_maintenance_dags_start_paused_and_never_run_for_a_time_that_has_passed(
    dagbag, monkeypatch: pytest.MonkeyPatch, dag_id: str, now: str
) -> None:
    """``./dev airflow up`` must not run them on the demo's table at once: they start paused, and
    once unpaused their first run is the scheduler's next one after now, not the last one before it."""
    import airflow.timetables.trigger
    import pendulum
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    dag = dagbag.dags[dag_id]
    assert dag.is_paused_upon_creation is True
    at = pendulum.parse(now)
    monkeypatch.setattr(airflow.timetables.trigger, "utcnow", lambda: at)
    # what the scheduler computes for a DAG with no run yet (its DagModel.next_dagrun)
    first = LazyDeserializedDAG.from_dag(dag)._real_dag.next_dagrun_info(last_automated_run_info=None)
    assert first is not None and first.run_after == pendulum.datetime(2026, 11, 27, 23, tz="UTC")
