"""A Spark standalone master and its workers on 127.0.0.1, from the pyspark wheel, for the cluster profile.

The wheel has ``bin/spark-class`` but no ``sbin`` start scripts, so each daemon is started as
``spark-class org.apache.spark.deploy.{master.Master,worker.Worker} ...`` in its own process group,
with its PID file and log under ``state_dir`` (``master/``, ``worker-<i>/``), and stopped by PID.

Each worker gets its own environment, as a separate host would have: its own work dir
(``SPARK_WORKER_DIR``), scratch dir (``SPARK_LOCAL_DIRS``), ``LOGSTORE_HOME`` (``worker-<i>/home``) and
its executors' ``java.io.tmpdir`` (``worker-<i>/tmp``), so nothing can rely on a folder shared with the
driver, and nothing a killed executor unpacked stays in the host's temp dir.

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
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings
from logstore_dev.services._process import (
    STATE_ENV,
    ManagedProcess,
    ensure_port_free,
    has_env,
    java_tmpdir,
    wait_for,
)
from logstore_dev.services.topology import SparkCluster

DAEMON_MEMORY = "256m"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


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
    """One Spark daemon: its folder, and its process (PID file and log in that folder), recognised by
    :data:`~logstore_dev.services._process.STATE_ENV` naming the folder in its environment (which
    survives spark-class's exec of java). Stopping it signals every process below it too: PySpark's
    daemon leaves the process group."""

    def __init__(self, name: str, folder: Path, ui_port: int) -> None:
        self.name = name
        self.folder = folder
        self.ui_port = ui_port
        self.process = ManagedProcess(
            f"Spark {name} (web UI 127.0.0.1:{ui_port})",
            state_dir=folder,
            pid_file=folder / f"{name.split('-')[0]}.pid",
            log_file=folder / f"{name.split('-')[0]}.log",
            is_ours=lambda pid: has_env(pid, STATE_ENV, str(folder)),
            stop_descendants=True,
        )

    @property
    def log_file(self) -> Path:
        return self.process.log_file

    def pid(self) -> int | None:
        """The daemon's pid while it runs (and is ours)."""
        return self.process.pid()

    def status(self) -> DaemonStatus:
        pid = self.pid()
        return DaemonStatus(self.name, pid is not None, pid, self.ui_port, self.log_file)

    def launch(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        self.process.launch(command, env=env, ports=[self.ui_port])


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
                ensure_port_free(self.spark.master_port, self.master.process.name)
                self.master.launch(self._master_command(), self._master_env())
                started.append(self.master)
            self._wait_master(timeout)
            for i, worker in enumerate(self.workers):
                if worker.pid() is None:
                    self._launch_worker(i)
                    started.append(worker)
            self._wait_workers(timeout, range(len(self.workers)))
        except ServiceError:
            for daemon in reversed(started):
                daemon.process.stop(timeout=5)
            raise
        return self.status()

    def down(self, timeout: float = 30.0) -> bool:
        """Stop the workers (with their executors), then the master, by pid; True when one ran."""
        stopped = [worker.process.stop(timeout=timeout) for worker in self.workers]
        return self.master.process.stop(timeout=timeout) or any(stopped)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and its executors (and their Python workers), as a lost host."""
        if not self.workers[i].process.kill():
            raise ServiceError(self.workers[i].process.failure("is not running"))

    def start_worker(self, i: int, timeout: float = 120.0) -> DaemonStatus:
        """Start worker ``i`` unless it runs; return once the master lists it as ALIVE."""
        if self.workers[i].pid() is None:
            self._launch_worker(i)
        self._wait_workers(timeout, [i])
        return self.workers[i].status()

    def _launch_worker(self, i: int) -> None:
        self.workers[i].launch(self._worker_command(i), self._worker_env(i))

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

    def _base_env(self, folder: Path) -> dict[str, str]:
        """A daemon's environment: loopback only, small heaps, no conf from elsewhere. Its conf folder
        (``folder/conf``) holds ``java-opts``, which Spark's launcher adds to every JVM it starts from
        there: the daemon's, and a worker's executors'. It puts their temporary files (the native
        libraries they unpack) in ``folder/tmp``, so a killed one leaves them in its state, not in the
        host's temp dir."""
        inherited = {
            k: v for k, v in os.environ.items() if not k.startswith(("LOGSTORE_", "SPARK_", "PYSPARK_"))
        }
        conf = folder / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "java-opts").write_text(java_tmpdir(folder / "tmp") + "\n")
        return {
            **inherited,
            "SPARK_HOME": str(_spark_home()),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
        }

    def _master_env(self) -> dict[str, str]:
        return self._base_env(self.master.folder)

    def _worker_env(self, i: int) -> dict[str, str]:
        """Worker ``i``'s own environment (inherited by its executors), as on a host of its own."""
        folder = self.workers[i].folder
        env = self._base_env(folder)
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

    def master_state(self) -> dict[str, object]:
        """The master's JSON status page (workers, applications)."""
        url = f"http://127.0.0.1:{self.spark.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            state: dict[str, object] = json.load(response)
        return state

    def _wait_master(self, timeout: float) -> None:
        where = f"127.0.0.1:{self.spark.master_ui_port}"
        self.master.process.wait_ready(self._master_answers, timeout=timeout, where=where)

    def _master_answers(self) -> bool:
        try:
            self.master_state()
        except (OSError, ValueError):
            return False
        return True

    def _wait_workers(self, timeout: float, indexes: Sequence[int]) -> None:
        """Wait until the master lists worker ``i`` (by its web UI port) as ALIVE, for each index."""

        def missing() -> str | None:
            alive = self._alive_worker_ports()
            absent = [i for i in indexes if self.workers[i].ui_port not in alive]
            return str(absent[0]) if absent else None

        def timed_out(first_missing: str) -> str:
            return self.workers[int(first_missing)].process.failure(
                f"was not ALIVE at the master {self.master_url} within {timeout:.0f}s"
            )

        wait_for(
            missing,
            timeout=timeout,
            processes=[self.workers[i].process for i in indexes],
            timed_out=timed_out,
            interval=0.3,
        )

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
