"""Compaction without services: the policy from metadata numbers, expiry planning, orphan age, commit
retries, and the operator's arguments."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.compaction.policy import (
    DEFAULT_MAX_SNAPSHOT_AGE_MS,
    HOUR_MS,
    CompactionOptions,
    FileStats,
    RetentionPolicy,
    SnapshotInfo,
    evaluate_policy,
    orphan_cutoff,
    plan_expiry,
    rewrite_options,
    stats_from_files,
)
from airflow_logstore.core.properties import CompactionPolicy, parse_table_properties
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import CommitConflictError, OptionError
from airflow_logstore.operators.compaction import LogStoreCompactionOperator
from airflow_logstore.table.commit_retry import is_commit_conflict, retry_iceberg_commit

MB = 1024 * 1024
POLICY = CompactionPolicy(target_file_size=128 * MB, fragment_ratio=8, min_small_files=12, delete_ratio=0.1)


def files(data: list[tuple[int, int]], deletes: list[tuple[int, int]] = (), content: int = 1) -> list[Any]:
    """Rows as pyiceberg's ``inspect.files()`` gives them: (size, records) per file."""
    rows = [{"content": 0, "file_size_in_bytes": s, "record_count": r} for s, r in data]
    rows += [{"content": content, "file_size_in_bytes": s, "record_count": r} for s, r in deletes]
    return rows


def test_file_stats_count_small_files_bytes_and_deleted_rows() -> None:
    stats = stats_from_files(
        files([(1 * MB, 100), (15 * MB, 1000), (20 * MB, 2000)], [(2000, 30), (3000, 20)]),
        POLICY.small_file_size,
    )
    assert POLICY.small_file_size == 16 * MB
    assert (stats.data_files, stats.small_data_files, stats.small_data_bytes) == (3, 2, 16 * MB)
    assert (stats.data_bytes, stats.data_records) == (36 * MB, 3100)
    assert (stats.delete_files, stats.position_delete_files, stats.equality_delete_files) == (2, 2, 0)
    assert (stats.delete_bytes, stats.deleted_records) == (5000, 50)
    assert stats.delete_ratio == pytest.approx(50 / 3100)
    assert stats.to_dict()["files"] == 5 and stats.to_dict()["bytes"] == 36 * MB + 5000
    equality = stats_from_files(files([(MB, 10)], [(100, 5)], content=2), POLICY.small_file_size)
    assert (equality.equality_delete_files, equality.position_delete_files) == (1, 0)


def test_below_every_threshold_is_nothing_to_do_with_the_numbers() -> None:
    stats = stats_from_files(files([(MB, 100)] * 11, [(2000, 5)] * 3), POLICY.small_file_size)
    decision = evaluate_policy(stats, POLICY)
    assert not decision.compact and not decision.apply_deletes
    assert decision.summary == (
        "nothing to do: 11 small data files (< 16777216 bytes) < 12; 3 delete files < 12; "
        "delete ratio 0.014 <= 0.1"
    )
    assert decision.to_dict()["thresholds"]["small_file_size"] == 16 * MB


def test_small_files_over_the_trigger_compact_without_applying_deletes() -> None:
    stats = stats_from_files(files([(MB, 100)] * 12 + [(200 * MB, 10**6)]), POLICY.small_file_size)
    decision = evaluate_policy(stats, POLICY)
    assert decision.compact and not decision.apply_deletes
    assert decision.reasons == ("12 small data files (< 16777216 bytes) >= 12",)
    options = rewrite_options(decision)
    assert options["target-file-size-bytes"] == str(128 * MB)
    assert options["min-file-size-bytes"] == str(16 * MB)
    assert options["partial-progress.enabled"] == "false"
    assert "delete-file-threshold" not in options and "rewrite-all" not in options


def test_delete_files_or_ratio_over_the_trigger_apply_deletes() -> None:
    many_deletes = stats_from_files(files([(200 * MB, 10**6)], [(1000, 1)] * 12), POLICY.small_file_size)
    decision = evaluate_policy(many_deletes, POLICY)
    assert decision.compact and decision.apply_deletes
    assert decision.reasons == ("12 delete files >= 12",)
    assert rewrite_options(decision)["delete-file-threshold"] == "1"

    heavy = stats_from_files(files([(200 * MB, 1000)], [(5000, 101)]), POLICY.small_file_size)
    decision = evaluate_policy(heavy, POLICY)
    assert decision.compact and decision.apply_deletes
    assert decision.reasons == ("delete ratio 0.101 > 0.1",)


