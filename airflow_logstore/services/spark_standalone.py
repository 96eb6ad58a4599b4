"""A Spark standalone master and its workers on 127.0.0.1, from the pyspark wheel, for the cluster profile.

The wheel has ``bin/spark-class`` but no ``sbin`` start scripts, so each daemon is started as
``spark-class org.apache.spark.deploy.{master.Master,worker.Worker} ...`` in its own process group,
with its PID file and log under ``state_dir`` (``master/``, ``worker-<i>/``), and stopped by PID.

Each worker gets its own environment, as a separate host would have: its own work dir
(``SPARK_WORKER_DIR``), scratch dir (``SPARK_LOCAL_DIRS``) and ``LOGSTORE_HOME``
(``worker-<i>/home``), so nothing can rely on a folder shared with the driver.

Executors' Python: a PySpark driver sends its own ``PYSPARK_PYTHON`` (default ``python3``) with every
task, and executors run that command. ``PYSPARK_PYTHON`` in a worker's environment is therefore only
a default for tools run there; what makes the workers' choice count is that their ``PATH`` starts with
``<state_dir>/bin``, where ``python3`` and ``python`` run ``python`` (default: this interpreter). A
driver without ``PYSPARK_PYTHON`` thus gets the workers' interpreter; a driver that sets it wins.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.services.local import _alive, _port_open, _tail
from airflow_logstore.services.topology import SparkCluster
from airflow_logstore.settings import LocalSettings

DAEMON_MEMORY = "256m"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MARKER = "LOGSTORE_SPARK_DAEMON"


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    running: bool
    pid: int | None
    port: int
    log_file: Path

    def describe(self) -> str:
        state = f"running (pid {self.pid})" if self.running else "stopped"
        return f"spark {self.name} {state}, web UI on 127.0.0.1:{self.port}; log {self.log_file}"


@dataclass(frozen=True)
class SparkClusterStatus:
    master: DaemonStatus
    workers: tuple[DaemonStatus, ...]

    @property
    def running(self) -> bool:
        return self.master.running and all(worker.running for worker in self.workers)

    def describe(self) -> str:
        return "\n".join(daemon.describe() for daemon in (self.master, *self.workers))


class _Daemon:
    """One Spark daemon: its folder, PID file and log; started in its own process group."""

    def __init__(self, name: str, folder: Path, ui_port: int) -> None:
        self.name = name
        self.folder = folder
        self.ui_port = ui_port
        self.pid_file = folder / f"{name.split('-')[0]}.pid"
        self.log_file = folder / f"{name.split('-')[0]}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        """The daemon's pid while it runs (and is ours: its environment names this folder)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) and _has_env(pid, _MARKER, str(self.folder)) else None

    def status(self) -> DaemonStatus:
        pid = self.pid()
        return DaemonStatus(self.name, pid is not None, pid, self.ui_port, self.log_file)

    def launch(self, command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``command`` with ``env`` plus the marker that identifies this daemon's process
        (in its environment, which survives spark-class's exec of java)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            process = subprocess.Popen(
                list(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.folder,
                env={**env, _MARKER: str(self.folder)},
            )
        self.pid_file.write_text(str(process.pid))
        self.process = process
        return process

    def exited(self) -> bool:
        """Whether the daemon is gone (the process we started has ended, or its pid is not running)."""
        if self.process is not None:
            return self.process.poll() is not None
        return self.pid() is None

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> bool:
        """Signal the process group and every descendant; SIGKILL what is left after ``timeout``.

        True when the daemon was running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        family = [pid, *_descendants(pid)]  # PySpark's daemon leaves the group: signal it by pid
        _signal(pid, family, sig)
        deadline = time.monotonic() + timeout
        while any(_alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal(pid, [p for p in family if _alive(p)], signal.SIGKILL)
        while any(_alive(p) for p in family):
            time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def failure(self, problem: str) -> str:
        return (
            f"Spark {self.name} (web UI 127.0.0.1:{self.ui_port}) {problem}; see {self.log_file}; "
            f"last lines:\n{_tail(self.log_file)}"
        )


class LocalSparkCluster:
    """The standalone master and ``spark.workers`` workers of ``spark``, with state under ``state_dir``."""

    def __init__(
        self,
        settings: LocalSettings,
        spark: SparkCluster,
        state_dir: Path,
        python: str | None = None,
        *,
        daemon_memory: str = DAEMON_MEMORY,
    ) -> None:
        if len(spark.worker_ui_ports) != spark.workers:
            raise ValueError(
                f"{spark.workers} workers need as many web UI ports, got {spark.worker_ui_ports}"
            )
        self.settings = settings
        self.spark = spark
        self.state_dir = state_dir
        self.python = python or sys.executable
        self.daemon_memory = daemon_memory
        self.master = _Daemon("master", state_dir / "master", spark.master_ui_port)
        self.workers = [
            _Daemon(f"worker-{i}", state_dir / f"worker-{i}", port)
            for i, port in enumerate(spark.worker_ui_ports)
        ]

    @property
    def master_url(self) -> str:
        return self.spark.master_url()

    @property
    def worker_pids(self) -> list[int | None]:
        """Each worker's pid (None when it is not running), by worker index."""
        return [worker.pid() for worker in self.workers]

    def status(self) -> SparkClusterStatus:
        return SparkClusterStatus(self.master.status(), tuple(worker.status() for worker in self.workers))

    # -- lifecycle -----------------------------------------------------------------------------------

    def up(self, timeout: float = 120.0) -> SparkClusterStatus:
        """Start the master and every worker not running yet; return once the master lists every
        worker as ALIVE. Idempotent: running daemons are left alone."""
        started: list[_Daemon] = []
        try:
            if self.master.pid() is None:
                self._check_free(self.master, self.spark.master_port, self.spark.master_ui_port)
                self.master.launch(self._master_command(), self._master_env())
                started.append(self.master)
            self._wait_master(timeout, self.master)
            for i, worker in enumerate(self.workers):
                if worker.pid() is None:
                    self._launch_worker(i)
                    started.append(worker)
            self._wait_workers(timeout, range(len(self.workers)))
        except ServiceError:
            for daemon in reversed(started):
                daemon.stop(timeout=5)
            raise
        return self.status()

    def down(self, timeout: float = 30.0) -> bool:
        """Stop the workers (with their executors), then the master, by pid; True when one ran."""
        stopped = [worker.stop(timeout=timeout) for worker in self.workers]
        return self.master.stop(timeout=timeout) or any(stopped)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and its executors (and their Python workers), as a lost host."""
        if not self.workers[i].stop(signal.SIGKILL, timeout=10):
            raise ServiceError(self.workers[i].failure("is not running"))

    def start_worker(self, i: int, timeout: float = 120.0) -> DaemonStatus:
        """Start worker ``i`` unless it runs; return once the master lists it as ALIVE."""
        if self.workers[i].pid() is None:
            self._launch_worker(i)
        self._wait_workers(timeout, [i])
        return self.workers[i].status()

    def _launch_worker(self, i: int) -> None:
        worker = self.workers[i]
        self._check_free(worker, worker.ui_port)
        worker.launch(self._worker_command(i), self._worker_env(i))

    # -- commands and environments -------------------------------------------------------------------

    def _master_command(self) -> list[str]:
        return [
            str(_spark_home() / "bin" / "spark-class"),
            _MASTER_CLASS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.spark.master_port),
            "--webui-port",
            str(self.spark.master_ui_port),
        ]

    def _worker_command(self, i: int) -> list[str]:
        return [
            str(_spark_home() / "bin" / "spark-class"),
            _WORKER_CLASS,
            self.master_url,
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.spark.worker_cores),
            "--memory",
            self.spark.worker_memory,
            "--webui-port",
            str(self.workers[i].ui_port),
            "--work-dir",
            str(self.workers[i].folder),
        ]

    def _base_env(self) -> dict[str, str]:
        """The daemons' common environment: loopback only, small heaps, no conf from elsewhere."""
        inherited = {
            k: v for k, v in os.environ.items() if not k.startswith(("LOGSTORE_", "SPARK_", "PYSPARK_"))
        }
        conf = self.state_dir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        return {
            **inherited,
            "SPARK_HOME": str(_spark_home()),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
        }

    def _master_env(self) -> dict[str, str]:
        return self._base_env()

    def _worker_env(self, i: int) -> dict[str, str]:
        """Worker ``i``'s own environment (inherited by its executors), as on a host of its own."""
        folder = self.workers[i].folder
        env = self._base_env()
        env.update(
            {
                "SPARK_WORKER_DIR": str(folder),
                "SPARK_LOCAL_DIRS": str(folder / "local"),
                "LOGSTORE_HOME": str(folder / "home"),
                "LOGSTORE_CACHE": str(self.settings.cache),
                "PYSPARK_PYTHON": self.python,
                "PATH": f"{self._python_shims()}{os.pathsep}{env.get('PATH', '')}",
            }
        )
        (folder / "home").mkdir(parents=True, exist_ok=True)
        return env

    def _python_shims(self) -> Path:
        """A folder whose ``python3`` and ``python`` run :attr:`python` (a driver's default is python3)."""
        folder = self.state_dir / "bin"
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("python3", "python"):
            shim = folder / name
            shim.write_text(f'#!/bin/sh\nexec "{self.python}" "$@"\n')
            shim.chmod(0o755)
        return folder

    # -- readiness -----------------------------------------------------------------------------------

    def _check_free(self, daemon: _Daemon, *ports: int) -> None:
        for port in ports:
            if _port_open(port):
                raise ServiceError(
                    f"Spark {daemon.name}: port {port} on 127.0.0.1 is taken by another process"
                )

    def master_state(self) -> dict[str, object]:
        """The master's JSON status page (workers, applications)."""
        url = f"http://127.0.0.1:{self.spark.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            state: dict[str, object] = json.load(response)
        return state

    def _wait_master(self, timeout: float, master: _Daemon) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if master.exited():
                raise ServiceError(master.failure("exited"))
            with contextlib.suppress(OSError, ValueError):
                self.master_state()
                return
            time.sleep(0.3)
        raise ServiceError(master.failure(f"did not answer within {timeout:.0f}s"))

    def _wait_workers(self, timeout: float, indexes: Sequence[int]) -> None:
        """Wait until the master lists worker ``i`` (by its web UI port) as ALIVE, for each index."""
        deadline = time.monotonic() + timeout
        while True:
            for i in indexes:
                if self.workers[i].exited():
                    raise ServiceError(self.workers[i].failure("exited"))
            missing = [i for i in indexes if self.workers[i].ui_port not in self._alive_worker_ports()]
            if not missing:
                return
            if time.monotonic() > deadline:
                worker = self.workers[missing[0]]
                raise ServiceError(
                    worker.failure(f"was not ALIVE at the master {self.master_url} within {timeout:.0f}s")
                )
            time.sleep(0.3)

    def _alive_worker_ports(self) -> set[int]:
        """The web UI ports of the workers the master lists as ALIVE (empty when it does not answer)."""
        try:
            workers = self.master_state().get("workers", [])
        except (OSError, ValueError):
            return set()
        ports = set()
        for worker in workers if isinstance(workers, list) else []:
            if worker.get("state") == "ALIVE":
                with contextlib.suppress(ValueError, AttributeError):
                    ports.add(int(str(worker.get("webuiaddress", "")).rsplit(":", 1)[1]))
        return ports


def _spark_home() -> Path:
    """The pyspark wheel's folder: it holds ``bin/spark-class`` and ``jars/``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError(
            "pyspark is not installed in this environment; the Spark cluster runs from its wheel"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _has_env(pid: int, key: str, value: str) -> bool:
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


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren...), from /proc; empty elsewhere."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _signal(group: int, pids: Sequence[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
