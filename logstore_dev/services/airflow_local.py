"""A real local Airflow for the embedded default: api-server, scheduler, dag-processor and triggerer.

All of it listens on 127.0.0.1 only (the scheduler and triggerer run without their log servers; the
API server reads the log files from the shared local folder). The metadata DB is SQLite under
``LOGSTORE_HOME/airflow``, or any database given as ``database_url`` (PostgreSQL in the cluster
profile, whose connections and variables come in ``extra_env``). Used by ``./dev airflow
up|down|status``, the cluster profile and the end-to-end tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import EXAMPLE_DAGS, LocalSettings, local_settings
from logstore_dev.services._process import ManagedProcess, stop_together

COMPONENTS: dict[str, list[str]] = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}


@dataclass
class LocalAirflow:
    settings: LocalSettings
    dags_folder: Path
    port: int = 8080
    home: Path | None = None
    #: the metadata DB (a SQLAlchemy URL); None: SQLite under ``home`` (the embedded default)
    database_url: str | None = None
    #: settings that replace the embedded default's (connections, variables, ``LOGSTORE_*``)
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.home = self.home or self.settings.home / "airflow"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_dir(self) -> Path:
        assert self.home is not None
        return self.home / "pids"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": "50",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_VAR_LOGSTORE_KAFKA_ADDRESS": self.settings.kafka_bootstrap,
            "LOGSTORE_HOME": str(self.settings.home),
            "LOGSTORE_CACHE": str(self.settings.cache),
            "LOGSTORE_KAFKA_PORT": str(self.settings.kafka_port),
            "PYSPARK_PYTHON": sys.executable,
        }
        if self.database_url:
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.database_url
        env.update(self.extra_env)
        env.update(extra or {})
        return env

    def airflow(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if check and done.returncode != 0:
            raise ServiceError(f"airflow {' '.join(args)} failed: {done.stderr[-2000:]}")
        return done

    def component(self, name: str) -> ManagedProcess:
        """Airflow component ``name``'s process: PID file in :attr:`pid_dir`, log ``<home>/<name>.log``."""
        assert self.home is not None
        home = self.home
        return ManagedProcess(
            f"Airflow's {name}",
            state_dir=home,
            pid_file=self.pid_dir / f"{name}.pid",
            log_file=home / f"{name}.log",
            # a live PID from the file is trusted, as ever: Airflow rewrites its process titles
            # (setproctitle), which can overwrite what /proc shows of its command line and environment
            is_ours=lambda pid: True,
        )

    def up(self, timeout: float = 180.0) -> None:
        assert self.home is not None
        self.home.mkdir(parents=True, exist_ok=True)
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.airflow("db", "migrate")
        for name, args in COMPONENTS.items():
            process = self.component(name)
            if process.pid() is None:
                command = [sys.executable, "-m", "airflow", *args]
                process.launch(command, env=self.env(), cwd=Path.cwd())  # where ``logstore`` runs
        self.wait_healthy(timeout)

    def _pid(self, name: str) -> int | None:
        return self.component(name).pid()

    def status(self) -> dict[str, Any]:
        try:
            health = self.get("/api/v2/monitor/health")
        except (OSError, ServiceError):
            health = None
        return {"url": self.url, "pids": {name: self._pid(name) for name in COMPONENTS}, "health": health}

    def down(self, timeout: float = 30.0) -> list[str]:
        """SIGTERM every component at once; SIGKILL what is left after ``timeout``; the names of those
        that were running."""
        stopped = stop_together([self.component(name) for name in COMPONENTS], timeout=timeout)
        return [name for name, was_running in zip(COMPONENTS, stopped, strict=True) if was_running]

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.get("/api/v2/monitor/health")
                if all(
                    (last.get(part) or {}).get("status") == "healthy"
                    for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
                ):
                    return
            except (OSError, ServiceError):
                pass
            time.sleep(1)
        raise ServiceError(f"Airflow at {self.url} is not healthy after {timeout:.0f}s: {last}")

    # -- REST API ------------------------------------------------------------------------------------

    def _token(self) -> str:
        # as long as a request's: the api-server answers nothing while it serves its first execution-API
        # request (a task starting), which took 17-19 s on a loaded machine
        with urllib.request.urlopen(f"{self.url}/auth/token", timeout=30) as response:
            return str(json.load(response)["access_token"])

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self._token()}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            raise ServiceError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:500]!r}") from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def set_paused(self, dag_id: str, paused: bool) -> bool:
        """Pause or unpause DAG ``dag_id``; return whether it was paused before."""
        was = bool(self.get(f"/api/v2/dags/{dag_id}")["is_paused"])
        if was != paused:
            self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})
        return was

    def trigger(self, dag_id: str, conf: Mapping[str, Any]) -> str:
        """Trigger a run the way the UI's trigger button does (a paused DAG, such as the maintenance
        DAGs, is unpaused: the scheduler runs no run of a paused DAG); return its run id."""
        self.set_paused(dag_id, False)
        run = self.request(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": dict(conf)}
        )
        return str(run["dag_run_id"])

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.get(f"/api/v2/dags/{dag_id}")
                return
            except ServiceError:
                time.sleep(2)
        raise ServiceError(f"DAG {dag_id} was not parsed within {timeout:.0f}s")

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 900.0) -> str:
        deadline = time.monotonic() + timeout
        state = "queued"
        while time.monotonic() < deadline:
            state = str(self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise ServiceError(f"run {run_id} of {dag_id} still {state} after {timeout:.0f}s")

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        found = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in found["task_instances"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        found = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
            "?full_content=true"
        )
        content = found.get("content")
        if isinstance(content, list):
            return "\n".join(json.dumps(item) if not isinstance(item, str) else item for item in content)
        return str(content)


def local_airflow(dags_folder: Path | None = None, port: int | None = None) -> LocalAirflow:

    return LocalAirflow(
        local_settings(),
        dags_folder or EXAMPLE_DAGS,
        port or int(os.environ.get("LOGSTORE_AIRFLOW_PORT", "8080")),
    )