def test_one_small_file_is_never_worth_a_rewrite() -> None:
    lax = CompactionPolicy(target_file_size=128 * MB, min_small_files=1)
    decision = evaluate_policy(stats_from_files(files([(MB, 10)]), lax.small_file_size), lax)
    assert not decision.compact
    assert decision.reasons[0].endswith("< 2")


def test_disabled_and_forced() -> None:
    stats = stats_from_files(files([(MB, 100)] * 40, [(10, 50)] * 20), POLICY.small_file_size)
    off = CompactionPolicy(enabled=False)
    decision = evaluate_policy(stats, off)
    assert not decision.compact and decision.reasons[0] == "self-optimizing.enabled=false"
    forced = evaluate_policy(FileStats(data_files=1, data_bytes=10), POLICY, force=True)
    assert forced.compact and forced.forced and forced.reasons[0] == "forced"
    assert rewrite_options(forced, {"max-file-group-size-bytes": "1"})["rewrite-all"] == "true"
    assert rewrite_options(forced, {"max-file-group-size-bytes": "1"})["max-file-group-size-bytes"] == "1"


def test_policy_comes_from_the_self_optimizing_properties() -> None:
    config = parse_table_properties(
        {
            "self-optimizing.target-size": str(64 * MB),
            "self-optimizing.fragment-ratio": "4",
            "self-optimizing.minor.trigger.file-count": "3",
            "self-optimizing.major.trigger.duplicate-ratio": "0.5",
        }
    )
    policy = config.compaction
    assert (policy.target_file_size, policy.small_file_size, policy.min_small_files) == (64 * MB, 16 * MB, 3)
    stats = stats_from_files(files([(10 * MB, 10)] * 3), policy.small_file_size)
    assert evaluate_policy(stats, policy).compact
    overridden = CompactionOptions(target_file_size=32 * MB).policy(policy)
    assert (overridden.target_file_size, overridden.small_file_size, overridden.min_small_files) == (
        32 * MB,
        8 * MB,
        3,
    )


# -- retention ---------------------------------------------------------------------------------------

NOW = 10_000_000_000


def commit(batch: int) -> CommitInfo:
    return CommitInfo(writer_id="w", batch_id=batch, epoch=1, snapshot_id=batch)


def chain(*kinds: str, step_ms: int = 1000) -> list[SnapshotInfo]:
    """Snapshots 1..n, each the parent of the next, one second apart, ending one hour ago.

    ``d`` is a dual-write snapshot (positions, a commit), ``c`` a compaction one, ``f`` a foreign write.
    """
    start = NOW - HOUR_MS - step_ms * len(kinds)
    result = []
    for number, kind in enumerate(kinds, start=1):
        result.append(
            SnapshotInfo(
                snapshot_id=number,
                parent_id=number - 1 if number > 1 else None,
                timestamp_ms=start + number * step_ms,
                has_positions=kind == "d",
                operation={"d": "dual-write", "c": "compaction"}.get(kind),
                commit=commit(number) if kind == "d" else None,
            )
        )
    return result


def test_retention_policy_from_properties_and_options() -> None:
    assert RetentionPolicy.resolve({}) == RetentionPolicy(DEFAULT_MAX_SNAPSHOT_AGE_MS, 1)
    props = {"history.expire.max-snapshot-age-ms": "60000", "history.expire.min-snapshots-to-keep": "3"}
    assert RetentionPolicy.resolve(props) == RetentionPolicy(60000, 3)
    assert RetentionPolicy.resolve(props, 0, 1) == RetentionPolicy(0, 1)
    with pytest.raises(OptionError, match=r"history\.expire\.min-snapshots-to-keep"):
        RetentionPolicy.resolve({"history.expire.min-snapshots-to-keep": "many"})
    with pytest.raises(OptionError, match="min-snapshots-to-keep"):
        RetentionPolicy.resolve({}, None, 0)


