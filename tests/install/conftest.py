"""The distributions under test, built once per run as a release builds them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from logstore_dev.testing.environment import REPO_ROOT
from tests.environments import airflow_env


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``python -m build``: the sdist, then the wheel built from that sdist (as PyPI users get them)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="session")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The ``airflow`` environment (another Airflow 3.x release, cached) and the variables to run it."""
    folder = airflow_env()
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "VIRTUAL_ENV"))},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return folder, env
