"""Waiting for a process that stops at a pause point (:mod:`airflow_logstore.pause`'s file protocol)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_logstore.pause import pause_file


def wait_reached(process: subprocess.Popen[Any], folder: Path, point: str, timeout: float) -> None:
    """Return once ``process`` wrote ``point``'s *reached* file in ``folder`` (it waits there); fail if it
    ended first or ``timeout`` passed. Polls a file the process writes: nothing is lined up by time."""
    reached = pause_file(folder, point, "reached")
    deadline = time.monotonic() + timeout
    while not reached.exists():
        if process.poll() is not None:
            raise AssertionError(f"the process ended (exit code {process.returncode}) before {point}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the process did not reach {point} within {timeout:.0f}s")
        time.sleep(0.05)