def test_expiry_keeps_the_ancestor_a_compaction_snapshot_reads_its_positions_from() -> None:
    snapshots = chain("d", "d", "d", "c")
    plan = plan_expiry(snapshots, 4, RetentionPolicy(0, 1), NOW)
    assert plan.keep == (4, 3) and plan.kept_for_hybrid_reads == (3,)
    assert plan.expire == (2, 1)
    assert [c.batch_id for c in plan.expiring_commits] == [2, 1]
    assert plan.retain_last == 2
    # Iceberg keeps ancestors at least as young as this: the kept ones, whatever commits meanwhile.
    assert plan.older_than_ms == snapshots[2].timestamp_ms


def test_expiry_extends_past_compaction_and_foreign_snapshots_to_a_logstore_one() -> None:
    snapshots = chain("d", "d", "c", "f", "c", "d", "d")
    # Keep the newest 3 by policy: 7, 6, 5 -- 5 is a compaction snapshot: its positions come from 2.
    plan = plan_expiry(snapshots, 7, RetentionPolicy(0, 3), NOW)
    assert plan.keep == (7, 6, 5, 4, 3, 2)
    assert plan.kept_for_hybrid_reads == (4, 3, 2)
    assert plan.expire == (1,)


def test_expiry_by_age_and_nothing_to_expire() -> None:
    snapshots = chain("d", "d", "d", "d", step_ms=HOUR_MS)
    # Snapshots are 5, 4, 3, 2 hours old: a 3.5-hour age keeps the newest three.
    plan = plan_expiry(snapshots, 4, RetentionPolicy(int(3.5 * HOUR_MS), 1), NOW)
    assert plan.keep == (4, 3, 2) and plan.expire == (1,) and plan.kept_for_hybrid_reads == ()
    assert plan.older_than_ms == NOW - int(3.5 * HOUR_MS)
    young = plan_expiry(snapshots, 4, RetentionPolicy(DEFAULT_MAX_SNAPSHOT_AGE_MS, 1), NOW)
    assert young.expire == () and young.keep == (4, 3, 2, 1)
    empty = plan_expiry([], None, RetentionPolicy(0, 1), NOW)
    assert empty.keep == () and empty.expire == ()


def test_snapshots_outside_the_current_history_go_by_age() -> None:
    snapshots = chain("d", "d", "d")
    rolled_back = SnapshotInfo(99, 1, snapshots[1].timestamp_ms, True, "dual-write", commit(99))
    plan = plan_expiry([*snapshots, rolled_back], 3, RetentionPolicy(0, 1), NOW)
    assert plan.keep == (3,) and set(plan.expire) == {1, 2, 99}
    # a snapshot off main's line (a staging branch's leftover) was never committed: the ledger need
    # not hold it before it expires (else every lost compare-and-set would block expiry)
    assert 99 not in {c.snapshot_id for c in plan.expiring_commits}
    assert {c.snapshot_id for c in plan.expiring_commits} <= {1, 2}


def test_orphan_age_is_at_least_an_hour_unless_forced() -> None:
    assert orphan_cutoff(NOW, 3 * 24 * HOUR_MS) == NOW - 3 * 24 * HOUR_MS
    assert orphan_cutoff(NOW, HOUR_MS) == NOW - HOUR_MS
    with pytest.raises(OptionError, match="safe minimum"):
        orphan_cutoff(NOW, HOUR_MS - 1)
    assert orphan_cutoff(NOW, 0, allow_unsafe=True) == NOW
    with pytest.raises(OptionError):
        orphan_cutoff(NOW, -1, allow_unsafe=True)
    with pytest.raises(OptionError, match="orphan-age-ms"):
        CompactionOptions(orphan_age_ms=60_000).validate()
    with pytest.raises(OptionError, match="target-size"):
        CompactionOptions(target_file_size=0).validate()


# -- commit retries ----------------------------------------------------------------------------------


class FakeJava:
    """Stands for a py4j JavaObject of a Java exception."""

    def __init__(self, name: str, message: str, cause: FakeJava | None = None) -> None:
        self.name, self.message, self.cause = name, message, cause

    def getClass(self) -> Any:
        return type("C", (), {"getName": lambda _self: self.name})()

    def getMessage(self) -> str:
        return self.message

    def getCause(self) -> FakeJava | None:
        return self.cause


class FakePy4JError(Exception):
    def __init__(self, java: FakeJava) -> None:
        super().__init__("An error occurred while calling o68.sql.")
        self.java_exception = java


