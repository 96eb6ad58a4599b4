"""The distributions under test, built once per run as a release builds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_logstore.testing.environment import REPO_ROOT


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
