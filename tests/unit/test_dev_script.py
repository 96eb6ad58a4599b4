"""``./dev`` refuses to start on a disk without room, before it installs or runs anything.

A full disk makes the tools fail in ways that do not name it (mypy's INTERNAL ERROR when its cache cannot
be written, once in CI), so the two set-up commands check the free space first. ``df`` and ``stat`` are
replaced here by scripts that report a chosen free space and file system for each folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from airflow_logstore.settings import SOURCE_ROOT

GIB_KIB = 1024 * 1024


def fake_tools(folder: Path, free_gib: dict[str, int], devices: dict[str, int]) -> Path:
    """``df -Pk PATH`` reports ``free_gib[PATH]``; ``stat -c %d PATH`` reports ``devices[PATH]``."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    df_cases = "".join(f'  "{path}") free={gib * GIB_KIB} ;;\n' for path, gib in free_gib.items())
    stat_cases = "".join(f'  "{path}") echo {device} ;;\n' for path, device in devices.items())
    scripts = {
        "df": f'case "$2" in\n{df_cases}  *) exit 3 ;;\nesac\n'
        'echo "Filesystem 1024-blocks Used Available Capacity Mounted on"\n'
        'echo "fake 999999999 0 $free 0% /"\n',
        "stat": f'case "$3" in\n{stat_cases}  *) exit 3 ;;\nesac\n',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return bin_dir


def run_dev(
    command: str,
    bin_dir: Path,
    tmpdir: Path,
    extra_env: dict[str, str] | None = None,
    script: Path = SOURCE_ROOT / "dev",
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TMPDIR": str(tmpdir),
        **(extra_env or {}),
    }
    # its own process group: if the check let the command through, the test stops all it started
    process = subprocess.Popen(
        [str(script), command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"./dev {command} went on past its disk check")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_dev_test_stops_first_when_the_disk_is_full(tmp_path: Path) -> None:
    root = str(SOURCE_ROOT)
    tools = fake_tools(tmp_path, {root: 1, str(tmp_path): 1}, {root: 7, str(tmp_path): 7})

    result = run_dev("test", tools, tmp_path)

    assert result.returncode == 1, result.stderr
    assert "[dev] not enough disk space for ./dev test: 1 GiB free on the file system of " + root in (
        result.stderr
    )
    # it stopped before the first tool ran
    assert "[dev] ruff" not in result.stderr
    assert "[dev] installing" not in result.stderr


def test_dev_test_names_a_temp_dir_on_another_disk_without_room(tmp_path: Path) -> None:
    root = str(SOURCE_ROOT)
    tools = fake_tools(tmp_path, {root: 500, str(tmp_path): 2}, {root: 7, str(tmp_path): 8})

    result = run_dev("test", tools, tmp_path)

    assert result.returncode == 1, result.stderr
    assert f"2 GiB free on the file system of {tmp_path}, and it needs about 3 GiB more there" in (
        result.stderr
    )
    assert "or set TMPDIR to a folder on another disk" in result.stderr
    assert "[dev] ruff" not in result.stderr


def test_dev_demo_stops_first_when_the_disk_is_full(tmp_path: Path) -> None:
    root, home = str(SOURCE_ROOT), str(tmp_path / "home")
    tools = fake_tools(tmp_path, {root: 0, home: 0}, {root: 7, home: 7})

    result = run_dev("demo", tools, tmp_path, {"LOGSTORE_HOME": home})

    assert result.returncode == 1, result.stderr
    assert f"[dev] not enough disk space for ./dev demo: 0 GiB free on the file system of {root}" in (
        result.stderr
    )
    assert f"1 GiB in {home} while it runs" in result.stderr


def test_a_clean_clone_needs_the_whole_install(tmp_path: Path) -> None:
    """A clean clone has no .venv and no .cache yet: all of the install counts (and the check still
    speaks: ``du`` fails on the missing folders, which must not end the script silently)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(SOURCE_ROOT / "dev", clone / "dev")
    temp = tmp_path / "tmp"
    temp.mkdir()
    tools = fake_tools(tmp_path, {str(clone): 11, str(temp): 11}, {str(clone): 7, str(temp): 7})

    result = run_dev("test", tools, temp, script=clone / "dev")

    assert result.returncode == 1, result.stderr
    assert (
        f"[dev] not enough disk space for ./dev test: 11 GiB free on the file system of {clone}, and it "
        "needs about 12 GiB more there (9 GiB for .venv and .cache, of which 0 are there"
    ) in result.stderr
    assert not (clone / ".venv").exists()
