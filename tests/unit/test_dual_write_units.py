"""Pure parts of the dual-write job: task tags and pause points."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflow_logstore.pause import InjectedFailure, fail_once, on_pause, pause_point
from airflow_logstore.spark.dual_write import task_identity


def test_task_tags_differ_between_a_stage_retry_and_the_first_run() -> None:
    """Spark reuses attempt number 0 when it resubmits a stage; the task attempt id is new."""
    first_run, stage_retry = task_identity(3, 17), task_identity(3, 42)
    assert first_run == "3.17" and stage_retry == "3.42"
    assert first_run != stage_retry


def test_pause_point_calls_the_registered_hook_only_inside_the_block() -> None:
    calls: list[str] = []
    with on_pause("commit:decided", lambda: calls.append("hit")):
        pause_point("commit:decided")
        pause_point("publish:offsets-read")
    pause_point("commit:decided")
    assert calls == ["hit"]


def test_pause_point_holds_a_thread_until_released() -> None:
    reached, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        reached.set()
        release.wait(10)

    def actor() -> None:
        pause_point("commit:decided")
        done.set()

    with on_pause("commit:decided", hold):
        thread = threading.Thread(target=actor)
        thread.start()
        assert reached.wait(10)
        assert not done.is_set()
        release.set()
        thread.join(10)
    assert done.is_set()


def test_file_pause_point_waits_for_its_release_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSTORE_PAUSE_AT", "commit:decided")
    monkeypatch.setenv("LOGSTORE_PAUSE_DIR", str(tmp_path))
    (tmp_path / "commit_decided.release").write_text("")
    pause_point("commit:decided")
    assert (tmp_path / "commit_decided.reached").exists()


def test_file_pause_point_without_a_folder_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSTORE_PAUSE_AT", "commit:decided")
    monkeypatch.delenv("LOGSTORE_PAUSE_DIR", raising=False)
    with pytest.raises(RuntimeError, match="LOGSTORE_PAUSE_DIR is unset"):
        pause_point("commit:decided")


def test_failure_point_fails_exactly_once_per_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSTORE_FAIL_ONCE_AT", "produce:flushed")
    monkeypatch.setenv("LOGSTORE_PAUSE_DIR", str(tmp_path))
    fail_once("commit:decided")  # not named: nothing happens
    with pytest.raises(InjectedFailure, match="produce:flushed"):
        fail_once("produce:flushed")
    fail_once("produce:flushed")  # the second time passes
    assert (tmp_path / "produce_flushed.failed").exists()
