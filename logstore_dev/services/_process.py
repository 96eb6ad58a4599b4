"""One lifecycle for every local service process: :class:`ManagedProcess`.

A service (the Kafka broker, PostgreSQL, moto, the REST catalog, a Spark daemon, an Airflow component)
is one process started detached in its own process group, its output appended to its log file and its
PID written to its PID file. It is found again by that PID when it is alive and :attr:`is_ours` (its
command line or environment names its state folder, so a recycled PID is never taken for it), waited
for until its readiness check passes (failing early, with its log's last lines, when it exits first),
and stopped by PID: a first signal to its group, SIGKILL after a timeout, until it is gone.

What differs per service stays with the service: its command, environment, readiness check and folders.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings, local_settings

#: Set in every service process's environment to its state folder: the process is recognised by it,
#: and ``LocalCluster`` finds its processes by their state folder.
STATE_ENV = "LOGSTORE_SERVICE_STATE"


class ManagedProcess:
    """One service process: started detached with its log file, found by its PID file, stopped by PID.

    :param name: how messages name it (``"moto's S3 server"``, ``"Kafka node 2 (127.0.0.1:9094, ...)"``)
    :param state_dir: its folder: named by :data:`STATE_ENV` in its environment, its default working folder
    :param pid_file: where its PID is kept
    :param log_file: where its output goes (appended)
    :param is_ours: whether a live PID read from ``pid_file`` is this service (not a recycled PID)
    :param more_logs: other log files of the service, tailed in errors too
    :param stop_signal: the first signal of :meth:`stop` (PostgreSQL: SIGINT, its fast shutdown)
    :param stop_descendants: stop every process below it as well (for children that leave its group);
        the other processes of its group are always stopped with it
    :param stop_timeout: how long :meth:`stop` waits after the first signal before SIGKILL
    """

    def __init__(
        self,
        name: str,
        *,
        state_dir: Path,
        pid_file: Path,
        log_file: Path,
        is_ours: Callable[[int], bool],
        more_logs: Sequence[Path] = (),
        stop_signal: signal.Signals = signal.SIGTERM,
        stop_descendants: bool = False,
        stop_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.state_dir = state_dir
        self.pid_file = pid_file
        self.log_file = log_file
        self.is_ours = is_ours
        self.more_logs = tuple(more_logs)
        self.stop_signal = stop_signal
        self.stop_descendants = stop_descendants
        self.stop_timeout = stop_timeout
        #: the process this object started last (None: none, or it was stopped since)
        self.started: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        """The PID in the PID file while that process is alive and ours, else None."""
        return read_pid(self.pid_file, self.is_ours)

    def launch(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | None = None,
        ports: Iterable[int | None] = (),
        port_hint: str = "",
        user: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in ``cwd`` (default: the state folder, created) with ``env`` plus
        :data:`STATE_ENV`; write the PID file. A ServiceError naming the port when one of ``ports`` is
        taken already."""
        for port in ports:
            if port:
                ensure_port_free(port, self.name, port_hint)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        process = spawn(
            command,
            out_file=self.log_file,
            cwd=cwd or self.state_dir,
            env={**env, STATE_ENV: str(self.state_dir)},
            user=user,
        )
        self.pid_file.write_text(str(process.pid))
        self.started = process
        return process

    def up(
        self,
        start: Callable[[], object],
        ready: Callable[[], bool],
        *,
        timeout: float,
        where: str,
        then: Callable[[], None] | None = None,
    ) -> bool:
        """Run ``start`` (which calls :meth:`launch`) unless the process runs already, wait until ``ready``,
        then run ``then``; stop what this call started when any of it fails. True when it started one."""
        starting = self.pid() is None
        if starting:
            start()
        try:
            self.wait_ready(ready, timeout=timeout, where=where)
            if then is not None:
                then()
        except ServiceError:
            if starting:
                self.stop()
            raise
        return starting

    def exit_problem(self) -> str | None:
        """How the process ended ("exited with 1"), or None while it runs."""
        if self.started is not None:
            code = self.started.poll()
            return None if code is None else f"exited with {code}"
        return "is not running" if self.pid() is None else None

    def wait_ready(self, ready: Callable[[], bool], *, timeout: float, where: str) -> None:
        """Poll ``ready`` until it is True; a ServiceError with the log's last lines when the process
        ends first, or after ``timeout``."""
        wait_for(
            lambda: None if ready() else "no answer",
            timeout=timeout,
            processes=[self],
            timed_out=lambda problem: self.failure(f"did not answer on {where} within {timeout:.0f}s"),
        )

    def stop(self, *, signal_first: signal.Signals | None = None, timeout: float | None = None) -> bool:
        """Stop the process by PID (``signal_first``, default :attr:`stop_signal`, to its group, then
        SIGKILL after ``timeout``, default :attr:`stop_timeout`) and remove the PID file; True when it
        was running."""
        return stop_together([self], signal_first=signal_first, timeout=timeout)[0]

    def kill(self) -> bool:
        """SIGKILL the process (a crash: no clean shutdown) and wait until it is gone; True when it ran."""
        return self.stop(signal_first=signal.SIGKILL)

    def failure(self, problem: str) -> str:
        """An error message: the process's name, ``problem``, and the last lines of its logs."""
        logs = (self.log_file, *self.more_logs)
        tails = "\n".join(tail(log) for log in logs)
        return f"{self.name} {problem}; see {' and '.join(map(str, logs))}; last lines:\n{tails}"


