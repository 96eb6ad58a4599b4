"""What the cluster profile's single-process services share: a PID file, a start in its own process
group, a readiness loop that notices an early exit, and a stop by process group."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.services.local import _alive, _port_open, _tail

#: Set in every service process's environment: ``LocalCluster`` finds its processes by their state folder.
STATE_ENV = "LOGSTORE_SERVICE_STATE"


def read_pid(pid_file: Path, is_ours: Callable[[int], bool]) -> int | None:
    """The PID in ``pid_file`` when that process is alive and ``is_ours``, else None."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) and is_ours(pid) else None


def cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` ([] when it cannot be read)."""
    try:
        return [
            part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ]
    except OSError:
        return []


def ensure_port_free(port: int, what: str) -> None:
    if _port_open(port):
        raise ServiceError(
            f"port {port} on 127.0.0.1 is taken by another process; {what} cannot listen there"
        )


def spawn(
    command: Sequence[str],
    *,
    out_file: Path,
    cwd: Path,
    env: Mapping[str, str],
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session (its own process group), output appended to ``out_file``;
    as ``user`` (with that user's group only, none of ours) when given."""
    with open(out_file, "ab") as out:
        return subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
            env=dict(env),
            **as_user(user),
        )


def as_user(user: str | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a child as ``user`` and its primary group, no other group
    (without them a child of root keeps group 0 and root's supplementary groups)."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def wait_ready(
    name: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    process: subprocess.Popen[bytes] | None,
    log_file: Path,
    where: str,
) -> None:
    """Poll ``check`` until it is True; a ServiceError with the log's last lines if ``process`` exits
    first, or when ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServiceError(
                f"{name} exited with {process.returncode} before it was ready; "
                f"see {log_file}; last lines:\n{_tail(log_file)}"
            )
        if check():
            return
        time.sleep(0.2)
    raise ServiceError(
        f"{name} did not answer on {where} within {timeout:.0f}s; see {log_file}; "
        f"last lines:\n{_tail(log_file)}"
    )


def stop_group(pid: int, *, first: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
    """Signal ``pid``'s process group with ``first``, then SIGKILL after ``timeout``; wait until gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, first)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its children, in MiB (0 when it is gone)."""
    import psutil

    try:
        process = psutil.Process(pid)
        processes = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for item in processes:
        with contextlib.suppress(psutil.Error):
            total += item.memory_info().rss
    return total / 2**20