VALIDATION = "org.apache.iceberg.exceptions.ValidationException"


def conflict() -> FakePy4JError:
    wrapped = FakeJava(
        "java.lang.RuntimeException", "Cannot commit rewrite", FakeJava(VALIDATION, "missing data files")
    )
    return FakePy4JError(wrapped)


def test_conflicts_are_recognized_through_the_java_cause_chain() -> None:
    assert is_commit_conflict(conflict())
    assert is_commit_conflict(
        FakePy4JError(FakeJava("org.apache.iceberg.exceptions.CommitFailedException", ""))
    )
    assert not is_commit_conflict(FakePy4JError(FakeJava("java.lang.IllegalArgumentException", "bad")))
    unknown = FakeJava(
        "org.apache.iceberg.exceptions.CommitStateUnknownException", "?", FakeJava(VALIDATION, "")
    )
    assert not is_commit_conflict(FakePy4JError(unknown))  # may have committed: never retried blindly
    assert is_commit_conflict(RuntimeError(f"IllegalStateException: {VALIDATION}: Cannot commit"))
    assert not is_commit_conflict(ValueError("plain"))


def test_retry_runs_again_after_a_conflict_and_stops_when_committed() -> None:
    calls: list[int] = []
    waits: list[float] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise conflict()
        return "done"

    assert retry_iceberg_commit(attempt, committed=lambda: False, sleep=waits.append) == "done"
    assert len(calls) == 3 and len(waits) == 2

    calls.clear()
    committed_after_first = retry_iceberg_commit(attempt, committed=lambda: True, sleep=waits.append)
    assert committed_after_first is None and len(calls) == 1  # an earlier attempt did commit

    def broken() -> None:
        raise ValueError("not a conflict")

    with pytest.raises(ValueError):
        retry_iceberg_commit(broken, sleep=waits.append)

    def always() -> None:
        raise conflict()

    with pytest.raises(CommitConflictError, match="lost 2 commit races") as info:
        retry_iceberg_commit(always, attempts=2, what="batch 7", sleep=waits.append)
    assert "missing data files" in str(info.value)


# -- the operator ------------------------------------------------------------------------------------


def test_operator_arguments_accept_rendered_templates() -> None:
    operator = LogStoreCompactionOperator(
        task_id="compact",
        table="db.orders",
        dry_run="False",
        force="true",
        target_file_size="67108864",
        max_snapshot_age_ms=None,
        min_snapshots_to_keep="2",
        remove_orphans=False,
        rewrite_options={"max-file-group-size-bytes": "1073741824"},
    )
    assert {"table", "dry_run_value", "force", "target_file_size"} <= set(operator.template_fields)
    assert operator.application_args() == [
        "--table",
        "db.orders",
        "--max-attempts",
        "3",
        "--force",
        "--no-orphans",
        "--target-size",
        "67108864",
        "--min-snapshots-to-keep",
        "2",
        "--rewrite-option",
        "max-file-group-size-bytes=1073741824",
    ]
    dry = LogStoreCompactionOperator(task_id="dry", table="db.orders", dry_run="True")
    assert "--dry-run" in dry.application_args()
    with pytest.raises(ValueError, match="dry_run"):
        LogStoreCompactionOperator(task_id="bad", table="db.t", dry_run="perhaps").application_args()
    with pytest.raises(ValueError, match="target_file_size"):
        LogStoreCompactionOperator(task_id="bad2", table="db.t", target_file_size="big").application_args()


def test_an_expiring_commit_is_recorded_when_the_ledger_holds_it_with_its_epoch_or_retired() -> None:
    from airflow_logstore.compaction.policy import unrecorded_commits
    from airflow_logstore.core.checkpoint import RetiredBatches
    from airflow_logstore.core.control import ControlState

    kept, other_epoch, retired, absent = (CommitInfo("w", b, epoch=4) for b in (1, 2, 3, 4))
    state = ControlState(commits={kept.key: kept, other_epoch.key: CommitInfo("w", 2, epoch=9)})
    state.retired["w"] = RetiredBatches().add(3, 4)
    before = dict(state.commits)
    assert unrecorded_commits(state, [kept, other_epoch, retired, absent]) == [
        "w/2/4 (epoch 9)",
        "w/4/4 (missing)",
    ]
    assert state.commits == before
