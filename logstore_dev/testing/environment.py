"""An isolated LogStore environment for tests: its own state folder, broker port and catalog.

The broker is started by the same code users run (``LocalBroker``), on free ports, with the jars from
the shared download cache, so parallel test sessions never collide.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_logstore.log import kafka_client
from airflow_logstore.settings import SOURCE_ROOT, LocalSettings, local_settings
from logstore_dev.services._process import java_tmpdir
from logstore_dev.services.local import BrokerOptions, LocalBroker, free_ports

REPO_ROOT = SOURCE_ROOT
# set (to anything but "" or "0") to keep an environment's folder after it ends, to look at what it left
KEEP_ENV = "LOGSTORE_KEEP_TEST_HOME"

log = logging.getLogger(__name__)


def dev_command(*args: str) -> list[str]:
    """``./dev``'s own command line in a new process: ``python -m logstore_dev ARGS`` (run it with
    :func:`with_checkout` in its environment)."""
    return [sys.executable, "-m", "logstore_dev", *args]


def with_checkout(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with the checkout first on ``PYTHONPATH``, as ``./dev`` runs its commands: the
    development package is imported from the repository, never installed."""
    path = environ.get("PYTHONPATH")
    return {**environ, "PYTHONPATH": f"{REPO_ROOT}:{path}" if path else str(REPO_ROOT)}


def free_port_pair() -> int:
    """A port p such that p and p+1 are free on 127.0.0.1."""
    return free_ports(1, consecutive=2)[0]


@dataclass
class LogStoreTestEnv:
    settings: LocalSettings
    broker: LocalBroker
    env: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def scratch(self, name: str) -> Path:
        """A new folder inside the environment's own, removed with it."""
        folder = self.settings.home / "scratch" / name
        folder.mkdir(parents=True)
        return folder

    def unique(self, prefix: str = "t") -> str:
        return f"{prefix}_{uuid.uuid4().hex[:8]}"

    def log_properties(self, topic: str, **extra: str) -> dict[str, str]:
        return {
            "log-store.enabled": "true",
            "log-store.topic": topic,
            "log-store.address": self.bootstrap,
            **extra,
        }

    def run_job(
        self,
        script: str,
        args: Sequence[str],
        *,
        timeout: float = 600,
        extra_env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``spark_jobs/<script>`` as its own process (a real driver that can die)."""
        command = [sys.executable, str(REPO_ROOT / "spark_jobs" / script), *args]
        env = {**os.environ, **self.env, **(extra_env or {})}
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def popen_job(
        self, script: str, args: Sequence[str], extra_env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        command = [sys.executable, str(REPO_ROOT / "spark_jobs" / script), *args]
        env = {**os.environ, **self.env, **(extra_env or {})}
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


@contextmanager
def logstore_environment(options: Mapping[str, Any] | None = None) -> Iterator[LogStoreTestEnv]:
    """Start a broker in a fresh state folder and point LOGSTORE_* at it for the duration.

    Spark's scratch folders (:func:`spark_scratch_env`) are in that folder too, also those of drivers a
    test killed, and the folder is removed at the end
    (unless ``LOGSTORE_KEEP_TEST_HOME`` is set): runs of the suite leave nothing behind in the temp dir.
    """
    home = Path(tempfile.mkdtemp(prefix="logstore-test-"))
    port = free_port_pair()
    cache = os.environ.get("LOGSTORE_CACHE") or str(REPO_ROOT / ".cache")
    env = {
        "LOGSTORE_HOME": str(home),
        "LOGSTORE_KAFKA_PORT": str(port),
        "LOGSTORE_CACHE": cache,
        **spark_scratch_env(home),
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    settings = local_settings()
    broker = LocalBroker(settings, options=BrokerOptions(port=port, **dict(options or {})))
    broker.up()
    try:
        yield LogStoreTestEnv(settings, broker, env)
    finally:
        kafka_client.close_shared_producers()
        broker.down()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        remove_home(home)


def spark_scratch_env(home: Path) -> dict[str, str]:
    """The variables that keep the Spark drivers' scratch in ``home``: ``SPARK_LOCAL_DIRS`` (the jars each
    session copies, shuffle blocks) and the drivers' ``java.io.tmpdir`` (through ``SPARK_SUBMIT_OPTS``,
    which ``spark-submit`` gives the driver's JVM: its ``spark-*`` folder and the native libraries it
    unpacks), so that what a killed driver leaves goes with ``home``."""
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    return {
        "SPARK_LOCAL_DIRS": str(home / "spark-local"),
        "SPARK_SUBMIT_OPTS": f"{options} {java_tmpdir(home / 'java-tmp')}".strip(),
    }


def remove_home(home: Path) -> None:
    if os.environ.get(KEEP_ENV, "") not in ("", "0"):
        log.warning("kept the test environment's folder %s (%s is set)", home, KEEP_ENV)
        return
    shutil.rmtree(home, ignore_errors=True)
