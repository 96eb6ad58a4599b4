"""The OS user's own folders in the temporary directory, and the files killed tasks leave in them.

A folder with a predictable name in a shared ``/tmp`` can be made first by another user, who could then
swap the files placed in it (the code executors run, a job's settings). :func:`private_folder` creates
the folder, or accepts an existing one only when it is a real folder of this user (one that others could
write to, as earlier versions made it with the user's umask, is made private and emptied of its files);
anything else is an error naming the folder.

A task that is killed (SIGKILL, a lost worker) cannot delete the file it made, which then holds its
secrets until the machine is cleaned: :func:`remove_orphans` removes the files of processes that are
gone, named ``<pid>-...`` by :func:`process_file`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from pathlib import Path

from airflow_logstore.exceptions import LogStoreError

#: a file of a process that is gone is removed once it is this old: the process it names may live in
#: another PID namespace (a container) with the same temporary directory, and spark-submit reads its
#: properties file within its first seconds
ORPHAN_AGE_S = 600.0


class UnsafeFolderError(LogStoreError):
    """A folder LogStore keeps its files in belongs to another user, or is not a folder (a link)."""

    retryable = False


def private_folder(name: str, base: Path | None = None) -> Path:
    """``<temp dir>/<name>-<uid>``, created with mode 0700 if missing; made so, without its files, if
    group or others could write to it.

    :raises UnsafeFolderError: it exists and is not a folder of this user (or is a symbolic link).
    """
    folder = (base or Path(tempfile.gettempdir())) / f"{name}-{os.getuid()}"
    with contextlib.suppress(FileExistsError):  # checked below either way
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    problem = None
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a folder (a symbolic link or a file)"
    elif info.st_uid != os.getuid():
        problem = f"belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & 0o022:  # made so by an earlier version, with the user's umask
        _make_private(folder)
    if problem:
        raise UnsafeFolderError(
            f"{folder} {problem}: LogStore keeps files there that others must not change; remove it "
            "(it is made again) or set TMPDIR to a folder of your own"
        )
    return folder


def _make_private(folder: Path) -> None:
    """Mode 0700, and none of the files others could have put or replaced while they could write there
    (each is made again when needed)."""
    folder.chmod(0o700)
    for path in folder.iterdir():
        if not path.is_dir() or path.is_symlink():
            path.unlink()


def process_file(folder: Path, suffix: str) -> tuple[int, str]:
    """A new 0600 file ``<pid>-<random><suffix>`` in ``folder``: its descriptor and path."""
    return tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=suffix, dir=folder)


def remove_orphans(folder: Path, suffix: str) -> list[Path]:
    """Remove the ``<pid>-...<suffix>`` files in ``folder`` whose process is gone (older than
    :data:`ORPHAN_AGE_S`); return them."""
    now = time.time()
    removed = []
    for path in folder.glob(f"*-*{suffix}"):
        pid = path.name.split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if now - path.stat().st_mtime < ORPHAN_AGE_S:
                continue
            path.unlink()
        except FileNotFoundError:  # another task removed it first
            continue
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