class PortService:
    """A local service of one :class:`ManagedProcess` on ``127.0.0.1:port`` with its state in ``state_dir``:
    the lifecycle PostgreSQL, the object store and the REST catalog share.

    A subclass names its process (:attr:`title`, :attr:`stem` of its PID file and log), and gives
    :meth:`_is_ours`, :meth:`_start` (which calls ``self.process.launch``), :meth:`_ready`, and what its
    status reports besides (:meth:`_details`). :meth:`up` is idempotent: a running service is only
    waited for. :meth:`down` stops it by PID.
    """

    #: ``status()["service"]``
    kind: ClassVar[str]
    #: how messages name the process
    title: ClassVar[str]
    #: the PID file and log are ``<state_dir>/<stem>.pid`` and ``<state_dir>/<stem>.log``
    stem: ClassVar[str]
    up_timeout: ClassVar[float] = 60.0
    stop_timeout: ClassVar[float] = 30.0
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(self, settings: LocalSettings | None, *, port: int, state_dir: Path) -> None:
        self.settings = settings or local_settings()
        self.port = port
        self.state_dir = Path(state_dir)
        self.pid_file = self.state_dir / f"{self.stem}.pid"
        self.log_file = self.state_dir / f"{self.stem}.log"
        self.process = ManagedProcess(
            self.title,
            state_dir=self.state_dir,
            pid_file=self.pid_file,
            log_file=self.log_file,
            is_ours=self._is_ours,
            stop_signal=self.stop_signal,
            stop_timeout=self.stop_timeout,
        )

    @property
    def where(self) -> str:
        """Where it answers, for messages."""
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The service's PID while it runs, else None."""
        return self.process.pid()

    def status(self) -> dict[str, Any]:
        pid = self.pid()
        return {
            "service": self.kind,
            "running": pid is not None and port_open(self.port),
            "pid": pid,
            **self._details(),
            "log_file": str(self.log_file),
        }

    def up(self, timeout: float | None = None) -> dict[str, Any]:
        """Start the service unless it runs already and wait until it is ready; a ServiceError with
        its log's last lines (and nothing left running that this call started) when it is not."""
        self.process.up(
            self._start,
            self._ready,
            timeout=self.up_timeout if timeout is None else timeout,
            where=self.where,
            then=self._after_ready,
        )
        return self.status()

    def down(self, timeout: float | None = None) -> bool:
        """Stop the service by PID (:attr:`stop_signal` to its process group, then SIGKILL); True when
        one was running. Its data stays in ``state_dir``."""
        return self.process.stop(timeout=timeout)

    def _is_ours(self, pid: int) -> bool:
        raise NotImplementedError

    def _start(self) -> None:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _after_ready(self) -> None:
        """What :meth:`up` does once the process answers (nothing by default)."""

    def _details(self) -> dict[str, Any]:
        return {}


def wait_for(
    problem: Callable[[], str | None],
    *,
    timeout: float,
    processes: Iterable[ManagedProcess],
    timed_out: Callable[[str], str],
    interval: float = 0.2,
) -> None:
    """Poll ``problem`` until it returns None (ready). A ServiceError with the process's
    :meth:`~ManagedProcess.failure` as soon as one of ``processes`` ends, or ``timed_out(last problem)``
    once ``timeout`` passes."""
    watched = list(processes)
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        for process in watched:
            ended = process.exit_problem()
            if ended is not None:
                raise ServiceError(process.failure(f"{ended} before it was ready"))
        found = problem()
        if found is None:
            return
        last = found
        if time.monotonic() >= deadline:
            raise ServiceError(timed_out(last))
        time.sleep(interval)


