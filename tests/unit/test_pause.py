"""``airflow_logstore.pause``: pause points, failure points and kill points, the one way tests stop, fail
or kill an actor at a named step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from airflow_logstore.core.reconcile import STAGES
from airflow_logstore.pause import (
    KILL_POINTS,
    InjectedFailure,
    KillPointError,
    fail_once,
    kill_point,
    kill_points,
    on_pause,
    pause_point,
)


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


# -- kill points -----------------------------------------------------------------------------------------


def test_kill_points_parse_a_point_with_its_batch_or_a_stage() -> None:
    assert kill_points("write:after-log:2, reconcile:output-flushed") == {
        ("write:after-log", 2),
        ("reconcile:output-flushed", None),
    }
    assert kill_points("write:after-commit:-1") == {("write:after-commit", -1)}
    assert kill_points("") == frozenset()


@pytest.mark.parametrize(
    "text",
    [
        "after-log:2",  # no actor
        "write:after-log",  # a writer's point needs its batch
        "write:after-log:x",
        "write:after-log:",
        "write:after-log:--2",
        "write:after-log:\u00b2",  # a digit to str.isdigit, not to int()
        "write:before-log:1",
        "reconcile:planned:1",  # a reconciler's stage has no batch
        "reconcile:planed",
    ],
)
def test_a_value_that_names_no_kill_point_is_an_error_that_lists_them(text: str) -> None:
    with pytest.raises(KillPointError, match=rf"^LOGSTORE_KILL_AT: '{text}' is not a kill point; ") as error:
        kill_points(f"reconcile:planned,{text}")
    assert "write:after-log:<batch>, write:after-commit:<batch>, reconcile:lease-acquired" in str(error.value)


def test_a_bad_value_is_a_logstore_error_that_no_retry_can_fix() -> None:
    """A LogStore error: jobs print it in one line, operators fail without retries (a plain ValueError
    would count as retryable, and Airflow would run the misconfigured task again)."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_logstore.exceptions import classify
    from airflow_logstore.operators._failures import fail_fast

    with pytest.raises(KillPointError) as error:
        kill_points("write:after-log")
    assert isinstance(error.value, ValueError) and classify(error.value) == ("KillPointError", False)
    failed = pytest.raises(AirflowFailException, match="KillPointError: LOGSTORE_KILL_AT: 'write:after-log'")
    with failed, fail_fast():
        kill_points("write:after-log")


def test_the_reconcilers_kill_points_are_its_stages() -> None:
    assert [name for name in KILL_POINTS if name.startswith("reconcile:")] == [
        f"reconcile:{s}" for s in STAGES
    ]


def test_a_kill_point_kills_only_at_its_point_and_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.delenv("LOGSTORE_KILL_AT", raising=False)
    kill_point("write:after-log", 2)  # nothing named: nothing happens
    monkeypatch.setenv("LOGSTORE_KILL_AT", "write:after-log:2")
    kill_point("write:after-log", 1)
    kill_point("write:after-commit", 2)
    assert killed == []
    kill_point("write:after-log", 2)
    assert killed == [(os.getpid(), signal.SIGKILL)]


def test_a_bad_value_fails_at_the_first_kill_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGSTORE_KILL_AT", "after-log:2")
    with pytest.raises(KillPointError, match="'after-log:2' is not a kill point"):
        kill_point("write:after-log", 1)


def test_a_kill_point_sigkills_its_process() -> None:
    """A real process: dead by SIGKILL at batch 2, after it went past batch 1 (nothing after runs)."""
    script = (
        "from airflow_logstore.pause import kill_point\n"
        "for batch in (1, 2, 3):\n"
        "    kill_point('write:after-log', batch)\n"
        "    print('past', batch, flush=True)\n"
    )
    env = {**os.environ, "LOGSTORE_KILL_AT": "write:after-log:2"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.splitlines() == ["past 1"]
