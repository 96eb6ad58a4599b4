"""The user's own folders in the temporary directory, and the files killed tasks leave there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_logstore.operators._spark import write_properties_file
from airflow_logstore.tempdirs import (
    ORPHAN_AGE_S,
    UnsafeFolderError,
    private_folder,
    process_file,
    remove_orphans,
)


def gone_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_private_folder_is_made_for_this_user_only(tmp_path: Path) -> None:
    folder = private_folder("logstore-x", tmp_path)

    assert folder == tmp_path / f"logstore-x-{os.getuid()}"
    assert folder.stat().st_mode & 0o777 == 0o700
    assert private_folder("logstore-x", tmp_path) == folder  # an existing one of this user is kept


def test_an_existing_folder_of_the_user_that_only_it_can_write_is_accepted(tmp_path: Path) -> None:
    folder = tmp_path / f"logstore-x-{os.getuid()}"
    folder.mkdir(mode=0o755)  # as earlier versions made it
    folder.chmod(0o755)

    assert private_folder("logstore-x", tmp_path) == folder


def test_a_folder_of_the_user_others_could_write_is_made_private_and_emptied(tmp_path: Path) -> None:
    """Earlier versions made the zip's folder with the user's umask (0775 with umask 002): anyone who
    could write there could have put a zip in it, so its files go."""
    folder = tmp_path / f"logstore-x-{os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    (folder / "airflow_logstore-0.1.0-0123456789abcdef.zip").write_text("planted")
    (folder / "link.zip").symlink_to(tmp_path / "elsewhere.zip")

    assert private_folder("logstore-x", tmp_path) == folder

    assert folder.stat().st_mode & 0o777 == 0o700
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("kind", ["symbolic link", "another user's"])
def test_a_folder_others_could_change_is_refused(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / f"logstore-x-{os.getuid()}"
    if kind == "symbolic link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
        expected = "is not a folder"
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        folder.mkdir(mode=0o700)
        os.chown(folder, 65534, 65534)
        expected = "belongs to user id 65534"

    with pytest.raises(UnsafeFolderError, match=expected) as raised:
        private_folder("logstore-x", tmp_path)
    assert str(folder) in str(raised.value)
    assert "set TMPDIR to a folder of your own" in str(raised.value)


def test_the_files_of_processes_that_are_gone_are_removed_once_old(tmp_path: Path) -> None:
    dead = gone_pid()
    old = time.time() - ORPHAN_AGE_S - 5
    orphan = tmp_path / f"{dead}-abc.properties"
    fresh_orphan = tmp_path / f"{dead}-def.properties"  # maybe a live process of another PID namespace
    other_suffix = tmp_path / f"{dead}-ghi.zip"
    not_a_pid = tmp_path / "spark-abc.properties"
    for path in (orphan, fresh_orphan, other_suffix, not_a_pid):
        path.write_text("secret=1\n")
    for path in (orphan, other_suffix, not_a_pid):
        os.utime(path, (old, old))
    fd, mine = process_file(tmp_path, ".properties")  # this process's own, live
    os.close(fd)
    os.utime(mine, (old, old))

    removed = remove_orphans(tmp_path, ".properties")

    assert removed == [orphan]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (fresh_orphan, other_suffix, not_a_pid, Path(mine))
    )
    assert Path(mine).name.startswith(f"{os.getpid()}-")
    assert Path(mine).stat().st_mode & 0o777 == 0o600


def test_a_task_writing_its_properties_removes_what_a_killed_task_left(tmp_path: Path) -> None:
    """A task killed before its ``finally`` (SIGKILL) leaves its properties file with its secrets; the
    next task's write removes it."""
    folder = private_folder("logstore-submit", tmp_path)
    killed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time; from pathlib import Path;"
            "from airflow_logstore.operators._spark import write_properties_file;"
            "print('written', write_properties_file({'spark.secret': 'canary-7'}, Path(sys.argv[1])),"
            " flush=True);"
            "time.sleep(600)",
            str(folder),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killed.stdout is not None
    # (Airflow may log a deprecation warning on stdout first, as with the lowest versions)
    line = next(line for line in killed.stdout if line.startswith("written "))
    left = Path(line.removeprefix("written ").strip())
    killed.kill()
    killed.wait()
    assert left.read_text() == "spark.secret=canary-7\n"  # what the killed task left
    old = time.time() - ORPHAN_AGE_S - 5
    os.utime(left, (old, old))

    path = Path(write_properties_file({"spark.other": "x"}, folder))

    assert not left.exists()
    assert [p.name for p in folder.iterdir()] == [path.name]
    assert path.read_text() == "spark.other=x\n"