def stop_together(
    processes: Iterable[ManagedProcess],
    *,
    signal_first: signal.Signals | None = None,
    timeout: float | None = None,
) -> list[bool]:
    """Stop ``processes`` by PID: signal every one first (each its :attr:`~ManagedProcess.stop_signal`,
    or ``signal_first``), then wait for each, SIGKILL what is left after its timeout, and remove the PID
    files. True for each that was running. Together, because a member of a quorum that is shutting
    down waits for the others."""
    chosen = list(processes)
    stopping: list[tuple[ManagedProcess, int, list[int]]] = []
    for process in chosen:
        pid = process.pid()
        if pid is not None:
            family = family_of(pid, descendants=process.stop_descendants)
            _signal(pid, family[1:], signal_first or process.stop_signal)
            stopping.append((process, pid, family))
    for process, pid, family in stopping:
        _wait_gone(pid, family, process.stop_timeout if timeout is None else timeout)
    for process in chosen:
        process.pid_file.unlink(missing_ok=True)
        process.started = None
    running = {id(process) for process, _, _ in stopping}
    return [id(process) in running for process in chosen]


# -- processes ---------------------------------------------------------------------------------------


def read_pid(pid_file: Path, is_ours: Callable[[int], bool]) -> int | None:
    """The PID in ``pid_file`` when that process is alive and ``is_ours``, else None."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) and is_ours(pid) else None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting to be reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` ([] when it cannot be read)."""
    try:
        return [
            part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ]
    except OSError:
        return []


def has_env(pid: int, key: str, value: str) -> bool:
    """Whether process ``pid`` was started with ``key=value`` in its environment."""
    if not Path("/proc/self/environ").exists():
        return True  # not Linux: trust the pid file
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    except OSError:
        return True  # not readable: trust the pid file
    # empty while the process execs (spark-class becomes java): trust the pid file then
    return environ == [b""] or f"{key}={value}".encode() in environ


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


def _wait_gone(group: int, family: Sequence[int], timeout: float) -> None:
    """Wait until ``family`` (signalled already) is gone; SIGKILL what is left of it and of its
    process ``group`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in family if alive(p)]
    if left:
        _signal(group, left, signal.SIGKILL)
        while any(alive(p) for p in family):
            time.sleep(0.05)


def family_of(pid: int, *, descendants: bool = False) -> list[int]:
    """``pid``, the other processes of its process group, and with ``descendants`` every process below
    it (children that left the group too), from /proc; ``[pid]`` elsewhere."""
    table = _processes()
    members = [other for other, (_, group) in table.items() if group == pid and other != pid]
    below = _descendants(pid, table) if descendants else []
    return [pid, *dict.fromkeys([*members, *below])]


def _processes() -> dict[int, tuple[int, int]]:
    """Every process's (parent, process group), from /proc."""
    table: dict[int, tuple[int, int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))
    return table


def _descendants(pid: int, table: Mapping[int, tuple[int, int]]) -> list[int]:
    found, frontier = [], {pid}
    while frontier:
        children = [child for child, (parent, _) in table.items() if parent in frontier]
        found += children
        frontier = set(children)
    return found


def _signal(group: int, pids: Sequence[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


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


# -- ports, logs, Java -------------------------------------------------------------------------------


def port_open(port: int) -> bool:
    """Whether something listens on ``127.0.0.1:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def ensure_port_free(port: int, what: str, hint: str = "") -> None:
    """A ServiceError naming ``port`` when another process listens there already."""
    if port_open(port):
        raise ServiceError(
            f"port {port} on 127.0.0.1 is taken by another process; {hint or f'{what} cannot listen there'}"
        )


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of ``path`` ("" when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def java_tmpdir(folder: Path) -> str:
    """The JVM option that puts a Java process's temporary files in ``folder`` (made here): the native
    libraries the JVM unpacks (LZ4, Snappy, SQLite) and the like. A process that is killed leaves them
    behind; in its own folder they go with its state, not into the machine's temp dir."""
    folder.mkdir(parents=True, exist_ok=True)
    return f"-Djava.io.tmpdir={folder}"


def java() -> str:
    """The ``java`` of ``JAVA_HOME``, else of PATH."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise ServiceError("Java (17 or newer) is needed to run the Kafka broker and Spark; install it")
    return found
